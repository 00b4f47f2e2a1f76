"""Spill-over end to end: with ``SPILL_OVER=on`` and a model limited to a few calls a minute,
batch-eligible runs started at once are served synchronously while the limit allows and the
rest go through the provider's batch API (the simulator counts their batches and lines) instead
of queueing; a run that is not eligible queues for capacity. Real dev server, worker process,
simulator (its Files and Batches API) and capacity store. Then a worker SIGKILLed while it
submits the spilled calls' batch: none is submitted twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.e2e.test_batch_crash import submit_attempts
from tests.e2e.test_batch_lane import scrape
from tests.e2e.test_observability import total
from tests.support.live_runs import request, start, status_of
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker
from tests.support.simulator import Simulator

pytestmark = [pytest.mark.e2e, pytest.mark.long]

ELIGIBLE = 16
MODEL = "sim-large"
SPILLING_ENV = {
    **E2E_WORKER_ENV,
    "LLM_MODEL": MODEL,
    "LLM_FALLBACK_MODEL": "",
    # About six calls of ~130 tokens a minute: the rest of a burst would wait far past
    # SPILL_OVER_WAIT_S.
    "LLM_RATE_LIMITS": json.dumps({MODEL: {"tpm": 800}}),
    "LLM_MAX_OUTPUT_TOKENS": "64",
    "CAPACITY_LEASE_S": "3",
    "LLM_BATCH": "allowed",
    "LLM_BATCH_SIZE": "50",
    "LLM_BATCH_DELAY_S": "2",
    "LLM_BATCH_POLL_S": "1",
    "SPILL_OVER": "on",
    "SPILL_OVER_WAIT_S": "5",
}


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def spilling(tmp_path_factory: pytest.TempPathFactory, metrics_port: int) -> Iterator[LocalStack]:
    env = {**SPILLING_ENV, "METRICS_PORT": str(metrics_port)}
    yield from stack_with_worker(tmp_path_factory.mktemp("spill"), env, with_capacity_store=True)


@pytest.fixture
def crashing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Spill-over whose one group waits 5 s for the spilled calls, then is submitted."""
    env = {**SPILLING_ENV, "LLM_BATCH_DELAY_S": "5"}
    yield from stack_with_worker(tmp_path_factory.mktemp("crash"), env, with_capacity_store=True)


@pytest.mark.timeout(300)
async def test_eligible_runs_past_the_limit_go_through_the_batch_lane(
    spilling: LocalStack, metrics_port: int
) -> None:
    """16 batch-eligible runs started at once all complete: those the limit admits are
    answered synchronously, every other one spilled (its path goes invoke_llm -> await_batch,
    never through await_capacity), and the simulator's batches hold exactly the spilled
    runs' calls, one line each, in batches the runs name, and the spill-over metric counts
    them; a run that is not eligible, started behind them with a call of about 720 tokens
    (more than the bucket can hold again while the calls answered before it count), waits in
    await_capacity and is answered synchronously."""
    simulator = Simulator(spilling.addresses.openai_base_url)
    before = simulator.batches()["submissions"]
    client = await connect(spilling)
    eligible = [
        await start(
            client,
            request(f"Spill question {n}", review="never", options={"batch_eligible": True}),
        )
        for n in range(ELIGIBLE)
    ]
    # Spilled calls give their queue places back, so only the tokens themselves can keep this
    # run waiting: its call needs more than the calls answered so far leave in the bucket.
    long = "A question that may not spill, asked with a long preamble:" + " context" * 180
    plain = await start(client, request(long, review="never"))
    results = await asyncio.gather(*(finished(handle) for handle in [*eligible, plain]))

    assert [result.state for result in results] == ["completed"] * (ELIGIBLE + 1)
    paths = [[entry.to_state for entry in result.history] for result in results]
    spilled = [n for n, path in enumerate(paths[:ELIGIBLE]) if "await_batch" in path]
    assert 0 < len(spilled) < ELIGIBLE
    assert all("await_capacity" not in paths[n] for n in spilled)
    assert "await_capacity" in paths[-1] and "await_batch" not in paths[-1]
    assert len(spill_details(results)) == len(spilled)
    counted = total(scrape(metrics_port), "aiorch_capacity_spill_overs_total", tenant="default")
    assert counted == len(spilled)

    state = simulator.batches()
    ours = state["batches"][before:]
    assert state["submissions"] - before == len(ours) >= 1
    assert sum(batch["request_counts"]["total"] for batch in ours) == len(spilled)
    ids = {batch["id"] for batch in ours}
    for n in spilled:
        assert (await status_of(eligible[n])).batch_id in ids
    lines = [entry for entry in simulator.requests() if entry.get("batch_id") in ids]
    assert len([entry for entry in lines if entry["path"] == "chat"]) == len(spilled)


def spill_details(results: list[Any]) -> list[str]:
    """The transition details of every spill among ``results``."""
    return [
        entry.detail or ""
        for result in results
        for entry in result.history
        if entry.event == "batch_submitted" and (entry.detail or "").startswith("spilled")
    ]


@pytest.mark.timeout(300)
async def test_a_worker_killed_while_spilled_calls_are_submitted_submits_them_once(
    crashing: LocalStack,
) -> None:
    """Eligible runs past the limit spill into one group; the worker is SIGKILLed while that
    group's batch is being created (the batch exists, the create call has not answered) and a
    new one started: the retried submission (attempt 2) finds the batch, so the simulator counts one
    batch, each spilled call in it once, and every run completes."""
    simulator = Simulator(crashing.addresses.openai_base_url)
    simulator.set_batches(completion_s=1, create_delay_ms=8000)
    client = await connect(crashing)
    handles = [
        await start(
            client,
            request(f"Crash question {n}", review="never", options={"batch_eligible": True}),
        )
        for n in range(ELIGIBLE)
    ]

    deadline = asyncio.get_running_loop().time() + 60
    while simulator.batches()["submissions"] == 0:
        assert asyncio.get_running_loop().time() < deadline, "the spilled calls were not batched"
        await asyncio.sleep(0.1)
    crashing.kill_worker()
    crashing.start_worker()
    results = await asyncio.gather(*(finished(handle) for handle in handles))

    assert [result.state for result in results] == ["completed"] * ELIGIBLE
    spilled = len(spill_details(results))
    state = simulator.batches()
    assert state["submissions"] == 1
    assert await submit_attempts(client) == [2]  # retried after the kill, found the batch
    [batch] = state["batches"]
    assert 0 < spilled == batch["request_counts"]["total"]
    lines = [e for e in simulator.requests() if e["path"] == "chat" and e.get("batch_id")]
    assert len(lines) == len({e["custom_id"] for e in lines}) == spilled
