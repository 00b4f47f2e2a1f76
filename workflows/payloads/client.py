"""The payloads clients send and receive: the request, the status, the result, history
entries and the dead-letter message (and, from ``decisions``, what reviewers and operators
send a running run); ``ALL_MODELS`` names those the contract's schemas cover."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field

from workflows.contract import WORKFLOW_TYPE
from workflows.payloads._base import (
    DEFAULT_TENANT,
    MAX_TOKEN_CHARS,
    REFERENCE_SCHEMES,
    REQUEST_ID_PATTERN,
    TENANT_PATTERN,
    Decision,
    FinalState,
    Lane,
    NonBlank,
    ReviewerName,
    ReviewMode,
    Text,
    _inline_size,
    _metadata_bounds,
    _Open,
    _Strict,
)
from workflows.payloads.decisions import BudgetDecision
from workflows.payloads.policy import Correction, ReviewProgress

__all__ = [
    "BudgetDecision",
    "DeadLetterMessage",
    "HistoryEntry",
    "LlmReply",
    "PipelineRequest",
    "PipelineResult",
    "RequestBase",
    "RequesterKey",
    "ReviewContent",
    "ReviewKey",
    "ReviewSection",
    "ReviewView",
    "RunOptions",
    "RunProgress",
    "RunResult",
    "RunStatus",
]


class RunOptions(_Strict):
    """Per-run overrides; anything left out comes from the worker's configuration."""

    review_timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=365 * 86400,
        description="Lowers the worker's REVIEW_TIMEOUT_S for this run, never raises it",
    )
    escalation_timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=365 * 86400,
        description="Lowers the worker's ESCALATION_TIMEOUT_S for this run, never raises it",
    )
    llm_max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Lowers the worker's LLM_MAX_ATTEMPTS for this run, never raises it",
    )
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
    lane: Lane | None = Field(
        default=None,
        description="How this run's model calls are made: sync, or batch (the provider's batch "
        "API: about half the price, answers within 24 h), where LLM_BATCH allows it; none = "
        "the worker's default",
    )
    result_cache: bool | None = Field(
        default=None,
        description="False: this run's model calls always reach the model, even where the "
        "worker answers identical calls from its result cache (LLM_RESULT_CACHE_TTL_S)",
    )
    batch_eligible: bool = Field(
        default=False,
        description="True: this run's model calls may wait: one that would queue for capacity "
        "longer than SPILL_OVER_WAIT_S goes through the batch lane instead (about half the "
        "price, answers within 24 h), where SPILL_OVER is on",
    )
    priority: int | None = Field(
        default=None,
        ge=1,
        le=5,
        description="How urgent this run is, 1 (most) to 5: its model calls are served first "
        "within its tenant's share of a model, and its model calls' tasks first from the task "
        "queue; never more urgent than the tenant's TENANT_MAX_PRIORITY; none = 3",
    )


class RequestBase(_Strict):
    """What every pipeline's start input holds besides its own content: the request id (also
    the workflow id), the review level asked for, context, per-run options, who asked and whose
    budget the run spends."""

    request_id: str = Field(pattern=REQUEST_ID_PATTERN)
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
        f"{DEFAULT_TENANT!r}. With budgets on, a tenant without a budget is refused",
    )
    start_claim: str | None = Field(
        default=None,
        max_length=MAX_TOKEN_CHARS,
        description="A requester's signed claim for this request (required when the workers "
        "configure REQUESTER_PUBLIC_KEYS): it names the requester, and their key the tenant",
    )

    def describe(self) -> str:
        """One line about what the run works on, for its Web UI details (content stays short)."""
        return f"request {self.request_id}"


class PipelineRequest(RequestBase):
    """The LLM pipeline's input: a message for the model. ``request_id`` is also the workflow
    id."""

    user_message: Annotated[NonBlank, AfterValidator(_inline_size)] = Field(
        description="The message, or a reference to it: file:///path or s3://bucket/key"
    )

    @property
    def is_reference(self) -> bool:
        """True when ``user_message`` names a document (loaded by activities), not the text."""
        return self.user_message.startswith(REFERENCE_SCHEMES)

    def describe(self) -> str:
        """The request id and the start of its message (or its reference)."""
        return f"request {self.request_id}: {self.user_message[:200]}"


class HistoryEntry(_Open):
    """One entry of a run's history: a transition, or a note (see the module docstring).

    Under a review policy, a decision and a vote name the ``group`` that decided, an approval by
    an auto-approve ``rule`` names the rule (and no reviewer), and a vote says what it was
    (``vote``)."""

    from_state: str
    to_state: str
    event: str
    at: datetime
    attempt: int = 0
    detail: str | None = None
    reviewer: str | None = None
    feedback: str | None = None
    review_round: int | None = None
    group: str | None = None
    rule: str | None = None
    vote: Decision | None = None


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
    # The provider's batch that holds (or answered) the run's latest model call, in the batch
    # lane.
    batch_id: str | None = None


class RunStatus(RunProgress, _Open):
    """Answer of the ``status`` query: the run's progress, where it is, its tenant, the
    pipeline (workflow type) it runs, for a pipeline defined as data the version it follows
    (``VERSION@SHA256-PREFIX``: the file's version and the start of its hash), the rollout
    variant it was planned with (``EXPERIMENT/VARIANT``), and, while it waits for a reviewer,
    where the round stands under its review policy (``review``: who approved, how many more it
    needs)."""

    state: str
    status: str
    progress: int
    tenant: str | None = None
    pipeline: str | None = None
    pipeline_version: str | None = None
    variant: str | None = None
    review: ReviewProgress | None = None


class ReviewSection(_Open):
    """One titled block of text a reviewer reads (the prompt, the reply, the document);
    ``key`` names it for pages and scripts (``request``, ``reply``, ...)."""

    title: str
    text: str
    key: str = ""


class ReviewContent(_Open):
    """What a pipeline shows a reviewer of a run: a ``title`` (what the run works on), a
    ``headline`` (the result under review, short), titled ``sections`` of text, the result's
    ``fields`` a reviewer may correct (approving with corrected fields, where ``corrections``
    is true) and the ``problems`` validation found."""

    title: str = ""
    headline: str = ""
    sections: list[ReviewSection] = Field(default_factory=list)
    fields: dict[str, Any] | None = None
    problems: list[str] = Field(default_factory=list)
    corrections: bool = False

    def digest(self) -> str:
        """SHA-256 (hex) of this content as canonical JSON: what a signed review that names it
        approves (its ``ch`` claim)."""
        canonical = json.dumps(
            self.model_dump(mode="json", include=set(ReviewContent.model_fields)),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ReviewView(ReviewContent):
    """Answer of the ``review_view`` query: a run as a reviewer sees it, its pipeline's
    content with where the run is, until when it waits, who may decide and its history."""

    pipeline: str
    state: str
    status: str
    # The run chain's first run id and the digest of the content above: what a signed review
    # for this round names (its rid and ch claims).
    chain_id: str = ""
    content_digest: str = ""
    review_round: int = 0
    waiting: bool = False
    deadline: datetime | None = None
    requested_by: str | None = None
    # Who may decide the round now (the current stage's reviewers, under a review policy).
    allowed_reviewers: list[str] | None = None
    model: str | None = None
    # The rollout variant the run was planned with (EXPERIMENT/VARIANT).
    variant: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    history_dropped: int = 0
    # Where the round stands under the run's review policy, while it waits.
    review: ReviewProgress | None = None


class RunResult(_Open):
    """What every pipeline's run returns: the request, the final state, the history and the
    corrections its reviewers made (reedits and corrected fields, as evaluation data; the
    oldest are dropped past a bound, ``corrections_dropped``); a pipeline's result adds its own
    fields."""

    request_id: str
    state: FinalState
    history: list[HistoryEntry] = Field(default_factory=list)
    corrections: list[Correction] = Field(default_factory=list)
    corrections_dropped: int = 0


class PipelineResult(RunResult):
    """The LLM pipeline's result: the answer, the model that gave it, the stored vector."""

    content: str | None = None
    model: str | None = None
    embedding_id: str | None = None


class DeadLetterMessage(_Open):
    """Body of the SQS message sent when a run gives up."""

    workflow_id: str
    run_id: str
    # The pipeline the run ran (its workflow type); messages written before pipelines had
    # names came from the LLM pipeline.
    workflow_type: str = WORKFLOW_TYPE
    request: dict[str, Any]
    failed_state: str
    attempts: int
    last_error: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)


class LlmReply(_Strict):
    """What the model must answer (as JSON); anything else is a malformed reply. ``confidence``
    (0 to 1) is optional: review policies' auto-approve rules can read it."""

    content: Text
    needs_review: bool
    confidence: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)


class RequesterKey(_Open):
    """A public key that signs a requester's starts (see ``workflows.engine.identity``): the
    requester is its key id, and its runs spend ``tenant``'s budget."""

    key_id: str
    public_key: str = Field(description="the raw 32-byte Ed25519 public key, base64")
    tenant: str


class ReviewKey(_Open):
    """A public key that may sign reviews (see ``workflows.engine.identity``)."""

    key_id: str
    public_key: str = Field(description="the raw 32-byte Ed25519 public key, base64")
    reviewers: list[str] | None = Field(
        default=None, description="whom it may sign for; None = anyone (an identity provider)"
    )
