"""Pydantic models for every payload: the wire contract shared by starter, workflow and activities.

New fields always get defaults, so histories recorded before a field existed still decode.
Inbound payloads (requests, reviews, LLM replies) forbid unknown fields so a typo is an error,
not silently ignored.

Sizes are bounded so no run can fail on Temporal's payload limits (warning at 256 KB, error at
2 MB): an inline ``user_message`` is at most ``MAX_INLINE_MESSAGE_BYTES`` (larger documents
travel by reference, ``file://`` or ``s3://``), metadata at most ``MAX_METADATA_BYTES``, feedback
at most ``MAX_FEEDBACK_CHARS`` (runs may set a lower limit).

History entries come in three kinds, all ``HistoryEntry``:

- a *transition* (``from_state != to_state`` or a graph self-edge): an edge of
  ``workflows.graph``, validated before it is recorded; ``event`` is a ``graph.Event``. Review
  decisions also carry ``reviewer``, ``feedback`` and ``review_round``.
- ``review_refused`` (``NOTE_REVIEW_REFUSED``): a review signal the run did not act on (wrong
  state, reviewer not allowed, round already decided, invalid payload); ``from_state ==
  to_state`` = the state the run stayed in, ``detail`` = the reason. Not a graph transition.
- ``continued_as_new`` (``NOTE_CONTINUED_AS_NEW``): a long reedit loop moved on to a fresh
  Temporal run carrying its state; ``from_state == to_state == "invoke_llm"``. Not a transition.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

REQUEST_ID_PATTERN = r"^[a-f0-9]{24}$"
REFERENCE_SCHEMES: Final = ("file://", "s3://")

ReviewMode = Literal["auto", "always", "never"]
Decision = Literal["approve", "reedit", "reject"]
FinalState = Literal["completed", "failed", "dead_letter"]

MAX_INLINE_MESSAGE_BYTES: Final = 256 * 1024
MAX_METADATA_BYTES: Final = 64 * 1024
MAX_FEEDBACK_CHARS: Final = 16 * 1024
MAX_REVIEWER_CHARS: Final = 200
NOTE_REVIEW_REFUSED: Final = "review_refused"
NOTE_CONTINUED_AS_NEW: Final = "continued_as_new"


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    return value


NonBlank = Annotated[str, AfterValidator(_not_blank)]
ReviewerName = Annotated[str, Field(max_length=MAX_REVIEWER_CHARS), AfterValidator(_not_blank)]


def _inline_size(value: str) -> str:
    size = len(value.encode("utf-8"))
    if size > MAX_INLINE_MESSAGE_BYTES:
        raise ValueError(
            f"is {size} bytes; inline messages are limited to {MAX_INLINE_MESSAGE_BYTES} bytes: "
            "pass a reference instead (file:///path or s3://bucket/key; "
            "`starter.py start --file PATH` stores the document for you)"
        )
    return value


def _metadata_size(value: dict[str, Any]) -> dict[str, Any]:
    size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES} bytes")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Open(BaseModel):
    """Outbound models ignore unknown fields so an older reader accepts a newer writer."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class RunOptions(_Strict):
    """Per-run overrides; anything left out comes from the worker's configuration."""

    review_timeout_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    escalation_timeout_s: float | None = Field(default=None, gt=0, le=365 * 86400)
    llm_max_attempts: int | None = Field(default=None, ge=1, le=100)
    allowed_reviewers: list[ReviewerName] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Who may review this run; unset = the worker's ALLOWED_REVIEWERS (or anyone)",
    )


class PipelineRequest(_Strict):
    """The workflow's input. ``request_id`` is also the workflow id."""

    request_id: str = Field(pattern=REQUEST_ID_PATTERN)
    user_message: Annotated[NonBlank, AfterValidator(_inline_size)] = Field(
        description="The message, or a reference to it: file:///path or s3://bucket/key"
    )
    review: ReviewMode = "auto"
    metadata: Annotated[dict[str, Any], AfterValidator(_metadata_size)] = Field(
        default_factory=dict
    )
    options: RunOptions = Field(default_factory=RunOptions)

    @property
    def is_reference(self) -> bool:
        """True when ``user_message`` names a document (loaded by activities), not the text."""
        return self.user_message.startswith(REFERENCE_SCHEMES)


class ReviewDecision(_Strict):
    """Payload of the ``review`` signal and the ``submit_review`` update."""

    decision: Decision
    reviewer: ReviewerName
    feedback: str | None = Field(default=None, max_length=MAX_FEEDBACK_CHARS)
    review_round: int | None = Field(
        default=None,
        ge=1,
        description="The round decided (RunStatus.review_round); a decision for any other "
        "round is refused, so a re-sent decision never lands on a later round",
    )


class OperatorRequest(_Strict):
    """Payload of the operator signals ``expire_review`` and ``dead_letter`` (both optional)."""

    operator: NonBlank = Field(default="operator", max_length=200)
    reason: str | None = Field(default=None, max_length=500)


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


class RunStatus(_Open):
    """Answer of the ``status`` query."""

    state: str
    status: str
    progress: int
    attempts: int
    model: str | None = None
    last_error: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    review_round: int = 0
    # Entries dropped from the front of ``history`` to keep a very long run's state bounded.
    history_dropped: int = 0


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

    content: str
    needs_review: bool


# Activity payloads: internal to the worker but recorded in history, so also versioned by default.


class PromptInput(_Open):
    request: PipelineRequest


class PromptPlan(_Open):
    """What ``fetch_prompt`` resolves once: the prompt and every setting the run will use.

    A request given by reference keeps only the reference here (``input_ref``); the LLM activity
    loads the document itself, so large inputs never enter workflow history.
    """

    system_prompt: str
    user_prompt: str
    input_ref: str | None = None
    llm_timeout_s: float = 60.0
    review_timeout_s: float
    escalation_timeout_s: float
    llm_max_attempts: int
    model: str
    fallback_model: str | None = None
    fallback_after: int = 2
    temperature: float = 0.2
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    # OTEL_CAPTURE_CONTENT of the worker that built the plan: prompt/reply text in spans.
    capture_content: bool = False
    # Reviewer authority and bounds, resolved once from the request and ALLOWED_REVIEWERS etc.
    allowed_reviewers: list[str] | None = None
    max_feedback_chars: int = MAX_FEEDBACK_CHARS
    max_reply_chars: int | None = None
    reedit_rounds_per_run: int = 50


class LlmCallInput(_Open):
    workflow_id: str
    system_prompt: str
    user_prompt: str
    input_ref: str | None = None
    model: str
    attempt: int
    temperature: float = 0.2
    feedback: list[str] = Field(default_factory=list)
    corrective: bool = False
    max_reply_chars: int | None = None


class TokenUsage(_Open):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class LlmCallResult(_Open):
    content: str
    needs_review: bool
    model: str
    usage: TokenUsage = Field(default_factory=TokenUsage)


class EmbeddingInput(_Open):
    workflow_id: str
    request_id: str
    content: str
    model: str | None = None


class EmbeddingResult(_Open):
    embedding_id: str
    dimensions: int


class DeadLetterInput(_Open):
    message: DeadLetterMessage


class DeadLetterReceipt(_Open):
    message_id: str
    queue_url: str


class CarriedState(_Open):
    """What a long run hands to the run that continues it (continue-as-new)."""

    state: str
    history: list[HistoryEntry] = Field(default_factory=list)
    history_dropped: int = 0
    attempts: int = 0
    consecutive_failures: int = 0
    corrective_next: bool = False
    model: str | None = None
    last_error: str | None = None
    feedback: list[str] = Field(default_factory=list)
    review_round: int = 0
    plan: PromptPlan


class ContinuedRun(_Strict):
    """Input of a continued run: the original request plus the carried state. Accepted only
    from continue-as-new (the workflow checks ``continued_run_id``), never from a client."""

    request: PipelineRequest
    carried: CarriedState


def describe_validation_error(err: ValidationError) -> str:
    """One line naming each offending field, for users rather than developers."""
    problems = []
    for item in err.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(payload)"
        problems.append(f"{field}: {item['msg']}")
    return "; ".join(problems)


ALL_MODELS: tuple[type[BaseModel], ...] = (
    PipelineRequest,
    RunOptions,
    ReviewDecision,
    OperatorRequest,
    HistoryEntry,
    RunStatus,
    PipelineResult,
    DeadLetterMessage,
    LlmReply,
)
