"""The replay lab's forks end to end: on the real dev server (payloads encrypted) with a worker
(which also polls the lab's task queue) and the LLM simulator, recorded document runs are
forked from ``analyze`` onto another model by ``aiorch.ops.lab.run_forks``. Each run gets
exactly one provider call per fork and none before the fork state (no extraction either), no
row reaches the document store, the originals' histories stay byte for byte as they were, and
the candidate's fields are what the simulator answered; open and unknown runs are skipped
with why, and a spend cap stops the lab from starting more forks. An LLM pipeline run forks
from its model call the same way, its embedding dry. Workers poll the lab's task queue unless
``LAB_ENABLED=false``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import create_engine, text
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from aiorch.devstack.servers import PROJECT_ROOT, start_worker
from aiorch.devstack.stack import LocalStack
from aiorch.ops import pipelines
from aiorch.ops.lab import fork_id, run_forks
from aiorch.ops.lab.recorded import read_outcome
from aiorch.ops.lab.scores import parse_outcome_rule
from aiorch.ops.results import run_converter
from aiorch.ops.visibility import start_run
from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.config import Settings
from aiorch_runtime.temporal import encrypted_converter
from tests.support.builders import new_request_id
from tests.support.invoices import invoice_fields, invoice_lines
from tests.support.live_runs import wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, stack_with_worker
from tests.support.simulator import Simulator
from workflows import contract
from workflows.documents.payloads import DocumentRequest
from workflows.payloads import LlmCallInput, PipelineRequest, Variant
from workflows.steps.contract import ACTIVITY_EXTRACT_TEXT

pytestmark = pytest.mark.e2e

KEYS = f"k1:{new_key()}"
CANDIDATE = Variant(name="smaller", model="sim-small")
RUNS = 3


@dataclass
class Recorded:
    client: Client
    stack: LocalStack
    store_url: str
    run_ids: dict[str, str]
    """Each closed document run's workflow id, by its run id."""
    fields: dict[str, dict[str, object]]
    """What each closed run's invoice says, by run id."""
    open_run: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Encrypted payloads; valid documents are stored unreviewed, into a SQLite file."""
    store = tmp_path_factory.mktemp("store") / "documents.sqlite"
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"),
        {
            **E2E_WORKER_ENV,
            "PAYLOAD_KEYS": KEYS,
            "PAYLOAD_KEY_ID": "k1",
            "DOCUMENT_REVIEW_MIN": "auto",
            "DOCUMENT_STORE_URL": f"sqlite:///{store}",
        },
    )


def store_url(stack: LocalStack) -> str:
    return stack.worker_env["DOCUMENT_STORE_URL"]


def stored(url: str) -> list[str]:
    """The request ids of every row in the document store."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [row[0] for row in connection.execute(text("SELECT request_id FROM documents"))]
    finally:
        engine.dispose()


async def document_run(client: Client, fields: dict[str, object], *extra: str) -> str:
    request = DocumentRequest(
        request_id=new_request_id(), document="\n".join(invoice_lines(fields, *extra))
    )
    return await start_run(
        client,
        request,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        pipeline=pipelines.named("documents"),
    )


async def closed(client: Client, workflow_id: str, timeout: float = 60) -> str:
    """The run id of ``workflow_id`` once it closed."""
    deadline = time.monotonic() + timeout
    handle = client.get_workflow_handle(workflow_id)
    while (description := await handle.describe()).close_time is None:
        assert time.monotonic() < deadline, f"{workflow_id} did not close"
        await asyncio.sleep(0.2)
    return description.run_id or ""


@pytest.fixture(scope="module")
async def recorded(stack: LocalStack) -> Recorded:
    converter = encrypted_converter(KeyRing.parse(KEYS, "k1"))
    client = await Client.connect(stack.addresses.temporal_address, data_converter=converter)
    invoices = [invoice_fields(700 + n) for n in range(RUNS)]
    started = [await document_run(client, fields) for fields in invoices]
    wrong = {**invoice_fields(799), "total": "1.00"}
    open_run = await document_run(client, wrong)
    await wait_for_state(client.get_workflow_handle(open_run), "await_review")
    run_ids = {await closed(client, workflow_id): workflow_id for workflow_id in started}
    open_description = await client.get_workflow_handle(open_run).describe()
    # Visibility shows a close a moment after it.
    await asyncio.sleep(2)
    return Recorded(
        client=client,
        stack=stack,
        store_url=store_url(stack),
        run_ids=run_ids,
        fields=dict(zip(run_ids, invoices, strict=True)),
        open_run=open_description.run_id or "",
    )


def lab_settings(stack: LocalStack) -> Settings:
    return Settings(temporal_address=stack.addresses.temporal_address)


async def history_bytes(client: Client, workflow_id: str, run_id: str) -> bytes:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    # Maps (payload metadata, search attributes) serialize in a stable order only so.
    return b"".join(event.SerializeToString(deterministic=True) for event in history.events)


async def scheduled(client: Client, workflow_id: str) -> list[tuple[str, object]]:
    """Each activity a run scheduled, with its decoded input."""
    converter = run_converter(client, workflow_id)
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    found: list[tuple[str, object]] = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            [value] = await converter.decode(list(attributes.input.payloads))
            found.append((attributes.activity_type.name, value))
    return found


async def test_forks_from_analyze_call_the_model_once_each_and_write_nothing(
    recorded: Recorded,
) -> None:
    """Forked from analyze onto another model, each recorded run's baseline and candidate
    (linked to it by their memo) make exactly one provider call each (none for the original,
    no extraction), spending as the lab's tenant; the candidate's fields are what the
    simulator read off the invoice; no row is stored; the originals' histories are unchanged;
    the open run and an unknown run id are skipped with why."""
    client, simulator = recorded.client, Simulator(recorded.stack.addresses.openai_base_url)
    before = {
        run_id: await history_bytes(client, workflow_id, run_id)
        for run_id, workflow_id in recorded.run_ids.items()
    }
    rows_before = sorted(stored(recorded.store_url))
    unknown = "00000000-0000-4000-8000-000000000000"
    lines: list[str] = []
    lab = await run_forks(
        client,
        lab_settings(recorded.stack),
        [*recorded.run_ids, recorded.open_run, unknown],
        from_state="analyze",
        candidate=CANDIDATE,
        lab_id="e2e-lab",
        progress=lines.append,
    )

    assert lab.skipped.keys() == {recorded.open_run, unknown}
    assert lab.skipped[recorded.open_run].startswith("not closed")
    assert lab.skipped[unknown].startswith("not found")
    assert [c.original.run_id for c in lab.comparisons] == list(recorded.run_ids)
    assert len(lines) == 4 * RUNS  # each fork started and ended
    for comparison in lab.comparisons:
        original, baseline, candidate = (
            comparison.original,
            comparison.baseline,
            comparison.candidate,
        )
        run_id = original.run_id or ""
        assert original.workflow_id == recorded.run_ids[run_id]
        assert original.state == "completed" and original.model == "sim-large"
        for fork, model in ((baseline, "sim-large"), (candidate, "sim-small")):
            assert fork.workflow_id == fork_id("e2e-lab", run_id, fork.kind)
            memo = await (await client.get_workflow_handle(fork.workflow_id).describe()).memo()
            assert (memo["original_run_id"], memo["kind"]) == (run_id, fork.kind)
            assert fork.error is None and fork.state == "completed", fork
            assert fork.model == model and fork.use.calls == 1 and fork.use.cost_usd > 0
            chats = simulator.chat_requests(fork.workflow_id)
            assert [chat["model"] for chat in chats] == [model]
            activities = await scheduled(client, fork.workflow_id)
            assert ACTIVITY_EXTRACT_TEXT not in {name for name, _ in activities}
            [call] = [value for name, value in activities if name == contract.ACTIVITY_INVOKE_LLM]
            assert LlmCallInput.model_validate(call).tenant == "lab"
        assert candidate.fields == recorded.fields[run_id] == original.fields
        assert candidate.problems == [] and not candidate.needs_review
        assert len(simulator.chat_requests(original.workflow_id)) == 1
    assert sorted(stored(recorded.store_url)) == rows_before
    for run_id, workflow_id in recorded.run_ids.items():
        assert await history_bytes(client, workflow_id, run_id) == before[run_id]


async def test_the_spend_cap_stops_the_lab_from_starting_forks(recorded: Recorded) -> None:
    """With a spend cap the first run's forks reach, the other runs are not forked: they are
    skipped, saying the cap was reached."""
    run_ids = list(recorded.run_ids)
    lab = await run_forks(
        recorded.client,
        lab_settings(recorded.stack),
        run_ids,
        from_state="analyze",
        candidate=CANDIDATE,
        lab_id="e2e-capped",
        spend_cap_usd=1e-9,
    )
    assert [c.original.run_id for c in lab.comparisons] == run_ids[:1]
    assert lab.skipped == {r: "the spend cap ($1e-09) was reached" for r in run_ids[1:]}
    simulator = Simulator(recorded.stack.addresses.openai_base_url)
    for run_id in run_ids[1:]:
        assert simulator.chat_requests(fork_id("e2e-capped", run_id, "candidate")) == []


async def test_an_llm_run_forks_from_its_model_call(recorded: Recorded) -> None:
    """An LLM pipeline run forked from invoke_llm onto another model: each fork plans again,
    calls the model once (the candidate on its model) and completes with the simulator's
    reply for that model, its embedding dry (no embedding request, no vector)."""
    client, simulator = recorded.client, Simulator(recorded.stack.addresses.openai_base_url)
    request = PipelineRequest(request_id=new_request_id(), user_message="Summarise the outage")
    workflow_id = await start_run(client, request, task_queue=contract.DEFAULT_TASK_QUEUE)
    run_id = await closed(client, workflow_id)
    await asyncio.sleep(2)  # visibility shows a close a moment after it
    lab = await run_forks(
        client,
        lab_settings(recorded.stack),
        [run_id],
        from_state="invoke_llm",
        candidate=CANDIDATE,
        lab_id="e2e-llm",
    )
    assert lab.skipped == {}
    [comparison] = lab.comparisons
    original = comparison.original
    assert original.text is not None and original.text.startswith("Simulated answer (sim-large)")
    assert comparison.baseline.text == original.text
    assert comparison.candidate.text == original.text.replace("sim-large", "sim-small", 1)
    for fork, model in ((comparison.baseline, "sim-large"), (comparison.candidate, "sim-small")):
        assert fork.state == "completed" and fork.use.calls == 1, fork
        requests = simulator.requests(fork.workflow_id)
        assert [(r["path"], r["model"]) for r in requests] == [("chat", model)]


async def pollers(client: Client, task_queue: str) -> int:
    """How many workers poll ``task_queue`` for workflow tasks, as the server saw lately."""
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return len(described.pollers)


async def polled(client: Client, task_queue: str, tries: int = 150) -> int:
    """``pollers`` once the server has seen one, or 0 after ``tries`` looks 0.2 s apart: a
    worker says it started before its first poll reaches the server."""
    for _ in range(tries):
        if count := await pollers(client, task_queue):
            return count
        await asyncio.sleep(0.2)
    return 0


async def test_workers_poll_the_lab_queue_unless_it_is_turned_off(recorded: Recorded) -> None:
    """A worker polls its task queue's lab queue beside it by default; one started with
    ``LAB_ENABLED=false`` polls its own queue only, and says so when it starts."""
    stack = recorded.stack
    assert await polled(recorded.client, f"{contract.DEFAULT_TASK_QUEUE}-lab") >= 1
    env = {
        **stack.addresses.env(),
        **stack.worker_env,
        "TEMPORAL_TASK_QUEUE": "labless",
        "LAB_ENABLED": "false",
        "HEALTH_PORT": "0",
        # The embedded vector store serves one process: this worker gets its own.
        "VECTOR_STORE_PATH": str(stack.data_dir / "labless-vectors"),
    }
    worker = start_worker(env=env, log_dir=stack.log_dir / "labless", cwd=PROJECT_ROOT)
    try:
        assert "worker started: task queue 'labless' on" in worker.log_text()
        # Both queues' pollers start together: once the worker's own queue is polled, a lab
        # poller would have been too.
        assert await polled(recorded.client, "labless") >= 1
        assert await pollers(recorded.client, "labless-lab") == 0
    finally:
        worker.stop()


async def test_an_original_that_failed_is_read_with_its_error(recorded: Recorded) -> None:
    """An original the model refused ends failed: the lab reads it with an error, so no score
    rule passes it (as a failed fork passes none)."""
    client = recorded.client
    request = PipelineRequest(request_id=new_request_id(), user_message="Say it. [sim:refusal]")
    workflow_id = await start_run(client, request, task_queue=contract.DEFAULT_TASK_QUEUE)
    run_id = await closed(client, workflow_id)
    outcome = await read_outcome(client, workflow_id, run_id)
    assert outcome.state == "failed" and outcome.error == "the run ended failed"
    rule = parse_outcome_rule("problems == 0")
    assert not rule.judge(outcome).passed
