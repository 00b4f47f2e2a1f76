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

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from workflows.graph import State

REQUEST_ID_PATTERN = r"^[a-f0-9]{24}$"
# A tenant name: a key in the capacity store and a metric label, so short and plain.
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# Runs that name no tenant spend as this one.
DEFAULT_TENANT: Final = "default"
REFERENCE_SCHEMES: Final = ("file://", "s3://")

ReviewMode = Literal["auto", "always", "never"]
Decision = Literal["approve", "reedit", "reject"]
BudgetVerdict = Literal["approve", "reject"]
BudgetPolicy = Literal["wait", "fail"]
FinalState = Literal["completed", "failed", "dead_letter"]

MAX_INLINE_MESSAGE_BYTES: Final = 256 * 1024
MAX_METADATA_BYTES: Final = 64 * 1024
MAX_FEEDBACK_CHARS: Final = 16 * 1024
MAX_REVIEWER_CHARS: Final = 200
MAX_METADATA_DEPTH: Final = 16
MAX_TOKEN_CHARS: Final = 8192
NOTE_CONTINUED_AS_NEW: Final = "continued_as_new"
# The states a continued run may resume in: the safe points where a run continues as new.
RESUMABLE_STATES: Final = frozenset({State.INVOKE_LLM, State.AWAIT_REVIEW, State.ESCALATE})


def _unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode (it holds a lone surrogate)") from None
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    return value


Text = Annotated[str, AfterValidator(_unicode)]
NonBlank = Annotated[str, AfterValidator(_unicode), AfterValidator(_not_blank)]
ReviewerName = Annotated[
    str, Field(max_length=MAX_REVIEWER_CHARS), AfterValidator(_unicode), AfterValidator(_not_blank)
]


def _inline_size(value: str) -> str:
    size = len(value.encode("utf-8"))
    if size > MAX_INLINE_MESSAGE_BYTES:
        raise ValueError(
            f"is {size} bytes; inline messages are limited to {MAX_INLINE_MESSAGE_BYTES} bytes: "
            "pass a reference instead (file:///path or s3://bucket/key; "
            "`starter.py start --file PATH` stores the document for you)"
        )
    return value


def _depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests (stops counting past ``limit``)."""
    if limit < 0 or not isinstance(value, dict | list):
        return 0
    children = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(child, limit - 1) for child in children), default=0)


def _metadata_bounds(value: dict[str, Any]) -> dict[str, Any]:
    if _depth(value, MAX_METADATA_DEPTH) > MAX_METADATA_DEPTH:
        raise ValueError(f"nests deeper than {MAX_METADATA_DEPTH} levels")
    try:
        size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode (it holds a lone surrogate)") from None
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES} bytes")
    return value


class _Strict(BaseModel):
    """Inbound models: what a client sends. Unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Open(BaseModel):
    """Outbound models ignore unknown fields so an older reader accepts a newer writer."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class _Mutable(BaseModel):
    """The workflow's own state: changed in place by workflow code, carried as a whole."""

    model_config = ConfigDict(extra="ignore")


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
    # Reviews the run refused (wrong state or round, reviewer not allowed, unsigned, ...).
    reviews_refused: int = 0
    last_refusal: str | None = None
    # What the run's LLM calls cost so far (LLM_PRICE_TABLE), and its tenant.
    cost_usd: float = 0.0
    tenant: str | None = None
    # Budget decisions the run refused (sent while it was not waiting for one).
    budget_decisions_refused: int = 0


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
    # Review policy, resolved once from the request and the worker's floor (REVIEW_MIN,
    # ALLOWED_REVIEWERS, REVIEW_PUBLIC_KEYS): who may review, whether review is required, and
    # the public keys that authenticate reviewers (none = authentication off).
    review: ReviewMode = "auto"
    allowed_reviewers: list[str] | None = None
    requested_by: str | None = None
    review_keys: list[ReviewKey] = Field(default_factory=list)
    max_feedback_chars: int = MAX_FEEDBACK_CHARS
    max_reply_chars: int | None = None
    reedit_rounds_per_run: int = 50
    # REVIEW_WEBHOOK_URL is set on the worker that built the plan: tell reviewers (by webhook)
    # when the run starts waiting for review and when it escalates. Off = no extra activity.
    notify: bool = False
    # Capacity and budgets, resolved once from the request and the worker's settings: whose
    # daily budget the run spends, its cost ceiling (RUN_BUDGET_USD lowered by
    # options.max_cost_usd; None = none), what a call that would cross a budget does, and how
    # long an operator has to decide.
    tenant: str = DEFAULT_TENANT
    budget_usd: float | None = None
    budget_policy: BudgetPolicy = "wait"
    budget_timeout_s: float = 86400.0


NoticeReason = Literal["review_needed", "escalated"]


class ReviewNotice(_Open):
    """Input of ``notify_reviewers``: a run started waiting for a reviewer, or escalated.

    Ids, round and deadline only, never content: the webhook's receiver (a chat tool) is
    outside the payload codec.
    """

    workflow_id: str
    run_id: str
    reason: NoticeReason
    state: str
    review_round: int
    deadline: datetime | None = None


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
    # Budgets (docs/capacity.md): whose daily budget the call spends, the run's ceiling and
    # spend so far, and whether an operator let the run cross a budget.
    tenant: str = DEFAULT_TENANT
    budget_usd: float | None = None
    spent_usd: float = 0.0
    budget_approved: bool = False


class TokenUsage(_Open):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


CallOutcome = Literal["answered", "wait", "over_budget"]


class LlmCallResult(_Open):
    """What ``invoke_llm`` returns: the answer, or why no call was made (``outcome``).

    ``wait``: no capacity now; ask again in ``wait_s`` seconds (the run's turn in the model's
    queue). ``over_budget``: the call would
    cross ``budget`` (its text says which and by how much). Neither made a call or spent an
    attempt.
    """

    content: str = ""
    needs_review: bool = False
    model: str
    usage: TokenUsage = Field(default_factory=TokenUsage)
    outcome: CallOutcome = "answered"
    wait_s: float | None = None
    budget: str | None = None
    cost_usd: float | None = None


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


class RunState(_Mutable):
    """Everything a run knows about itself: held by the workflow, changed by its handlers, and
    carried whole to the run that continues it (continue-as-new)."""

    state: State = State.IDLE
    # When the current state began, and when the first run of this chain started.
    state_since: datetime | None = None
    started_at: datetime | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    history_bytes: int = 0
    history_dropped: int = 0
    attempts: int = 0
    consecutive_failures: int = 0
    corrective_next: bool = False
    retry_after_s: float | None = None
    model: str | None = None
    last_error: str | None = None
    feedback: list[str] = Field(default_factory=list)
    review_round: int = 0
    # When the current review wait (await_review or escalate) times out.
    review_deadline: datetime | None = None
    reviews_refused: int = 0
    last_refusal: str | None = None
    plan: PromptPlan | None = None
    reply: LlmCallResult | None = None
    embedding_id: str | None = None
    # Operator actions: expire_review ends one review wait, dead_letter every one until the end.
    forced_timeout: str | None = None
    dead_letter_requested: str | None = None
    # Capacity and budgets: the wait before asking for capacity again, what the run's calls
    # cost, when the budget decision times out, whether an operator approved crossing the
    # budget, and budget decisions refused.
    capacity_wait_s: float | None = None
    cost_usd: float = 0.0
    budget_deadline: datetime | None = None
    budget_approved: bool = False
    budget_decisions_refused: int = 0


class ContinuationCheck(_Open):
    """Input of ``verify_continuation``: the run that claims to continue ``previous_run_id``."""

    workflow_id: str
    run_id: str
    previous_run_id: str


class ContinuationVerdict(_Open):
    """Whether the previous run really continued as new into this one, and if not, why."""

    accepted: bool
    reason: str | None = None


class ContinuedRun(_Strict):
    """Input of a continued run: the original request plus the carried state. Accepted only
    from this workflow's own continue-as-new (the workflow checks how the run was started),
    never from a client."""

    request: PipelineRequest
    carried: RunState

    @model_validator(mode="after")
    def _resumable(self) -> ContinuedRun:
        if self.carried.state not in RESUMABLE_STATES:
            raise ValueError(f"a continued run cannot resume in {self.carried.state.value!r}")
        if self.carried.plan is None:
            raise ValueError("a continued run must carry its plan")
        return self


def printable(text: str, limit: int = 300) -> str:
    """``text`` safe to put in an error or log line: no lone surrogates (they would make the
    message itself unencodable), at most ``limit`` characters."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= limit else safe[: limit - 6] + " [cut]"


def describe_validation_error(err: ValidationError) -> str:
    """One line naming each offending field, for users rather than developers.

    Never quotes the offending value (it may be content, or not even encodable), and field
    names a client made up are cut short.
    """
    problems = []
    for item in err.errors()[:10]:
        field = ".".join(printable(str(part), 64) for part in item["loc"]) or "(payload)"
        problems.append(f"{field}: {printable(item['msg'], 200)}")
    return printable("; ".join(problems), 1000)


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
