"""The batch lane and the result cache end to end: a thousand runs through the provider's batch
API (four batches, the same final states as the synchronous lane, the batch price in the cost
metric and the tenant's spend), a failed and an expired batched call, a redrive answered from the
result cache, and every history replayed on a cold worker without changing a spend counter.
Real dev server, worker process, simulator (its Files and Batches API), SQS and capacity store."""

from __future__ import annotations

import asyncio
import json
import math
import urllib.request
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.worker import Replayer

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.config import DEFAULT_PRICE_TABLE
from aiorch_runtime.temporal import AiOrchestratorPlugin
from tests.e2e.test_observability import samples, total
from tests.support.capacity_store import operator_view
from tests.support.live_runs import request, status_of, wait_for_state
from tests.support.live_runs import start as start_unsigned
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker, starter
from tests.support.reviewing import signed
from tests.support.simulator import Simulator
from workflows import contract
from workflows.batch.workflow import LlmBatch
from workflows.orchestrator import EngineWorkflow
from workflows.payloads import PipelineRequest, RunStatus

pytestmark = [pytest.mark.e2e, pytest.mark.long]

RUNS = 1000
GROUP = 250
PRICE = DEFAULT_PRICE_TABLE["sim-large"]
# Kinds of run, by what the model answers: a sync run of each kind ends as the batch lane's do.
KINDS = {"plain": "", "refused": " [sim:status=400]", "refusal": " [sim:refusal]"}
# The result cache is on only where tenants are authenticated: every run is signed by this
# requester, of the default tenant.
REQUESTER = SigningKey.generate("batcher")


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory, metrics_port: int) -> Iterator[LocalStack]:
    env = {
        **E2E_WORKER_ENV,
        "LLM_BATCH": "allowed",
        "LLM_BATCH_SIZE": "5",
        "LLM_BATCH_DELAY_S": "2",
        "LLM_BATCH_POLL_S": "1",
        "LLM_RESULT_CACHE_TTL_S": "3600",
        "REQUESTER_PUBLIC_KEYS": REQUESTER.requester_entry("default"),
        "LLM_MAX_OUTPUT_TOKENS": "200",
        "METRICS_PORT": str(metrics_port),
    }
    yield from stack_with_worker(tmp_path_factory.mktemp("batched"), env, with_capacity_store=True)


@pytest.fixture(scope="module")
def ran() -> list[WorkflowHandle[Any, Any]]:
    """Every run this module starts, for the replay at its end."""
    return []


async def start(client: Client, payload: dict[str, Any]) -> WorkflowHandle[Any, Any]:
    """Start ``payload`` signed by the module's requester, as its CLI would."""
    claimed = REQUESTER.sign_start(
        PipelineRequest.model_validate(payload),
        workflow_type=contract.WORKFLOW_TYPE,
        namespace="default",
        now=datetime.now(UTC),
    )
    return await start_unsigned(client, claimed.model_dump(mode="json", exclude_none=True))


def sim(stack: LocalStack) -> Simulator:
    return Simulator(stack.addresses.openai_base_url)


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return samples(response.read().decode())


@pytest.fixture
async def store(batched: LocalStack) -> AsyncIterator[CapacityStore]:
    """The stack's capacity store, closed however the test ends."""
    async with operator_view(batched) as capacity:
        yield capacity


def sync_priced(usage: dict[str, Any]) -> float:
    """What one call's tokens cost in the synchronous lane, by hand from the price table
    (cached input at the cached rate)."""
    assert PRICE.cached_prompt is not None
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    return (
        float(
            (usage["prompt_tokens"] - cached) * PRICE.prompt
            + cached * PRICE.cached_prompt
            + usage["completion_tokens"] * PRICE.completion
        )
        / 1000
    )


async def run_all(
    client: Client, payloads: list[dict[str, Any]], ran: list[WorkflowHandle[Any, Any]]
) -> list[Any]:
    """Start every run at once (at most 100 start calls in flight) and return their results."""
    gate = asyncio.Semaphore(100)

    async def one(payload: dict[str, Any]) -> Any:
        async with gate:
            handle = await start(client, payload)
        ran.append(handle)
        async with gate:
            return await finished(handle)

    return await asyncio.gather(*(one(payload) for payload in payloads))


def restart(stack: LocalStack, **env: str) -> None:
    stack.stop_worker()
    stack.worker_env.update(env)
    stack.start_worker()


@pytest.mark.timeout(900)
async def test_a_thousand_runs_take_four_batches_and_pay_the_batch_price(
    batched: LocalStack,
    metrics_port: int,
    ran: list[WorkflowHandle[Any, Any]],
    store: CapacityStore,
) -> None:
    """1,000 runs asking for the batch lane, grouped 250 a batch: exactly ceil(1000 / 250) = 4
    batches of 250 are submitted (the simulator's count), every run ends in the state a synchronous
    run of its kind ends in (answered: completed; refused with a 400 or by the model: failed),
    each in one of those batches, and the cost metric's batch lane and the tenant's spend equal
    the batch price of the simulator's token counts (half of the price table's), within 1%.
    The lane takes every call when first asked: a call it refused would be retried by its run as
    a new call in a later group, one more batch (a burst once ran out of store connections)."""
    simulator = sim(batched)
    restart(batched, LLM_BATCH_SIZE=str(GROUP), LLM_BATCH_DELAY_S="300")
    try:
        client = await connect(batched)
        day = datetime.now(UTC).date()
        spent_before = await store.spend("default", day)
        sync_kinds = [kind for kind in KINDS for _ in range(3)]
        sync_results = await run_all(
            client,
            [
                request(f"Sync {kind} {n}{KINDS[kind]}", review="never", options={"lane": "sync"})
                for n, kind in enumerate(sync_kinds)
            ],
            ran,
        )
        sync_state = {
            kind: result.state for kind, result in zip(sync_kinds, sync_results, strict=True)
        }
        assert [sync_state[kind] for kind in sync_kinds] == [r.state for r in sync_results]
        assert sync_state == {"plain": "completed", "refused": "failed", "refusal": "failed"}
        before = simulator.batches()["submissions"]
        kinds = [
            "plain" if n % 20 > 1 else ("refused" if n % 20 == 0 else "refusal")
            for n in range(RUNS)
        ]
        results = await run_all(
            client,
            [
                request(
                    f"Batch question {n}{KINDS[kind]}", review="never", options={"lane": "batch"}
                )
                for n, kind in enumerate(kinds)
            ],
            ran,
        )
        assert [r.state for r in results] == [sync_state[kind] for kind in kinds]
        retried = sum(entry.to_state == "retry_llm" for r in results for entry in r.history)
        assert retried == 0, f"{retried} runs retried: the worker log says why the lane refused"
        state = simulator.batches()
        submitted = state["submissions"] - before
        assert submitted == math.ceil(RUNS / GROUP) == 4
        ours = {b["id"] for b in state["batches"][before:]}
        assert [b["request_counts"]["total"] for b in state["batches"][before:]] == [GROUP] * 4
        for handle in ran[-RUNS:][:20]:
            assert (await status_of(handle)).batch_id in ours

        lines = [
            entry
            for entry in simulator.requests()
            if entry["path"] == "chat" and entry["batch_id"] in ours and entry["usage"]
        ]
        assert len(lines) == RUNS - RUNS // 20  # the 400s are not answered, nor billed
        at_sync_prices = sum(sync_priced(entry["usage"]) for entry in lines)
        found = scrape(metrics_port)
        by_metric = total(found, "aiorch_llm_cost_usd_sum", lane="batch")
        assert PRICE.batch == 0.5
        assert by_metric == pytest.approx(at_sync_prices * 0.5, rel=0.01)
        spent = await store.spend("default", day) - spent_before
        sync_spent = total(found, "aiorch_llm_cost_usd_sum", lane="sync")
        assert spent == pytest.approx(by_metric + sync_spent, rel=0.01)
    finally:
        restart(batched, LLM_BATCH_SIZE="5", LLM_BATCH_DELAY_S="2")


async def test_a_failed_batched_call_takes_the_runs_retry_path(
    batched: LocalStack, ran: list[WorkflowHandle[Any, Any]]
) -> None:
    """A call the batch answers with a 503 (once) or a malformed reply (once) is attempt 1
    failed: the run backs off, its attempt 2 goes into another batch, and it completes."""
    client = await connect(batched)
    results = await run_all(
        client,
        [
            request("Busy once [sim:status=503:times=1]", options={"lane": "batch"}),
            request("Odd once [sim:malformed:times=1]", options={"lane": "batch"}),
        ],
        ran,
    )
    for result in results:
        assert result.state == "completed"
        events = [entry.event for entry in result.history]
        assert events.count("batch_submitted") == 2
        assert "retryable_error" in events
    for handle in ran[-2:]:
        assert (await status_of(handle)).attempts == 2


def first_line_message(simulator: Simulator, batch: dict[str, Any]) -> str:
    """The user message of the first line of ``batch``'s input file: the line an expiring
    batch answers first."""
    url = f"{simulator.root}/v1/files/{batch['input_file_id']}/content"
    with urllib.request.urlopen(url, timeout=10) as response:
        first = json.loads(response.read().decode().splitlines()[0])
    return str(first["body"]["messages"][-1]["content"])


async def test_an_expired_batch_resubmits_only_its_unfinished_calls(
    batched: LocalStack, ran: list[WorkflowHandle[Any, Any]]
) -> None:
    """A batch of five that expires after answering two, one of whose runs was terminated
    while it waited: its three unfinished calls (and only they: not the answer the terminated
    run never took) go into a second batch, whose answers complete their runs; no call is made
    twice."""
    simulator = sim(batched)
    client = await connect(batched)
    before = simulator.batches()["submissions"]
    # Long enough to terminate a run before its batch ends.
    simulator.set_batches(completion_s=8, expire_after=2)
    try:
        handles = [
            await start(client, request(f"Expiring {n}", options={"lane": "batch"}))
            for n in range(5)
        ]
        deadline = asyncio.get_running_loop().time() + 30
        while simulator.batches()["submissions"] == before:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.1)
        simulator.set_batches(completion_s=1)
        first = first_line_message(simulator, simulator.batches()["batches"][before])
        [stopped] = [h for n, h in enumerate(handles) if f"Expiring {n}" in first]
        await stopped.terminate("stops waiting for its batched call")
        waiting = [handle for handle in handles if handle is not stopped]
        ran.extend(waiting)
        results = [await finished(handle) for handle in waiting]
    finally:
        simulator.set_batches(completion_s=1)
    assert [r.state for r in results] == ["completed"] * 4
    assert (await stopped.describe()).status == WorkflowExecutionStatus.TERMINATED
    batches = simulator.batches()["batches"][before:]
    assert [(b["status"], b["request_counts"]["total"]) for b in batches] == [
        ("expired", 5),
        ("completed", 3),
    ]
    answered = [e for e in simulator.requests() if e["batch_id"] in {b["id"] for b in batches}]
    assert len(answered) == 5
    assert len({e["custom_id"] for e in answered}) == 5


async def test_a_redrive_after_the_call_succeeded_makes_no_provider_call(
    batched: LocalStack, ran: list[WorkflowHandle[Any, Any]]
) -> None:
    """With the result cache on, a run whose model call succeeded and whose embedding then
    failed for good is dead-lettered; `dlq redrive` starts it again, and its identical call is
    answered from the cache: 0 provider calls, no cost. A reedit (new messages) calls."""
    simulator = sim(batched)
    client = await connect(batched)
    simulator.set_fault({"status": 400, "path": "embeddings"})
    try:
        handle = await start(client, request("Cache me please", review="never"))
        ran.append(handle)
        assert (await finished(handle)).state == "dead_letter"
    finally:
        simulator.clear_faults()
    assert len(simulator.chat_requests(handle.id)) == 1
    redriven = starter(batched, "dlq", "redrive", handle.id, env=batched.worker_env)
    assert redriven.returncode == 0, redriven.stdout + redriven.stderr
    again = client.get_workflow_handle(handle.id)
    ran.append(again)
    assert (await finished(again)).state == "completed"
    assert len(simulator.chat_requests(handle.id)) == 1
    assert (await status_of(again)).cost_usd == 0

    reviewed = await start(client, request("Cache me please", review="always"))
    ran.append(reviewed)
    await wait_for_state(reviewed, "await_review")
    assert simulator.chat_requests(reviewed.id) == []  # answered from the cache
    await reviewed.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        await signed(reviewed, batched.reviewer_key, "reedit", "alice", "shorter"),
        result_type=RunStatus,
    )
    await wait_for_state(reviewed, "await_review")
    assert len(simulator.chat_requests(reviewed.id)) == 1  # new messages: a call


async def test_replaying_every_history_on_a_cold_worker_changes_no_spend(
    batched: LocalStack,
    metrics_port: int,
    ran: list[WorkflowHandle[Any, Any]],
    store: CapacityStore,
) -> None:
    """Every history of this module (runs in both lanes, cached and redriven, and the batch
    groups' LlmBatch runs, each ended once its runs have) replays without a nondeterminism
    error, through the replayer and on a restarted worker with no cache that answers a query of
    each run from its history; the tenant's spend, the simulator's calls and submissions stay
    as they were, and the cold worker's cost and token metrics count nothing."""
    simulator = sim(batched)
    client = await connect(batched)
    day = datetime.now(UTC).date()
    spent = await store.spend_by_tenant(day)
    calls = len(simulator.requests())
    submissions = simulator.batches()["submissions"]

    groups = [
        client.get_workflow_handle(w.id, run_id=w.run_id)
        async for w in client.list_workflows(f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}'")
    ]
    assert groups
    # A group's run ends once its collection returns, moments after the last of its runs got
    # its answer: one still collecting would be in flight through the restarts below.
    for group in groups:
        await asyncio.wait_for(group.result(), timeout=30)
    histories = [await h.fetch_history() for h in [*ran, *groups]]
    for history in histories:
        assert not any(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in history.events
        )
    replayer = Replayer(workflows=[EngineWorkflow, LlmBatch], plugins=[AiOrchestratorPlugin()])

    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in histories:
            yield history

    replayed = await replayer.replay_workflows(each(), raise_on_replay_failure=False)
    assert replayed.replay_failures == {}

    restart(batched, WORKER_MAX_CACHED_WORKFLOWS="0")
    try:
        for handle in ran[-60:]:
            await status_of(handle)
        found = scrape(metrics_port)
        assert total(found, "aiorch_llm_cost_usd_sum") == 0
        assert total(found, "aiorch_llm_tokens_total") == 0
        assert total(found, "aiorch_spend_usd_sum") == 0
    finally:
        batched.worker_env.pop("WORKER_MAX_CACHED_WORKFLOWS")
        restart(batched)
    assert await store.spend_by_tenant(day) == spent
    assert len(simulator.requests()) == calls
    assert simulator.batches()["submissions"] == submissions
