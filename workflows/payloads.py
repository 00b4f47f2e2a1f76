"""Pydantic models for every payload: the wire contract shared by starter, workflow and activities.

New fields always get defaults, so histories recorded before a field existed still decode.
Inbound payloads (requests, reviews, LLM replies) forbid unknown fields so a typo is an error,
not silently ignored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

REQUEST_ID_PATTERN = r"^[a-f0-9]{24}$"

ReviewMode = Literal["auto", "always", "never"]
Decision = Literal["approve", "reedit", "reject"]
FinalState = Literal["completed", "failed", "dead_letter"]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    return value


NonBlank = Annotated[str, AfterValidator(_not_blank)]


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


class PipelineRequest(_Strict):
    """The workflow's input. ``request_id`` is also the workflow id."""

    request_id: str = Field(pattern=REQUEST_ID_PATTERN)
    user_message: NonBlank = Field(
        description="The message, or a reference to it: file:///path or s3://bucket/key"
    )
    review: ReviewMode = "auto"
    metadata: dict[str, Any] = Field(default_factory=dict)
    options: RunOptions = Field(default_factory=RunOptions)


class ReviewDecision(_Strict):
    """Payload of the ``review`` signal and the ``submit_review`` update."""

    decision: Decision
    reviewer: NonBlank
    feedback: str | None = None


class HistoryEntry(_Open):
    """One state change of a run."""

    from_state: str
    to_state: str
    event: str
    at: datetime
    attempt: int = 0
    detail: str | None = None


class RunStatus(_Open):
    """Answer of the ``status`` query."""

    state: str
    status: str
    progress: int
    attempts: int
    model: str | None = None
    last_error: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)


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
    HistoryEntry,
    RunStatus,
    PipelineResult,
    DeadLetterMessage,
    LlmReply,
)
