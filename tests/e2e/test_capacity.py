"""Shared capacity end to end: three worker processes, the simulator limited to a tokens-per-
minute budget, the capacity store (a real Redis), 300 runs started at once; with the shared
limit and without it. Then a worker SIGKILLed while holding a reservation.

The figures (429s per LLM call, completed-token throughput against the limit) are printed and
written to ``<tmp>/capacity-figures.json``; the README quotes them.

Throughput is measured where it means something: once the provider's first minute of burst is
spent, a run can only be answered as the bucket refills, so the tokens admitted after that
moment, divided by the time it took, against the limit, say how much of the provider's capacity
the fleet used. The burst's leftover at that moment is subtracted, so the figure never flatters.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from aiorch.devstack.processes import ManagedProcess
from aiorch.devstack.servers import start_worker
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_name
from aiorch_runtime.config import Settings
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support.live_runs import request, start
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.simulator import Simulator

pytestmark = [pytest.mark.e2e, pytest.mark.long]

RUNS = 300
WORKERS = 3
# ~105 tokens per call (the simulator counts words): 300 calls are ~2.6 minutes' worth at
# 12,000 tokens/minute, so after the first minute's burst the fleet waits ~95 s on the limit.
TPM = 12_000
MODEL = "sim-large"
MESSAGE = (
    "Summarise in one line why shared rate limits matter when many workers call one model "
    "through one API key, run {n}"
)
LIMITED_ENV = {
    **E2E_WORKER_ENV,
    "LLM_RATE_LIMITS": json.dumps({MODEL: {"tpm": TPM}}),
    "LLM_MAX_OUTPUT_TOKENS": "64",
    # The storm without the limit must not be escaped by the fallback model or end runs early.
    "LLM_FALLBACK_MODEL": "",
    "LLM_MAX_ATTEMPTS": "100",
    "LLM_BACKOFF_INITIAL_S": "0.2",
    "LLM_BACKOFF_MAX_S": "2",
    "LLM_TIMEOUT_S": "30",
}


@dataclass(frozen=True)
class Figures:
    """What one load run measured."""

    mode: str
    runs: int
    completed: int
    chat_calls: int
    rate_limited: int
    share_429: float
    throughput_share: float
    saturated_s: float
    wall_s: float
    machine: str


@dataclass
class Fleet:
    """A stack with the capacity store and extra workers, each with its own vector store."""

    stack: LocalStack
    workers: list[ManagedProcess]

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers.clear()

    def start_workers(self, env: dict[str, str], count: int, tag: str) -> None:
        for n in range(count):
            worker_env = {
                **self.stack.addresses.env(),
                **env,
                "VECTOR_STORE_PATH": str(self.stack.data_dir / f"vectors-{tag}-{n}"),
            }
            self.workers.append(
                start_worker(
                    env=worker_env,
                    log_dir=self.stack.data_dir / f"logs-{tag}-{n}",
                    cwd=self.stack.worker_cwd,
                )
            )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with LocalStack(
        tmp_path_factory.mktemp("capacity"), with_worker=False, with_capacity_store=True
    ) as stack:
        running = Fleet(stack, [])
        try:
            yield running
        finally:
            running.stop_workers()


def reset_simulator(simulator: Simulator) -> None:
    """Fresh log, and the model's limit set anew (its buckets start full)."""
    simulator.send("DELETE", "/_sim/requests", None)
    simulator.send("PUT", "/_sim/ratelimits", {"tpm": TPM, "model": MODEL})


def machine() -> str:
    return f"{os.cpu_count()} cores, {os.uname().sysname} {os.uname().machine}"


def measure(mode: str, log: list[dict[str, Any]], completed: int, wall_s: float) -> Figures:
    """The 429 share of LLM calls, and completed-token throughput once the burst was spent."""
    chats = [r for r in log if r["path"] == "chat" and r["model"] == MODEL]
    limited = [r for r in chats if r["status"] == 429]
    answered = sorted((r for r in chats if r["status"] == 200), key=lambda r: r["at"])
    t0 = answered[0]["at"]
    cumulative = 0
    saturated_from = None
    for index, row in enumerate(answered):
        cumulative += row["usage"]["total_tokens"]
        if cumulative > TPM:
            saturated_from = index
            break
    assert saturated_from is not None, "the run never spent the provider's first minute"
    t_a = answered[saturated_from]["at"]
    t_end = answered[-1]["at"]
    after = sum(r["usage"]["total_tokens"] for r in answered[saturated_from + 1 :])
    leftover = (t_a - t0) * TPM / 60  # what refilled during the burst, at most, still unspent
    rate = (after - leftover) / (t_end - t_a)
    return Figures(
        mode=mode,
        runs=RUNS,
        completed=completed,
        chat_calls=len(chats),
        rate_limited=len(limited),
        share_429=len(limited) / len(chats),
        throughput_share=rate / (TPM / 60),
        saturated_s=t_end - t_a,
        wall_s=wall_s,
        machine=machine(),
    )


async def run_load(fleet: Fleet, mode: str) -> Figures:
    """Start RUNS runs at once, wait for every result, and measure from the simulator's log."""
    simulator = Simulator(fleet.stack.addresses.openai_base_url)
    client = await Client.connect(
        fleet.stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )
    started = time.monotonic()
    handles = await asyncio.gather(
        *(start(client, request(MESSAGE.format(n=n))) for n in range(RUNS))
    )
    results = await asyncio.gather(*(finished(handle) for handle in handles))
    wall = time.monotonic() - started
    completed = sum(result.state == "completed" for result in results)
    figures = measure(mode, simulator.requests(), completed, wall)
    print(f"\ncapacity figures: {json.dumps(asdict(figures))}")
    return figures


def record(tmp_path_factory: pytest.TempPathFactory, figures: Figures) -> None:
    path = Path(tmp_path_factory.getbasetemp()) / "capacity-figures.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    known[figures.mode] = asdict(figures)
    path.write_text(json.dumps(known, indent=2) + "\n")


async def load_on_workers(
    fleet: Fleet, env: dict[str, str], mode: str, tmp_path_factory: pytest.TempPathFactory
) -> Figures:
    """The load of ``run_load`` on WORKERS fresh workers with ``env``, against a fresh simulator
    limit; the workers stop afterwards and the figures are recorded for the report."""
    reset_simulator(Simulator(fleet.stack.addresses.openai_base_url))
    fleet.start_workers(env, WORKERS, mode.replace(" ", "-"))
    try:
        figures = await run_load(fleet, mode)
    finally:
        fleet.stop_workers()
    record(tmp_path_factory, figures)
    return figures


@pytest.mark.timeout(600)
async def test_shared_limit_keeps_429s_rare_and_uses_the_capacity(
    fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """With LLM_RATE_LIMITS on three workers, 300 runs started at once all complete, at most
    1% of LLM calls get a 429, and once the provider's burst is spent the fleet's completed
    tokens per minute are at least 85% of the limit; waiting runs show await_capacity."""
    figures = await load_on_workers(fleet, LIMITED_ENV, "shared limit", tmp_path_factory)
    assert figures.completed == RUNS
    assert figures.share_429 <= 0.01, figures
    assert figures.throughput_share >= 0.85, figures


@pytest.mark.timeout(900)
async def test_without_the_shared_limit_workers_storm_the_provider(
    fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same load with LLM_RATE_LIMITS switched off: each worker finds the limit alone, and
    far more than 1% of LLM calls are answered 429 (every run still completes through
    retry_llm)."""
    env = {key: value for key, value in LIMITED_ENV.items() if key != "LLM_RATE_LIMITS"}
    figures = await load_on_workers(fleet, env, "no shared limit", tmp_path_factory)
    assert figures.completed == RUNS
    assert figures.share_429 > 0.2, figures


@pytest.mark.timeout(180)
async def test_a_killed_workers_reservation_returns_within_the_lease(fleet: Fleet) -> None:
    """A worker SIGKILLed while its call holds most of the model's capacity: the hold comes
    back once the lease (3 s) ran out, long before the bucket would have refilled on its own
    (50 s at 600 tokens/minute), and the run's retry on a new worker is called at once.

    The retry is the only call after the kill: a second run would race it for the bucket, which
    holds one call, and whichever came second would wait for the refill."""
    simulator = Simulator(fleet.stack.addresses.openai_base_url)
    simulator.send("DELETE", "/_sim/ratelimits", None)
    env = {
        **LIMITED_ENV,
        "LLM_RATE_LIMITS": json.dumps({MODEL: {"tpm": 600}}),
        "LLM_MAX_OUTPUT_TOKENS": "400",
        "CAPACITY_LEASE_S": "3",
    }
    settings = Settings(capacity_store_url=fleet.stack.addresses.capacity_store_url)
    store = CapacityStore.from_settings(settings)
    assert store is not None
    scope = scope_name(fleet.stack.addresses.openai_base_url, MODEL)
    await store.settle(scope, (600, 0), hold_id="none", used=-1_000_000, called=False)
    client = await Client.connect(
        fleet.stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )
    fleet.start_workers(env, 1, "doomed")
    try:
        hanging = await start(client, request("Hold on [sim:hang=60:times=1]"))
        deadline = time.monotonic() + 20
        while not await store.held(scope):
            assert time.monotonic() < deadline, "the call never reserved capacity"
            await asyncio.sleep(0.1)
        tokens, _ = await store.levels(scope, (600, 0))
        assert tokens < 100  # the hanging call holds nearly the whole minute
        fleet.workers[0].kill()
        killed = time.monotonic()
        fleet.workers.clear()
        while await store.held(scope):
            await store.levels(scope, (600, 0))
            await asyncio.sleep(0.2)
        returned = time.monotonic() - killed
        assert returned <= 3 + 5, returned  # the lease, far below the refill's 50 s
        tokens, _ = await store.levels(scope, (600, 0))
        assert tokens >= 500

        fleet.start_workers(env, 1, "heir")
        result = await finished(hanging)
        assert result.state == "completed"
        states = [entry.to_state for entry in result.history]
        assert "retry_llm" in states
        assert "await_capacity" not in states
    finally:
        fleet.stop_workers()
        await store.close()


@pytest.mark.timeout(180)
async def test_runs_complete_while_the_capacity_store_is_down(fleet: Fleet) -> None:
    """With the capacity store stopped, a worker configured for shared limits still starts,
    and runs complete: calls go ahead without the shared limit (fail open), and the worker
    logs why; with the store back (empty), the next run's call is admitted through it again.
    (A tenant with a budget is never called while the store is down:
    tests/security/test_budget_abuse.py.)"""
    simulator = Simulator(fleet.stack.addresses.openai_base_url)
    simulator.send("DELETE", "/_sim/ratelimits", None)
    client = await Client.connect(
        fleet.stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )
    settings = Settings(capacity_store_url=fleet.stack.addresses.capacity_store_url)
    store = CapacityStore.from_settings(settings)
    assert store is not None
    scope = scope_name(fleet.stack.addresses.openai_base_url, MODEL)
    fleet.stack.stop_capacity_store()
    try:
        fleet.start_workers(LIMITED_ENV, 1, "storeless")
        handles = [await start(client, request(f"No store {n}", tenant="acme")) for n in range(3)]
        results = [await finished(handle) for handle in handles]
        assert [result.state for result in results] == ["completed"] * 3
        log = (fleet.stack.data_dir / "logs-storeless-0" / "worker.log").read_text()
        assert "calling without the shared limit" in log
        fleet.stack.start_capacity_store()
        assert await store.scope_state(scope) == {}
        back = await finished(await start(client, request("Store is back", tenant="acme")))
        assert back.state == "completed"
        assert "tok" in await store.scope_state(scope)
    finally:
        fleet.stop_workers()
        if "capacity" not in fleet.stack.processes:
            fleet.stack.start_capacity_store()
        await store.close()
