"""The activities the workflow tests run: a scripted test double for every activity, registered
under the real activity name, taking and returning the real payload models and recording what
it received; and the real lineage check, which a test can hold open.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.lineage import LineageActivities
from tests.support.time_skipping import TASK_PROGRESS_TIMEOUT_S
from workflows import contract, errors
from workflows.documents.contract import PIPELINE_DOCUMENTS
from workflows.documents.payloads import DocumentRequest
from workflows.engine.planning import PlanRunInput, RunPlan
from workflows.payloads import (
    AwaitBatchInput,
    ContinuationCheck,
    ContinuationVerdict,
    DeadLetterInput,
    DeadLetterReceipt,
    EmbeddingInput,
    EmbeddingResult,
    LlmCallInput,
    LlmCallResult,
    PipelineRequest,
    PromptInput,
    PromptPlan,
    RequestBase,
    ReviewNotice,
    TokenUsage,
    vector_key,
)
from workflows.steps.contract import ACTIVITY_EXTRACT_TEXT, ACTIVITY_STORE_DOCUMENT
from workflows.steps.document_payloads import (
    ExtractedText,
    ExtractTextInput,
    StoreDocumentInput,
    StoreReceipt,
)

PRIMARY_MODEL = "primary-model"
FALLBACK_MODEL = "fallback-model"
DLQ_URL = "fake://sqs/ai-orchestrator-dlq"
# The SHA-256 every scripted extraction reports.
EXTRACTED_SHA256 = "ab" * 32


@dataclass(frozen=True)
class Reply:
    """A scripted LLM answer; the fake fills in the model it was called with."""

    content: str = "the answer"
    needs_review: bool = False
    confidence: float | None = None


@dataclass(frozen=True)
class Gate:
    """Holds the first call of a fake activity open (heartbeating) until released or cancelled;
    later calls pass straight through.

    ``entered`` is set when the held call starts waiting, so a test knows it is in flight.
    """

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    # A call already past the point of no return: it notes the cancel but completes anyway.
    finish_despite_cancel: bool = False

    async def hold(self) -> None:
        if self.entered.is_set():
            return
        self.entered.set()
        try:
            while not self.release.is_set():
                try:
                    activity.heartbeat()
                    await asyncio.wait_for(self.release.wait(), timeout=0.05)
                except TimeoutError:
                    continue
                except asyncio.CancelledError:
                    self.cancelled.set()
                    if not self.finish_despite_cancel:
                        raise
                    return
        finally:
            self.exited.set()


def rate_limited(retry_after_s: float = 30.0) -> ApplicationError:
    """What the real ``invoke_llm`` raises for a 429 with Retry-After."""
    return ApplicationError(
        "HTTP 429 from the LLM: rate limit exceeded",
        type=errors.LLM_RATE_LIMITED,
        next_retry_delay=timedelta(seconds=retry_after_s),
    )


def no_capacity(wait_s: float) -> LlmCallResult:
    """What the real ``invoke_llm`` returns when the model's shared capacity is used up."""
    return LlmCallResult(model="", outcome="wait", wait_s=wait_s)


def over_budget(budget: str = "run budget: spent $0.0100 of $0.0100") -> LlmCallResult:
    """What the real ``invoke_llm`` returns when the next call would cross a budget."""
    return LlmCallResult(model="", outcome="over_budget", budget=budget)


def batched(batch_id: str = "batch_sim1", item: str = "call-1") -> LlmCallResult:
    """What the real ``invoke_llm`` returns once a batch-lane call's batch is submitted."""
    return LlmCallResult(
        model="", outcome="batched", lane="batch", batch_id=batch_id, batch_item=item
    )


def server_error() -> ApplicationError:
    """What the real ``invoke_llm`` raises for a 503."""
    return ApplicationError("HTTP 503 from the LLM: overloaded", type=errors.LLM_RETRYABLE)


class FakeActivities:
    """Test doubles for every activity, scripted per test, recording every input.

    Scripts are consumed one entry per call; an exhausted script falls back to the default
    (a reply without review, a stored embedding). Entries that are exceptions are raised.
    """

    def __init__(self) -> None:
        self.plan_overrides: dict[str, Any] = {}
        self.prompt_error: ApplicationError | None = None
        self.llm_script: list[Reply | LlmCallResult | BaseException] = []
        self.embedding_script: list[EmbeddingResult | BaseException] = []
        self.notify_script: list[int | BaseException] = []
        self.batch_script: list[Reply | LlmCallResult | BaseException] = []
        self.batch_gate: Gate | None = None
        self.llm_gate: Gate | None = None
        self.embedding_gate: Gate | None = None

        self.prompt_inputs: list[PromptInput] = []
        self.llm_calls: list[LlmCallInput] = []
        self.llm_scheduled_at: list[datetime] = []
        self.embedding_calls: list[EmbeddingInput] = []
        self.embedding_attempts: list[int] = []
        self.deleted: list[str] = []
        self.dead_letters: list[DeadLetterInput] = []
        self.notices: list[ReviewNotice] = []
        self.batch_waits: list[AwaitBatchInput] = []
        self.embedding_finished = asyncio.Event()

        self.stored: set[str] = set()
        """Workflow ids whose vector is in the (fake) store."""

    @property
    def activities(self) -> list[Any]:
        """The engine's scripted activities and the LLM pipeline's."""
        return [*self.engine_activities, *self.llm_activities]

    @property
    def engine_activities(self) -> list[Any]:
        """What any pipeline's runs call: the model call, the batch wait, dead letters and
        review notices."""
        return [self.invoke_llm, self.send_dead_letter, self.notify_reviewers, self.await_batch]

    @property
    def llm_activities(self) -> list[Any]:
        """The LLM pipeline's own: its plan and its reply's embedding."""
        return [self.fetch_prompt, self.generate_embedding, self.delete_embedding]

    def gates(self) -> list[Gate]:
        gates = (self.llm_gate, self.embedding_gate, self.batch_gate)
        return [gate for gate in gates if gate is not None]

    async def release_gates(self) -> None:
        """Release every gate and wait until the calls they held have returned."""
        for gate in self.gates():
            gate.release.set()
        for gate in self.gates():
            if gate.entered.is_set():
                await asyncio.wait_for(gate.exited.wait(), timeout=TASK_PROGRESS_TIMEOUT_S)

    @activity.defn(name=contract.ACTIVITY_FETCH_PROMPT)
    async def fetch_prompt(self, prompt_input: PromptInput) -> PromptPlan:
        """Resolves options the way the real activity does: the request's, else defaults."""
        self.prompt_inputs.append(prompt_input)
        if self.prompt_error is not None:
            raise self.prompt_error
        request = prompt_input.request
        options = request.options
        values: dict[str, Any] = {
            "system_prompt": "You are a test double.",
            "user_prompt": prompt_input.request.user_message,
            "llm_timeout_s": 30.0,
            "review_timeout_s": options.review_timeout_s or 600.0,
            "escalation_timeout_s": options.escalation_timeout_s or 1200.0,
            "llm_max_attempts": options.llm_max_attempts or 3,
            "model": PRIMARY_MODEL,
            "fallback_model": FALLBACK_MODEL,
            "fallback_after": 2,
            "backoff_initial_s": 1.0,
            "backoff_max_s": 8.0,
            "review": request.review,
            "allowed_reviewers": options.allowed_reviewers,
            "requested_by": request.requested_by,
        }
        values.update(self.plan_overrides)
        return PromptPlan(**values)

    @activity.defn(name=contract.ACTIVITY_INVOKE_LLM)
    async def invoke_llm(self, call: LlmCallInput) -> LlmCallResult:
        self.llm_calls.append(call)
        self.llm_scheduled_at.append(activity.info().current_attempt_scheduled_time)
        if self.llm_gate is not None:
            await self.llm_gate.hold()
        step = self.llm_script.pop(0) if self.llm_script else Reply()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, LlmCallResult):  # no call made: no capacity, or over budget
            return step.model_copy(update={"model": call.model})
        return LlmCallResult(
            content=step.content,
            needs_review=step.needs_review,
            confidence=step.confidence,
            model=call.model,
            usage=TokenUsage(prompt_tokens=7, completion_tokens=5, total_tokens=12),
        )

    @activity.defn(name=contract.ACTIVITY_AWAIT_BATCH)
    async def await_batch(self, waiting: AwaitBatchInput) -> LlmCallResult:
        """The outcome the batch script says for the call (by default an answer in the lane)."""
        self.batch_waits.append(waiting)
        if self.batch_gate is not None:
            await self.batch_gate.hold()
        step = self.batch_script.pop(0) if self.batch_script else Reply()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, LlmCallResult):
            return step.model_copy(update={"model": waiting.model})
        return LlmCallResult(
            content=step.content,
            needs_review=step.needs_review,
            model=waiting.model,
            usage=TokenUsage(prompt_tokens=7, completion_tokens=5, total_tokens=12),
            lane="batch",
            batch_id=waiting.batch_id,
            cost_usd=0.001,
        )

    @activity.defn(name=contract.ACTIVITY_GENERATE_EMBEDDING)
    async def generate_embedding(self, embedding_input: EmbeddingInput) -> EmbeddingResult:
        """Like the real one: the (slow) embeddings call first, the vector upsert last."""
        self.embedding_calls.append(embedding_input)
        self.embedding_attempts.append(activity.info().attempt)
        try:
            if self.embedding_gate is not None:
                await self.embedding_gate.hold()
            step = (
                self.embedding_script.pop(0)
                if self.embedding_script
                else EmbeddingResult(
                    embedding_id=f"vec-{embedding_input.workflow_id}", dimensions=8
                )
            )
            if isinstance(step, BaseException):
                raise step
            self.stored.add(vector_key(embedding_input.workflow_id, embedding_input.chain_id))
            return step
        finally:
            self.embedding_finished.set()

    @activity.defn(name=contract.ACTIVITY_DELETE_EMBEDDING)
    async def delete_embedding(self, key: str) -> int:
        self.deleted.append(key)
        if key in self.stored:
            self.stored.discard(key)
            return 1
        return 0

    @activity.defn(name=contract.ACTIVITY_SEND_DEAD_LETTER)
    async def send_dead_letter(self, dead_letter: DeadLetterInput) -> DeadLetterReceipt:
        self.dead_letters.append(dead_letter)
        return DeadLetterReceipt(message_id=f"msg-{len(self.dead_letters)}", queue_url=DLQ_URL)

    @activity.defn(name=contract.ACTIVITY_NOTIFY_REVIEWERS)
    async def notify_reviewers(self, notice: ReviewNotice) -> int:
        """Records every attempt; a scripted exception fails that attempt."""
        self.notices.append(notice)
        step = self.notify_script.pop(0) if self.notify_script else 200
        if isinstance(step, BaseException):
            raise step
        return step


class FakeDocumentActivities:
    """Test doubles for the document pipeline's own activities, recording every input: a plan
    built from the request as the real one resolves it, an extraction of the inline text (or
    a scripted failure), and a store that keeps the last row per request id."""

    def __init__(self) -> None:
        self.plan_overrides: dict[str, Any] = {}
        self.extract_error: ApplicationError | None = None
        self.store_script: list[BaseException] = []
        self.plans: list[PlanRunInput] = []
        self.extracts: list[ExtractTextInput] = []
        self.stores: list[StoreDocumentInput] = []
        self.rows: dict[str, StoreDocumentInput] = {}

    @property
    def activities(self) -> list[Any]:
        return [self.plan_run, self.extract_text, self.store_document]

    @activity.defn(name=contract.ACTIVITY_PLAN_RUN)
    async def plan_run(self, plan_input: PlanRunInput) -> RunPlan:
        """The document pipeline's plan (its prompt is the workflow's): the request's options,
        else defaults. An LLM pipeline's request is planned so too (a lab fork's start check)."""
        models: dict[str, type[RequestBase]] = {
            PIPELINE_DOCUMENTS: DocumentRequest,
            contract.PIPELINE_LLM: PipelineRequest,
        }
        request = models[plan_input.pipeline].model_validate(plan_input.request)
        self.plans.append(plan_input)
        values: dict[str, Any] = {
            "review_timeout_s": request.options.review_timeout_s or 600.0,
            "escalation_timeout_s": request.options.escalation_timeout_s or 1200.0,
            "llm_max_attempts": request.options.llm_max_attempts or 3,
            "model": PRIMARY_MODEL,
            "review": request.review,
        }
        values.update(self.plan_overrides)
        return RunPlan(**values)

    @activity.defn(name=ACTIVITY_EXTRACT_TEXT)
    async def extract_text(self, extract_input: ExtractTextInput) -> ExtractedText:
        self.extracts.append(extract_input)
        if self.extract_error is not None:
            raise self.extract_error
        text = extract_input.text or ""
        return ExtractedText(
            kind="text", characters=len(text), sha256=EXTRACTED_SHA256, preview=text[:100]
        )

    @activity.defn(name=ACTIVITY_STORE_DOCUMENT)
    async def store_document(self, store_input: StoreDocumentInput) -> StoreReceipt:
        self.stores.append(store_input)
        if self.store_script:
            raise self.store_script.pop(0)
        self.rows[store_input.request_id] = store_input
        return StoreReceipt(
            request_id=store_input.request_id,
            table="documents",
            dialect="fake",
            stored_at=activity.info().current_attempt_scheduled_time,
        )


class HeldLineage:
    """The real lineage check, which a test can hold open (``hold``) to act in the moment a
    continued run waits for it: the run's state is not in place yet."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self._lineage = LineageActivities(client, task_queue)
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()

    @activity.defn(name=contract.ACTIVITY_VERIFY_CONTINUATION)
    async def verify_continuation(self, check: ContinuationCheck) -> ContinuationVerdict:
        if self.hold is not None:
            self.entered.set()
            await self.hold.wait()
        return await self._lineage.verify_continuation(check)
