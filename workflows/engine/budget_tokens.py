"""Who decided a budget: signed budget-decision tokens, verified inside the workflow.

Under reviewer keys (``REVIEW_PUBLIC_KEYS``), a run planned since budget decisions are signed
(``RunPolicy.budget_decisions_signed``) takes a budget decision only with a token (a compact
JWS signed with Ed25519, as review tokens are, ``workflows.engine.identity``) whose claims bind
it to one decision of one operator on one run chain:

========== ==========================================================================
``aud``    ``ai-orchestrator/budget``
``sub``    the operator; the key must be allowed to sign for this name
``wid``    the workflow id
``rid``    the run chain's first execution run id
``dec``    ``approve`` or ``reject``
``iat``    issued at (seconds since the epoch)
``exp``    expires at; checked against workflow time, never the wall clock
========== ==========================================================================

Deterministic; the signing half lives with the operator's tools (``aiorch.ops.signing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

import workflows.engine.identity as identity
from workflows.payloads import BudgetDecision, ReviewKey

BUDGET_AUDIENCE = "ai-orchestrator/budget"


class BudgetClaims(BaseModel):
    """The claims of a budget decision's token: who decided what, for which run chain."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    aud: str
    sub: str = Field(min_length=1, max_length=200)
    wid: str
    rid: str
    dec: str
    iat: int
    exp: int


def budget_claims_for(
    decision: BudgetDecision, *, workflow_id: str, run_id: str, issued: datetime, ttl: timedelta
) -> dict[str, object]:
    """The claims a signer puts in a budget decision's token (the verifier checks the same)."""
    issued_s = int(issued.timestamp())
    return {
        "aud": BUDGET_AUDIENCE,
        "sub": decision.operator,
        "wid": workflow_id,
        "rid": run_id,
        "dec": decision.decision,
        "iat": issued_s,
        "exp": issued_s + max(1, int(ttl.total_seconds())),
    }


def budget_token_problem(
    decision: BudgetDecision, *, keys: Sequence[ReviewKey], expected: identity.Expected
) -> str | None:
    """Why ``decision``'s token does not authenticate its operator's decision for this run
    chain, or None when it does (``expected.review_round`` is not used)."""
    if not decision.token:
        return "budget decision is not signed (authentication is on: send a signed token)"
    verified = identity.verified_token(decision.token, keys, BudgetClaims, "budget token")
    if isinstance(verified, str):
        return verified
    claims, key = verified
    if claims.aud != BUDGET_AUDIENCE:
        return "budget token is not meant for budget decisions"
    if claims.sub != decision.operator:
        return "budget token was issued to another operator"
    if key.reviewers is not None and claims.sub not in key.reviewers:
        return f"key {key.key_id!r} may not sign for this operator"
    if claims.wid != expected.workflow_id or claims.rid != expected.run_id:
        return "budget token was issued for another run"
    if claims.dec != decision.decision:
        return "budget token was issued for another decision"
    now_s = expected.now.timestamp()
    if claims.exp <= now_s:
        return "budget token has expired"
    if claims.iat > now_s + identity.CLOCK_SKEW.total_seconds():
        return "budget token is issued in the future"
    return None
