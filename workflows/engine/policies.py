"""Review policies, as pure functions over a run's plan and state: which stage of the review's
escalation chain decides now, who may decide at that stage, where the round's quorum stands,
and whether an auto-approve rule approves a result.

A plan holds at most two stages: the review (the graph's review state) and its escalation
(the escalation state), each a group of reviewers and the approvals it needs from distinct
members; ``RunPolicy.rejections`` rejections end a round (one, unless the policy says more). A
plan without stages has the engine's first rule, as every plan had before policies: one
decision from one reviewer the plan allows decides the round, from either state.

Approvals short of the quorum are votes: counted (``RunCore.votes``, at most one per reviewer
a round, and, in plans that say ``quorum_counts_keys``, one per key that signs for named
reviewers: see `voter`) without moving the run. A vote counts at the stage it was cast and, after an
escalation, wherever its reviewer may decide too; a vote of a reviewer or a key revoked since
stops counting.

Auto-approve rules read the facts a pipeline gives about its result (``Pipeline.subject``);
a fact the result does not have, or one of another type than the test's value, never passes,
so a rule approves only what it positively matches, and a rule can only approve.

Workflow code, passed through the sandbox; deterministic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import jwt

from workflows.engine.graph import Graph, Role
from workflows.payloads import (
    AutoApproveRule,
    Condition,
    FactValue,
    ReviewDecision,
    ReviewProgress,
    ReviewStage,
    RunCore,
    RunPolicy,
    Vote,
)

# A stage index per review role: the review, then its escalation.
STAGE_OF_ROLE: Final = {Role.REVIEW.value: 0, Role.ESCALATION.value: 1}
# A text fact compares as a number with a number only when it is written as one ("1234.50").
_DECIMAL: Final = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


def stage_index(graph: Graph, state: str) -> int:
    """The stage of the chain a run waiting in ``state`` is at (0 outside a review state)."""
    return STAGE_OF_ROLE.get(graph.info(state).role.value, 0)


def stage(plan: RunPolicy, index: int) -> ReviewStage:
    """Stage ``index`` of the plan's chain; for a plan without stages, the engine's rule (one
    approval from anyone the plan allows, at every stage)."""
    if not plan.review_stages:
        return ReviewStage(reviewers=plan.allowed_reviewers)
    return plan.review_stages[min(index, len(plan.review_stages) - 1)]


def eligible(plan: RunPolicy, current: ReviewStage, reviewer: str) -> bool:
    """Whether ``reviewer`` may decide at ``current``: the stage's reviewers (resolved from its
    group, within the plan's allowed reviewers) and the plan's allowed reviewers."""
    allowed = plan.allowed_reviewers is None or reviewer in plan.allowed_reviewers
    in_stage = current.reviewers is None or reviewer in current.reviewers
    return allowed and in_stage


def progress(graph: Graph, run: RunCore[Any]) -> ReviewProgress | None:
    """Where the round stands while the run waits for a reviewer (None when it does not)."""
    plan = run.plan
    if plan is None or run.state not in graph.review_states:
        return None
    index = stage_index(graph, run.state)
    current = stage(plan, index)

    def counted(decision: str) -> list[str]:
        return [
            vote.reviewer
            for vote in run.votes
            if vote.decision == decision
            and eligible(plan, current, vote.reviewer)
            and vote.reviewer not in run.revoked_reviewers
            and (vote.key_id is None or vote.key_id not in run.revoked_keys)
        ]

    return ReviewProgress(
        policy=plan.review_policy,
        stage=index,
        stages=len(plan.review_stages) or 2,
        group=current.group,
        reviewers=current.reviewers,
        approvals=counted("approve"),
        approvals_needed=current.approvals,
        rejections=counted("reject"),
        rejections_needed=plan.rejections,
    )


def voter(plan: RunPolicy, reviewer: str, key_id: str | None) -> str:
    """Who casts a vote: the key that signed it, when that key signs for named reviewers (one
    holder of a key for ``alice|bob`` is one person), else the reviewer it names (a key that
    signs for anyone, such as the inbox's, vouches for each reviewer it authenticated)."""
    key = next((key for key in plan.review_keys if key.key_id == key_id), None)
    if key is None or key.reviewers is None:
        return f"reviewer:{reviewer}"
    return f"key:{key.key_id}"


def signing_key(decision: ReviewDecision) -> str | None:
    """The id of the key that signed ``decision`` (its token's ``kid``), if it is signed. Read
    only from a token the rules already verified."""
    if not decision.token:
        return None
    try:
        key_id = jwt.get_unverified_header(decision.token).get("kid")
    except jwt.PyJWTError:
        return None
    return key_id if isinstance(key_id, str) else None


def same_voter(plan: RunPolicy, run: RunCore[Any], decision: ReviewDecision) -> Vote | None:
    """The vote this round that the key signing ``decision`` already cast under another name
    (plans that count keys: ``quorum_counts_keys``), if any."""
    if not plan.quorum_counts_keys or decision.decision not in ("approve", "reject"):
        return None
    casting = voter(plan, decision.reviewer, signing_key(decision))
    return next(
        (v for v in run.votes if voter(plan, v.reviewer, v.key_id) == casting),
        None,
    )


def decides(current: ReviewProgress, decision: str, reviewer: str) -> bool:
    """Whether ``reviewer``'s ``decision`` ends the round now: a reedit or a correction always
    does; an approval or a rejection once, with it, as many distinct reviewers agree as the
    stage (or the policy) needs."""
    if decision == "approve":
        return len({*current.approvals, reviewer}) >= current.approvals_needed
    if decision == "reject":
        return len({*current.rejections, reviewer}) >= current.rejections_needed
    return True


def matching_rule(
    rules: Sequence[AutoApproveRule], facts: Mapping[str, FactValue]
) -> AutoApproveRule | None:
    """The first rule every test of which the facts pass, if any."""
    return next((rule for rule in rules if all(holds(c, facts) for c in rule.when)), None)


def holds(condition: Condition, facts: Mapping[str, FactValue]) -> bool:
    """Whether the facts pass ``condition`` (a missing fact never does)."""
    if condition.fact not in facts:
        return False
    fact, value = facts[condition.fact], condition.value
    match condition.op:
        case "in":
            return isinstance(value, list) and any(_equal(fact, item) for item in value)
        case "not_in":
            return isinstance(value, list) and not any(_equal(fact, item) for item in value)
        case "==":
            return _equal(fact, value)
        case "!=":
            return not isinstance(value, list) and not _equal(fact, value)
    left, right = _number(fact), _number(value)
    if left is None or right is None:
        return False
    match condition.op:
        case "<":
            return left < right
        case "<=":
            return left <= right
        case ">":
            return left > right
        case _:
            return left >= right


def _number(value: object) -> float | None:
    """``value`` as a finite number: a number (never a bool), or a text written as a decimal."""
    if isinstance(value, bool) or value is None:
        return None
    if not isinstance(value, int | float | str) or (
        isinstance(value, str) and not _DECIMAL.match(value)
    ):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _equal(fact: FactValue, value: object) -> bool:
    if isinstance(fact, bool) or isinstance(value, bool):
        return fact is value
    if isinstance(value, int | float):
        number = _number(fact)
        return number is not None and number == float(value)
    return fact == value
