"""Two tenants against one rate-limited model (issue 43's shape), as the fair-share and the
spill-over phases measure it: one simulator limit of `TPM` tokens a minute, shared through the
capacity store by `WORKERS` workers of ours with ``TENANT_WEIGHTS`` A=3, B=1.

What both phases do with it: set the limit anew, start a tenant's runs at once, wait for
them, find when A's burst is spent, and read from the simulator's log each run's wait to its
model call's answer and what the synchronous calls add up to while both tenants are busy.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.processes import ManagedProcess
from aiorch.ops.visibility import task_priority
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_keys, scope_name
from aiorch_runtime.config import BudgetSettings
from bench.costs import requests_log
from bench.stack import start_ours
from bench.stats import percentile
from bench.tally import Bench
from workflows import contract
from workflows.payloads import PipelineRequest

TPM: Final = 9_000
WORKERS: Final = 3
MODEL: Final = "sim-large"
TENANT_A: Final = "bench-a"
TENANT_B: Final = "bench-b"
WEIGHTS: Final = {TENANT_A: 3.0, TENANT_B: 1.0}
DISPATCH: Final = BudgetSettings.model_validate({"tenant_weights": WEIGHTS})
MESSAGE: Final = (
    "Summarise in one line why a tenant that floods a shared model must not starve the others, "
    "{tenant} run {n}"
)
# What the provider's bucket may still hold when the burst counts as spent.
BURST_SLACK: Final = 0.05
# Starts and result waits in flight at once: thousands of open long polls would load the dev
# server more than the runs do.
IN_FLIGHT: Final = 100


@dataclass(frozen=True)
class Started:
    """Runs started together: their handles and the (wall-clock) moment each was started."""

    tenant: str
    handles: list[WorkflowHandle[Any, Any]]
    at: dict[str, float]


@dataclass(frozen=True)
class Ended:
    """What became of runs started together: completed, ended otherwise, or not ended in
    time (lost)."""

    completed: int
    failed: int
    lost: int


def simulator_call(bench: Bench, method: str, path: str, body: dict[str, Any] | None) -> Any:
    """One call to the simulator's HTTP API; its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{bench.stack.simulator_url}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


async def fresh_limit(bench: Bench, store: CapacityStore) -> None:
    """The simulator's limit set anew (its buckets full) and the store's scope emptied, so a
    scenario does not start with the last one's debt."""
    await asyncio.to_thread(
        simulator_call, bench, "PUT", "/_sim/ratelimits", {"tpm": TPM, "model": MODEL}
    )
    scope = scope_name(bench.stack.local.addresses.openai_base_url, MODEL)
    await store.redis.delete(*scope_keys(scope))


async def start_runs(
    client: Client,
    task_queue: str,
    tenant: str,
    count: int,
    options: dict[str, Any] | None = None,
) -> Started:
    """``count`` runs of ``tenant`` started at once (``options`` in each request)."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(n: int) -> tuple[WorkflowHandle[Any, Any], float]:
        payload: dict[str, Any] = {
            "request_id": uuid.uuid4().hex[:24],
            "user_message": MESSAGE.format(tenant=tenant, n=n),
            "review": "never",
            "tenant": tenant,
        }
        if options:
            payload["options"] = options
        request = PipelineRequest.model_validate(payload)
        async with gate:
            # As starter.py starts a run: the tenant's fairness key and weight on its tasks.
            handle = await client.start_workflow(
                contract.WORKFLOW_TYPE,
                payload,
                id=payload["request_id"],
                task_queue=task_queue,
                priority=task_priority(request, DISPATCH),
            )
        return handle, time.time()

    started = await asyncio.gather(*(one(n) for n in range(count)))
    return Started(tenant, [h for h, _ in started], {h.id: at for h, at in started})


async def ended(started: Started, timeout_s: float) -> Ended:
    """Wait (at most ``timeout_s`` in all) for every run to end."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    deadline = time.monotonic() + timeout_s

    async def one(handle: WorkflowHandle[Any, Any]) -> str:
        async with gate:
            try:
                result = await asyncio.wait_for(handle.result(), deadline - time.monotonic())
            except TimeoutError:
                return "lost"
            except Exception:
                return "failed"
        return "completed" if result.get("state") == "completed" else "failed"

    outcomes = await asyncio.gather(*(one(h) for h in started.handles))
    return Ended(*(outcomes.count(o) for o in ("completed", "failed", "lost")))


def answers(log: list[dict[str, Any]], started: Started) -> dict[str, dict[str, Any]]:
    """Each run's first synchronously answered model call (a simulator log entry)."""
    first: dict[str, dict[str, Any]] = {}
    for entry in sorted(log, key=lambda e: e["at"]):
        run = entry.get("run_id")
        if entry["path"] == "chat" and entry["status"] == 200 and run in started.at:
            first.setdefault(run, entry)
    return first


def waits(log: list[dict[str, Any]], started: Started) -> list[float]:
    """Each run's wait from its start to its first synchronous answer, shortest first."""
    first = answers(log, started)
    return sorted(first[run]["at"] - at for run, at in started.at.items() if run in first)


def scheduled_ids(events: Iterable[HistoryEvent], activity_type: str) -> set[int]:
    """The event ids of a history's scheduled ``activity_type`` activities: what their started
    events name as ``scheduled_event_id``."""
    return {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    }


async def dispatch_delays(started: Started) -> list[float]:
    """Each run's wait from its start to its first model call's activity starting on a worker
    (the task queue's backlog, before any wait for capacity), shortest first."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(handle: WorkflowHandle[Any, Any]) -> float | None:
        async with gate:
            events = (await handle.fetch_history()).events
        calls = scheduled_ids(events, contract.ACTIVITY_INVOKE_LLM)
        for e in events:
            attributes = e.activity_task_started_event_attributes
            if (
                e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and attributes.scheduled_event_id in calls
            ):
                return e.event_time.ToMicroseconds() / 1e6 - started.at[handle.id]
        return None

    delays = await asyncio.gather(*(one(h) for h in started.handles))
    return sorted(d for d in delays if d is not None)


async def burst_spent(bench: Bench, flood: Started, deadline: float) -> float:
    """Wait until A's answered tokens passed the limit's first minute (its burst) and what
    refilled meanwhile, within `BURST_SLACK` of the limit: the provider's bucket is about
    empty, and the tokens from then on come at the limit's rate. Returns that moment (wall
    clock); also when every one of A's runs was answered first (a flood too small to spend it).
    """
    while time.monotonic() < deadline:
        log = await asyncio.to_thread(requests_log, bench.stack.simulator_url)
        first = answers(log, flood).values()
        if len(first) == len(flood.at):
            break
        if first:
            refilled = (time.time() - min(e["at"] for e in first)) * TPM / 60
            used = sum(e["usage"]["total_tokens"] for e in first)
            if used >= TPM * (1 - BURST_SLACK) + refilled:
                break
        await asyncio.sleep(0.5)
    return time.time()


def busy_figures(
    log: list[dict[str, Any]], alone: Started, flood: Started, busy: Started, spent_at: float
) -> dict[str, Any]:
    """What the synchronous lane gave while A flooded: B's p95 wait with A busy and with A
    idle (``alone``), A's median wait; while both were busy (from B's first start to B's last
    answer) each tenant's share of the answered tokens against its weighted share; the share
    of model calls answered 429; and the tokens answered once the burst was spent (until the
    last answer) against the limit."""
    b_answers = answers(log, busy)
    window = (min(busy.at.values()), max(e["at"] for e in b_answers.values()))
    tenants = {run: TENANT_A for run in flood.at} | {run: TENANT_B for run in busy.at}
    chats = [e for e in log if e["path"] == "chat" and e.get("run_id") in tenants]
    answered = [e for e in chats if e["status"] == 200]
    tokens = {TENANT_A: 0, TENANT_B: 0}
    for entry in answered:
        if window[0] <= entry["at"] <= window[1]:
            tokens[tenants[entry["run_id"]]] += entry["usage"]["total_tokens"]
    total = sum(tokens.values()) or 1
    weights = sum(WEIGHTS.values())
    saturated_s = max(e["at"] for e in answered) - spent_at
    after = sum(e["usage"]["total_tokens"] for e in answered if e["at"] > spent_at)
    a_waits = waits(log, flood)
    return {
        "b_p95_wait_idle_s": percentile(waits(log, alone), 0.95),
        "b_p95_wait_busy_s": percentile(waits(log, busy), 0.95),
        "a_median_wait_s": statistics.median(a_waits) if a_waits else float("nan"),
        "share_of_weighted": {
            tenant: (tokens[tenant] / total) / (WEIGHTS[tenant] / weights) for tenant in tokens
        },
        "share_429": sum(e["status"] == 429 for e in chats) / max(1, len(chats)),
        "limit_use": after / (saturated_s * TPM / 60) if saturated_s > 0 else float("nan"),
        "both_busy_s": window[1] - window[0],
        "saturated_s": saturated_s,
    }


def start_workers(bench: Bench, phase: str, env: dict[str, str]) -> list[ManagedProcess]:
    """`WORKERS` workers of ours on the limited model (``env`` laid over the shape's own)."""
    return [start_worker(bench, phase, str(n), env) for n in range(WORKERS)]


def start_worker(bench: Bench, phase: str, name: str, env: dict[str, str]) -> ManagedProcess:
    """One worker of ours for ``phase``, ready when it polls (``name`` names its log and its
    vector store)."""
    shape = {
        "LLM_RATE_LIMITS": json.dumps({MODEL: {"tpm": TPM}}),
        "TENANT_WEIGHTS": ",".join(f"{t}={w:g}" for t, w in WEIGHTS.items()),
        "LLM_MAX_OUTPUT_TOKENS": "64",
        "LLM_FALLBACK_MODEL": "",
        "LLM_MAX_ATTEMPTS": "100",
        "LLM_BACKOFF_INITIAL_S": "0.2",
        "LLM_BACKOFF_MAX_S": "2",
    }
    return start_ours(bench.stack.local, bench.stack.address, f"worker-{phase}-{name}", shape | env)
