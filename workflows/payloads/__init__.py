"""Pydantic models for every payload: the wire contract shared by starter, workflow and activities.

New fields always get defaults, so histories recorded before a field existed still decode.
Inbound payloads (requests, reviews, LLM replies) forbid unknown fields so a typo is an error,
not silently ignored.

Sizes are bounded so no run can fail on Temporal's payload limits (warning at 256 KB, error at
2 MB): an inline ``user_message`` is at most ``MAX_INLINE_MESSAGE_BYTES`` (larger documents
travel by reference, ``file://`` or ``s3://``), metadata at most ``MAX_METADATA_BYTES``, feedback
at most ``MAX_FEEDBACK_CHARS`` (runs may set a lower limit).

Every text a client sends must be valid Unicode (no lone surrogates, which no payload could
carry onwards), and metadata is bounded in size and depth.

History entries come in two kinds, both ``HistoryEntry``:

- a *transition*: an edge of ``workflows.graph``, validated before it is recorded; ``event`` is
  a ``graph.Event``. Review decisions also carry ``reviewer``, ``feedback`` and ``review_round``.
- ``continued_as_new`` (``NOTE_CONTINUED_AS_NEW``): the run moved on to a fresh Temporal run
  carrying its state; ``from_state == to_state``. Not a transition.

Reviews the run refused are counted (``RunStatus.reviews_refused``), never stored one by one,
so no sender can grow a run's state.
"""

from workflows.payloads._base import (
    DEFAULT_TENANT,
    MAX_FEEDBACK_CHARS,
    MAX_INLINE_MESSAGE_BYTES,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_REVIEWER_CHARS,
    MAX_TOKEN_CHARS,
    NOTE_CONTINUED_AS_NEW,
    REFERENCE_SCHEMES,
    REQUEST_ID_PATTERN,
    RESUMABLE_STATES,
    TENANT_PATTERN,
    BudgetPolicy,
    BudgetVerdict,
    Decision,
    FinalState,
    NonBlank,
    ReviewerName,
    ReviewMode,
    Text,
    describe_validation_error,
    printable,
)
from workflows.payloads.activity import (
    CallOutcome,
    ContinuationCheck,
    ContinuationVerdict,
    DeadLetterInput,
    DeadLetterReceipt,
    EmbeddingInput,
    EmbeddingResult,
    LlmCallInput,
    LlmCallResult,
    NoticeReason,
    PromptInput,
    PromptPlan,
    ReviewNotice,
    TokenUsage,
)
from workflows.payloads.client import (
    ALL_MODELS,
    BudgetDecision,
    DeadLetterMessage,
    HistoryEntry,
    LlmReply,
    OperatorRequest,
    PipelineRequest,
    PipelineResult,
    ReviewDecision,
    ReviewKey,
    RunOptions,
    RunStatus,
)
from workflows.payloads.state import (
    ContinuedRun,
    RunState,
)

__all__ = [
    "ALL_MODELS",
    "DEFAULT_TENANT",
    "MAX_FEEDBACK_CHARS",
    "MAX_INLINE_MESSAGE_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_METADATA_DEPTH",
    "MAX_REVIEWER_CHARS",
    "MAX_TOKEN_CHARS",
    "NOTE_CONTINUED_AS_NEW",
    "REFERENCE_SCHEMES",
    "REQUEST_ID_PATTERN",
    "RESUMABLE_STATES",
    "TENANT_PATTERN",
    "BudgetDecision",
    "BudgetPolicy",
    "BudgetVerdict",
    "CallOutcome",
    "ContinuationCheck",
    "ContinuationVerdict",
    "ContinuedRun",
    "DeadLetterInput",
    "DeadLetterMessage",
    "DeadLetterReceipt",
    "Decision",
    "EmbeddingInput",
    "EmbeddingResult",
    "FinalState",
    "HistoryEntry",
    "LlmCallInput",
    "LlmCallResult",
    "LlmReply",
    "NonBlank",
    "NoticeReason",
    "OperatorRequest",
    "PipelineRequest",
    "PipelineResult",
    "PromptInput",
    "PromptPlan",
    "ReviewDecision",
    "ReviewKey",
    "ReviewMode",
    "ReviewNotice",
    "ReviewerName",
    "RunOptions",
    "RunState",
    "RunStatus",
    "Text",
    "TokenUsage",
    "describe_validation_error",
    "printable",
]
