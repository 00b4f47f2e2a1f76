"""The payloads clients send and receive: the request, reviews, operator and budget decisions,
the status, the result, history entries and the dead-letter message."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field

from workflows.payloads._base import (
    DEFAULT_TENANT,
    MAX_FEEDBACK_CHARS,
    MAX_TOKEN_CHARS,
    REFERENCE_SCHEMES,
    REQUEST_ID_PATTERN,
    TENANT_PATTERN,
    BudgetVerdict,
    Decision,
    FinalState,
    NonBlank,
    ReviewerName,
    ReviewMode,
    Text,
    _inline_size,
    _metadata_bounds,
    _Open,
    _Strict,
)

__all__ = [
    "ALL_MODELS",
    "BudgetDecision",
    "DeadLetterMessage",
    "HistoryEntry",
    "LlmReply",
    "OperatorRequest",
    "PipelineRequest",
    "PipelineResult",
    "ReviewDecision",
    "ReviewKey",
    "RunOptions",
    "RunProgress",
    "RunStatus",
]


class RunOptions(_Strict):
    """Per-run overrides; anything left out comes from the worker's configuration."""

    review_timeout_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    escalation_timeout_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    llm_max_attempts: int | None = Field(default=None, ge=1, le=100)
    allowed_reviewers: list[ReviewerName] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Narrows who may review this run: only names the worker's ALLOWED_REVIEWERS "
        "also allows (all of them when the worker allows anyone); never widens that set",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="This run's cost ceiling in USD: lowers the worker's RUN_BUDGET_USD, never "
        "raises it",
    )


class PipelineRequest(_Strict):
    """The workflow's input. ``request_id`` is also the workflow id."""

    request_id: str = Field(pattern=REQUEST_ID_PATTERN)
    user_message: Annotated[NonBlank, AfterValidator(_inline_size)] = Field(
        description="The message, or a reference to it: file:///path or s3://bucket/key"
    )
    review: ReviewMode = Field(
        default="auto",
        description="May raise the operator's REVIEW_MIN (never < auto < always), never lower it",
    )
    metadata: Annotated[dict[str, Any], AfterValidator(_metadata_bounds)] = Field(
        default_factory=dict
    )
    options: RunOptions = Field(default_factory=RunOptions)
    requested_by: ReviewerName | None = Field(
        default=None, description="Who asked for this run; that reviewer may not review it"
    )
    tenant: str | None = Field(
        default=None,
        pattern=TENANT_PATTERN,
        description="Whose daily budget this run spends (TENANT_BUDGETS_USD); none = "
        f"{DEFAULT_TENANT!r}",
    )

    @property
    def is_reference(self) -> bool:
        """True when ``user_message`` names a document (loaded by activities), not the text."""
        return self.user_message.startswith(REFERENCE_SCHEMES)


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


class BudgetDecision(_Strict):
    """Payload of the ``budget_decision`` signal and the ``decide_budget`` update: an
    operator's answer to a run waiting in ``await_budget``."""

    decision: BudgetVerdict
    operator: ReviewerName
    reason: Text | None = Field(default=None, max_length=500)


class HistoryEntry(_Open):
    """One entry of a run's history: a transition, or a note (see the module docstring)."""

    from_state: str
    to_state: str
    event: str
    at: datetime
    attempt: int = 0
    detail: str | None = None
    reviewer: str | None = None
    feedback: str | None = None
    review_round: int | None = None


class RunProgress(BaseModel):
    """What a run has done so far: declared once for the state the workflow holds
    (``RunState``) and the ``status`` query's answer (``RunStatus``), which copies it."""

    attempts: int = 0
    model: str | None = None
    last_error: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    review_round: int = 0
    # Entries dropped from the front of ``history`` to keep a very long run's state bounded.
    history_dropped: int = 0
    # Reviews the run refused (wrong state or round, reviewer not allowed, unsigned, ...).
    reviews_refused: int = 0
    last_refusal: str | None = None
    # What the run's LLM calls cost so far (LLM_PRICE_TABLE).
    cost_usd: float = 0.0
    # Budget decisions the run refused (sent while it was not waiting for one).
    budget_decisions_refused: int = 0


class RunStatus(RunProgress, _Open):
    """Answer of the ``status`` query: the run's progress, where it is, and its tenant."""

    state: str
    status: str
    progress: int
    tenant: str | None = None


class PipelineResult(_Open):
    """The workflow's result."""

    request_id: str
    state: FinalState
    content: str | None = None
    model: str | None = None
    embedding_id: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)


class DeadLetterMessage(_Open):
    """Body of the SQS message sent when a run gives up."""

    workflow_id: str
    run_id: str
    request: dict[str, Any]
    failed_state: str
    attempts: int
    last_error: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)


class LlmReply(_Strict):
    """What the model must answer (as JSON); anything else is a malformed reply."""

    content: Text
    needs_review: bool


class ReviewKey(_Open):
    """A public key that may sign reviews (see ``workflows.identity``)."""

    key_id: str
    public_key: str = Field(description="the raw 32-byte Ed25519 public key, base64")
    reviewers: list[str] | None = Field(
        default=None, description="whom it may sign for; None = anyone (an identity provider)"
    )


ALL_MODELS: tuple[type[BaseModel], ...] = (
    PipelineRequest,
    RunOptions,
    ReviewDecision,
    OperatorRequest,
    BudgetDecision,
    HistoryEntry,
    RunStatus,
    PipelineResult,
    DeadLetterMessage,
    LlmReply,
)
