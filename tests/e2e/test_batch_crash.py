"""The batch lane survives its worker: SIGKILLed while it submits a batch (the batch exists, the
create call has not answered) and again while it polls one, a new worker re-attaches to each
batch, submits none twice (the simulator counts the batches created) and loses no run. Real dev
server, worker processes, simulator, SQS and capacity store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start, status_of
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker
from tests.support.simulator import Simulator
from workflows import contract

pytestmark = [pytest.mark.e2e, pytest.mark.long]

GROUP = 20


@pytest.fixture
def crashing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {
        **E2E_WORKER_ENV,
        "LLM_BATCH": "allowed",
        "LLM_BATCH_SIZE": str(GROUP),
        "LLM_BATCH_DELAY_S": "600",
        "LLM_BATCH_POLL_S": "1",
    }
    yield from stack_with_worker(tmp_path_factory.mktemp("crash"), env, with_capacity_store=True)


async def until(check: Any, what: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


async def submit_attempts(client: Client) -> list[int]:
    """For each batch group, the attempt of its submit_batch that completed (1: the first; the
    history's started event records the last attempt)."""
    query = f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}'"
    attempts = []
    async for found in client.list_workflows(query):
        events = (await client.get_workflow_handle(found.id).fetch_history()).events
        submit = next(
            e.event_id
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name
            == contract.ACTIVITY_SUBMIT_BATCH
        )
        started = next(
            e.activity_task_started_event_attributes
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and e.activity_task_started_event_attributes.scheduled_event_id == submit
        )
        attempts.append(int(started.attempt))
    return attempts


async def group_of(client: Client, tag: str) -> list[WorkflowHandle[Any, Any]]:
    """Start a full group of batch-lane runs."""
    return [
        await start(
            client, request(f"{tag} question {n}", review="never", options={"lane": "batch"})
        )
        for n in range(GROUP)
    ]


@pytest.mark.timeout(300)
async def test_a_killed_worker_never_submits_a_batch_twice_and_loses_no_run(
    crashing: LocalStack,
) -> None:
    """1. A full group's batch is created while its create call hangs; the worker is SIGKILLed
    then, and a new one started: the submission is retried, finds the batch by its metadata,
    and every run completes from that one batch. 2. The next group's batch is submitted and
    polled; the worker is SIGKILLed while every run waits in await_batch, and a new one
    started: polling goes on and every run completes. Two batches in all, no run lost."""
    simulator = Simulator(crashing.addresses.openai_base_url)
    client = await connect(crashing)

    simulator.set_batches(completion_s=1, create_delay_ms=8000)
    first = await group_of(client, "Submitting")

    async def created() -> bool:
        return bool(simulator.batches()["submissions"] == 1)

    await until(created, "the first batch is created")
    crashing.kill_worker()
    simulator.set_batches(completion_s=20)
    crashing.start_worker()
    results = [await finished(handle) for handle in first]
    assert [r.state for r in results] == ["completed"] * GROUP
    [batch] = simulator.batches()["batches"]
    assert {(await status_of(h)).batch_id for h in first} == {batch["id"]}
    assert await submit_attempts(client) == [2]  # retried after the kill, found the batch

    second = await group_of(client, "Polling")

    async def all_waiting() -> bool:
        return all([(await status_of(h)).state == "await_batch" for h in second])

    await until(all_waiting, "the second group waits in await_batch")
    assert simulator.batches()["batches"][-1]["status"] == "in_progress"
    crashing.kill_worker()
    await asyncio.sleep(2)
    crashing.start_worker()
    results = [await finished(handle) for handle in second]
    assert [r.state for r in results] == ["completed"] * GROUP

    state = simulator.batches()
    assert state["submissions"] == 2
    assert sorted(await submit_attempts(client)) == [1, 2]
    assert [b["request_counts"]["total"] for b in state["batches"]] == [GROUP, GROUP]
    lines = [e for e in simulator.requests() if e["path"] == "chat"]
    assert len(lines) == 2 * GROUP
    assert len({e["custom_id"] for e in lines}) == 2 * GROUP
