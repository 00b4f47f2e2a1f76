"""What reviewers and operators send a running run: a review decision, a budget decision, an
operator action and a revocation (signals and updates, decoded inside the workflow)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from workflows.payloads._base import (
    MAX_FEEDBACK_CHARS,
    MAX_TOKEN_CHARS,
    BudgetVerdict,
    Decision,
    NonBlank,
    ReviewerName,
    Text,
    _metadata_bounds,
    _Strict,
)

__all__ = [
    "BudgetDecision",
    "OperatorRequest",
    "ReviewDecision",
    "Revocation",
]


class ReviewDecision(_Strict):
    """Payload of the ``review`` signal and the ``submit_review`` update."""

    decision: Decision
    reviewer: ReviewerName
    feedback: Text | None = Field(default=None, max_length=MAX_FEEDBACK_CHARS)
    review_round: int | None = Field(
        default=None,
        ge=1,
        description="The round decided (RunStatus.review_round); a decision for any other "
        "round is refused, so a re-sent decision never lands on a later round",
    )
    fields: Annotated[dict[str, Any], AfterValidator(_metadata_bounds)] | None = Field(
        default=None,
        description="With approve, where the pipeline takes them (the document pipeline): the "
        "corrected fields, which replace the result's and are validated again",
    )
    token: str | None = Field(
        default=None,
        max_length=MAX_TOKEN_CHARS,
        description="Signed review token (required when the operator turns reviewer "
        "authentication on; see workflows/identity.py)",
    )


class OperatorRequest(_Strict):
    """Payload of the operator signals ``expire_review`` and ``dead_letter`` (both optional)."""

    operator: NonBlank = Field(default="operator", max_length=200)
    reason: Text | None = Field(default=None, max_length=500)


class Revocation(_Strict):
    """Payload of the ``revoke`` signal: reviewer keys (by key id) and reviewers a run must no
    longer accept, for runs planned while they were trusted."""

    operator: NonBlank = Field(default="operator", max_length=200)
    key_ids: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=100
    )
    reviewers: list[ReviewerName] = Field(default_factory=list, max_length=100)
    reason: Text | None = Field(default=None, max_length=500)


class BudgetDecision(_Strict):
    """Payload of the ``budget_decision`` signal and the ``decide_budget`` update: an
    operator's answer to a run waiting in ``await_budget``."""

    decision: BudgetVerdict
    operator: ReviewerName
    reason: Text | None = Field(default=None, max_length=500)
    token: str | None = Field(
        default=None,
        max_length=MAX_TOKEN_CHARS,
        description="Signed budget token (required by runs planned with reviewer "
        "authentication on; see workflows/engine/budget_tokens.py)",
    )
