"""What the workflow and its activities pass each other (recorded in history, so versioned
like the rest of the contract: new fields get defaults)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from workflows.payloads._base import DEFAULT_TENANT, Lane, _Open
from workflows.payloads.client import DeadLetterMessage, PipelineRequest
from workflows.payloads.experiment import Assignment
from workflows.payloads.run_policy import RunPolicy

__all__ = [
    "AwaitBatchInput",
    "CallFailure",
    "CallOutcome",
    "ContinuationCheck",
    "ContinuationVerdict",
    "DeadLetterInput",
    "DeadLetterReceipt",
    "EmbeddingInput",
    "EmbeddingResult",
    "LlmCallInput",
    "LlmCallResult",
    "ModelSettings",
    "NoticeReason",
    "PromptInput",
    "PromptPlan",
    "PromptSpec",
    "ReviewNotice",
    "TokenUsage",
    "vector_key",
]

# Activity payloads: internal to the worker but recorded in history, so also versioned by default.


class PromptInput(_Open):
    """Input of ``fetch_prompt``: the run's request."""

    request: PipelineRequest


class ModelSettings(_Open):
    """How a run calls its model: the model, its fallback after ``fallback_after`` failures in
    a row, the sampling temperature, each call's timeout and the longest reply taken.

    Cost (docs/cost.md): the ``lane`` its calls take (``batch``: the provider's batch API),
    how long a batched call waits for its group's submission (``batch_queue_s``), whether
    an identical call that already succeeded is answered from the result cache
    (``result_cache``), and the queue wait for capacity past which a synchronous call spills
    over to the batch lane (``spill_after_s``; None: it waits, as every run that is not
    batch-eligible or planned with ``SPILL_OVER=off`` does). Plans made before these existed
    call synchronously, without the cache, and never spill.
    """

    model: str
    fallback_model: str | None = None
    fallback_after: int = 2
    temperature: float = 0.2
    llm_timeout_s: float = 60.0
    max_reply_chars: int | None = None
    lane: Lane = "sync"
    batch_queue_s: float = 3600.0
    result_cache: bool = False
    spill_after_s: float | None = None
    # The rollout variant the run got (docs/rollouts.md); plans made before rollouts have none.
    assignment: Assignment | None = None


class PromptSpec(_Open):
    """What a model is asked: the system prompt, the user's prompt, and the document the LLM
    activity loads and puts before it (a reference, so large inputs never enter history)."""

    system_prompt: str
    user_prompt: str
    input_ref: str | None = None
    # The SHA-256 of the referenced document's text, once the run extracted it (the document
    # pipeline): the LLM activity refuses a document that changed since.
    input_sha256: str | None = None


class PromptPlan(RunPolicy, ModelSettings, PromptSpec):
    """What a run that calls a model settles once (``fetch_prompt`` in the LLM pipeline): the
    prompt and every setting the run will use."""


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
    """Input of ``invoke_llm``: the prompt (or the reference the activity loads), the model and
    attempt, reviewers' feedback for a re-edit, and what the budget check needs. ``chain_id``
    (the run chain's first run id) joins the workflow id in the call's idempotency key."""

    workflow_id: str
    chain_id: str | None = None
    system_prompt: str
    user_prompt: str
    input_ref: str | None = None
    # The SHA-256 of the referenced document's text when the run extracted it: the activity
    # extracts it again (a PDF's text) and refuses a document that changed since.
    input_sha256: str | None = None
    model: str
    attempt: int
    temperature: float = 0.2
    feedback: list[str] = Field(default_factory=list)
    corrective: bool = False
    max_reply_chars: int | None = None
    # The JSON Schema of the object the reply must be (a pipeline's extraction schema); None:
    # the contract's LlmReply, {"content", "needs_review"}.
    output_schema: dict[str, Any] | None = None
    # Budgets (docs/capacity.md): whose daily budget the call spends, the run's ceiling and
    # spend so far, and whether an operator let the run cross a budget.
    tenant: str = DEFAULT_TENANT
    budget_usd: float | None = None
    spent_usd: float = 0.0
    budget_approved: bool = False
    # Its run's priority, 1 (most urgent) to 5: served first within its tenant's fair share of
    # a rate-limited model (docs/capacity.md#fair-share); None: none asked (the middle, 3).
    priority: int | None = Field(default=None, ge=1, le=5)
    # Cost (docs/cost.md): the lane the call takes and how long a batched call may wait for its
    # result; whether an identical call that succeeded may answer it (the result cache), and
    # the version of the pipeline's step, part of that cache's key. ``spilled``: a batch-lane
    # call made because its synchronous one would have queued past spill-over's wait
    # (docs/capacity.md), counted as a spill-over.
    lane: Lane = "sync"
    spilled: bool = False
    batch_wait_s: float = 180_000.0
    result_cache: bool = False
    version: str = ""


class TokenUsage(_Open):
    """The tokens one LLM call used, as the provider reported them. ``cached_tokens`` are the
    prompt tokens the provider read from its prompt cache (part of ``prompt_tokens``)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0


CallOutcome = Literal["answered", "wait", "over_budget", "batched", "failed"]


class CallFailure(_Open):
    """A model call that failed, told as a value (a batched call's failure comes back in its
    batch's error file, not as an activity's error): the ``error`` a run records (``Type:
    message``), its stable ``type``, and whether it is ``permanent`` or the wait it asks for
    before the next attempt."""

    error: str
    type: str | None = None
    permanent: bool = False
    retry_after_s: float | None = None


class LlmCallResult(_Open):
    """What ``invoke_llm`` returns: the answer, or why no call was made (``outcome``).

    ``wait``: no capacity now; ask again in ``wait_s`` seconds (the run's turn in the model's
    queue). ``over_budget``: the call would
    cross ``budget`` (its text says which and by how much). Neither made a call or spent an
    attempt. ``batched``: the call went into the provider's batch ``batch_id`` as
    ``batch_item``; its answer (or its ``failed`` outcome, with ``failure``) comes from
    ``await_batch``. ``cached_reply``: answered from the result cache, no call made.
    """

    content: str = ""
    needs_review: bool = False
    # How sure the model said it is (0 to 1), when its reply said (LlmReply.confidence).
    confidence: float | None = None
    # The reply's JSON object, when the call asked for one (LlmCallInput.output_schema).
    data: dict[str, Any] | None = None
    model: str
    usage: TokenUsage = Field(default_factory=TokenUsage)
    outcome: CallOutcome = "answered"
    wait_s: float | None = None
    budget: str | None = None
    cost_usd: float | None = None
    lane: Lane = "sync"
    batch_id: str | None = None
    batch_item: str | None = None
    cached_reply: bool = False
    failure: CallFailure | None = None


class AwaitBatchInput(_Open):
    """Input of ``await_batch``: the batched call (``item``) whose answer a run waits for, on
    ``model``, in the provider's batch ``batch_id``."""

    item: str
    model: str
    batch_id: str


def vector_key(workflow_id: str, chain_id: str | None) -> str:
    """What names a run's vector: its workflow id and its run chain's first run id, so a new
    run that reuses the workflow id never writes over (or deletes) another run's vector. Runs
    planned before the chain took part named it by the workflow id alone."""
    return f"{workflow_id}/{chain_id}" if chain_id else workflow_id


class EmbeddingInput(_Open):
    """Input of ``generate_embedding``: the approved reply, stored under an id derived from
    ``workflow_id`` and ``chain_id``, the run chain's first run id (a retry overwrites, never
    duplicates; a new run that reuses the workflow id gets another); ``model`` None: the
    worker's."""

    workflow_id: str
    chain_id: str | None = None
    request_id: str
    content: str
    model: str | None = None


class EmbeddingResult(_Open):
    """What ``generate_embedding`` stored: the vector's id and its length."""

    embedding_id: str
    dimensions: int


class DeadLetterInput(_Open):
    """Input of ``send_dead_letter``: the message for the dead-letter queue."""

    message: DeadLetterMessage


class DeadLetterReceipt(_Open):
    """The dead-letter queue's receipt: the message id it assigned, and the queue."""

    message_id: str
    queue_url: str


class ContinuationCheck(_Open):
    """Input of ``verify_continuation``: the run that claims to continue ``previous_run_id``."""

    workflow_id: str
    run_id: str
    previous_run_id: str


class ContinuationVerdict(_Open):
    """Whether the previous run really continued as new into this one, and if not, why."""

    accepted: bool
    reason: str | None = None
