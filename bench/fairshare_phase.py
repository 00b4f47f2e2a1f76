"""The fair-share phase (issue 43): tenant A floods a rate-limited model, tenant B starts a few
runs, against one simulator limit of `TPM` tokens a minute shared by `WORKERS` workers of ours
(``LLM_RATE_LIMITS``, ``TENANT_WEIGHTS`` A=3, B=1), on a task queue of their own.

Each repetition, from fresh buckets (the simulator's limit set anew, the store's scope emptied):

1. **A idle**: B's ``--fairshare-b`` runs start at once; each one's wait is the time from its
   start to the simulator's answer to its model call;
2. **A busy**: A's ``--fairshare-a`` runs start at once; once A's answered tokens passed the
   limit's first minute (its burst spent, its runs queued), B's runs start at once, and every
   run is driven to its end.

Figures: B's p95 wait with A busy and with A idle (and A's median wait, for contrast); while
both are busy (from B's first start to B's last answer) each tenant's share of the answered
tokens against its weighted share; the share of model calls answered 429; and the tokens
answered once the limit's burst was spent (until the last answer) against the limit. The
issue's load (2,000 + 50 runs at 9,000 tokens a minute) is half an hour of A's runs; the
default is 150 + 10 (about a minute each).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Final

from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.processes import ManagedProcess
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_keys, scope_name
from aiorch_runtime.config import Settings
from bench.costs import requests_log
from bench.report import Check
from bench.stack import start_ours
from bench.stats import Figure, percentile
from bench.tally import Bench, Tally
from workflows import contract

TPM: Final = 9_000
WORKERS: Final = 3
MODEL: Final = "sim-large"
TENANT_A: Final = "bench-a"
TENANT_B: Final = "bench-b"
WEIGHTS: Final = {TENANT_A: 3.0, TENANT_B: 1.0}
TASK_QUEUE: Final = "aiorch-fairshare"
MESSAGE: Final = (
    "Summarise in one line why a tenant that floods a shared model must not starve the others, "
    "{tenant} run {n}"
)
# What the provider's bucket may still hold when the burst counts as spent.
BURST_SLACK: Final = 0.05
# Issue 43's targets.
MAX_BUSY_OVER_IDLE: Final = 2.0
MIN_SHARE_OF_WEIGHTED: Final = 0.9
MAX_429_SHARE: Final = 0.01
MIN_LIMIT_USE: Final = 0.85


@dataclass(frozen=True)
class Started:
    """Runs started together: their handles and the (wall-clock) moment each was started."""

    tenant: str
    handles: list[WorkflowHandle[Any, Any]]
    at: dict[str, float]


def _simulator(bench: Bench, method: str, path: str, body: dict[str, Any] | None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{bench.stack.simulator_url}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


async def _fresh_limit(bench: Bench, store: CapacityStore) -> None:
    """The simulator's limit set anew (its buckets full) and the store's scope emptied, so a
    scenario does not start with the last one's debt."""
    await asyncio.to_thread(
        _simulator, bench, "PUT", "/_sim/ratelimits", {"tpm": TPM, "model": MODEL}
    )
    scope = scope_name(bench.stack.local.addresses.openai_base_url, MODEL)
    await store.redis.delete(*scope_keys(scope))


async def _start(client: Client, tenant: str, count: int) -> Started:
    async def one(n: int) -> tuple[WorkflowHandle[Any, Any], float]:
        payload = {
            "request_id": uuid.uuid4().hex[:24],
            "user_message": MESSAGE.format(tenant=tenant, n=n),
            "review": "never",
            "tenant": tenant,
        }
        handle = await client.start_workflow(
            contract.WORKFLOW_TYPE, payload, id=payload["request_id"], task_queue=TASK_QUEUE
        )
        return handle, time.time()

    started = await asyncio.gather(*(one(n) for n in range(count)))
    return Started(tenant, [h for h, _ in started], {h.id: at for h, at in started})


async def _ended(started: Started, timeout_s: float) -> int:
    """Wait for every run; how many did not complete."""

    async def one(handle: WorkflowHandle[Any, Any]) -> bool:
        try:
            result = await asyncio.wait_for(handle.result(), timeout_s)
        except Exception:
            return False
        return bool(result.get("state") == "completed")

    done = await asyncio.gather(*(one(h) for h in started.handles))
    return len(done) - sum(done)


def _answers(log: list[dict[str, Any]], started: Started) -> dict[str, dict[str, Any]]:
    """Each run's first answered model call (a simulator log entry)."""
    first: dict[str, dict[str, Any]] = {}
    for entry in sorted(log, key=lambda e: e["at"]):
        run = entry.get("run_id")
        if entry["path"] == "chat" and entry["status"] == 200 and run in started.at:
            first.setdefault(run, entry)
    return first


def _waits(log: list[dict[str, Any]], started: Started) -> list[float]:
    answers = _answers(log, started)
    return sorted(answers[run]["at"] - at for run, at in started.at.items() if run in answers)


async def _burst_spent(bench: Bench, flood: Started, deadline: float) -> float:
    """Wait until A's answered tokens passed the limit's first minute (its burst) and what
    refilled meanwhile, within `BURST_SLACK` of the limit: the provider's bucket is about
    empty, and the tokens from then on come at the limit's rate. Returns that moment (wall
    clock); also when every one of A's runs was answered first (a flood too small to spend it).
    """
    while time.monotonic() < deadline:
        log = await asyncio.to_thread(requests_log, bench.stack.simulator_url)
        answers = _answers(log, flood).values()
        if len(answers) == len(flood.at):
            break
        if answers:
            refilled = (time.time() - min(e["at"] for e in answers)) * TPM / 60
            used = sum(e["usage"]["total_tokens"] for e in answers)
            if used >= TPM * (1 - BURST_SLACK) + refilled:
                break
        await asyncio.sleep(0.5)
    return time.time()


async def _repetition(bench: Bench, store: CapacityStore) -> dict[str, Any]:
    options, client, timeout = bench.options, bench.client, bench.options.timeout_s
    await _fresh_limit(bench, store)
    alone = await _start(client, TENANT_B, options.fairshare_b)
    failed = await _ended(alone, timeout)
    await _fresh_limit(bench, store)
    flood = await _start(client, TENANT_A, options.fairshare_a)
    spent_at = await _burst_spent(bench, flood, time.monotonic() + timeout)
    busy = await _start(client, TENANT_B, options.fairshare_b)
    failed += sum(await asyncio.gather(_ended(flood, timeout), _ended(busy, timeout)))
    log = await asyncio.to_thread(requests_log, bench.stack.simulator_url)
    idle_waits, busy_waits = _waits(log, alone), _waits(log, busy)
    b_answers = _answers(log, busy)
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
    # The limit's use: every token answered once the burst was spent, until the last answer.
    saturated_s = max(e["at"] for e in answered) - spent_at
    after = sum(e["usage"]["total_tokens"] for e in answered if e["at"] > spent_at)
    return {
        "failed": failed,
        "b_p95_wait_idle_s": percentile(idle_waits, 0.95),
        "b_p95_wait_busy_s": percentile(busy_waits, 0.95),
        "a_median_wait_s": statistics.median(_waits(log, flood)),
        "share_of_weighted": {
            tenant: (tokens[tenant] / total) / (WEIGHTS[tenant] / weights) for tenant in tokens
        },
        "share_429": sum(e["status"] == 429 for e in chats) / max(1, len(chats)),
        "limit_use": after / (saturated_s * TPM / 60) if saturated_s > 0 else float("nan"),
        "both_busy_s": window[1] - window[0],
        "saturated_s": saturated_s,
    }


def _workers(bench: Bench) -> list[ManagedProcess]:
    env = {
        "TEMPORAL_TASK_QUEUE": TASK_QUEUE,
        "LLM_RATE_LIMITS": json.dumps({MODEL: {"tpm": TPM}}),
        "TENANT_WEIGHTS": ",".join(f"{t}={w:g}" for t, w in WEIGHTS.items()),
        "LLM_MAX_OUTPUT_TOKENS": "64",
        "LLM_FALLBACK_MODEL": "",
        "LLM_MAX_ATTEMPTS": "100",
        "LLM_BACKOFF_INITIAL_S": "0.2",
        "LLM_BACKOFF_MAX_S": "2",
    }
    return [
        start_ours(bench.stack.local, bench.stack.address, f"worker-fairshare-{n}", env)
        for n in range(WORKERS)
    ]


async def run_fairshare(bench: Bench) -> dict[str, Any]:
    """The whole phase (see the module doc); plain data for the report."""
    settings = Settings(capacity_store_url=bench.stack.local.addresses.capacity_store_url)
    store = CapacityStore.from_settings(settings)
    assert store is not None, "the bench stack runs a capacity store"
    workers = _workers(bench)
    reps: list[dict[str, Any]] = []
    try:
        for rep in range(bench.options.reps):
            reps.append(await _repetition(bench, store))
            bench.log(f"fairshare {rep + 1}/{bench.options.reps}: {_line(reps[-1])}")
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.to_thread(_simulator, bench, "DELETE", "/_sim/ratelimits", None)
        await store.close()
    return {
        "tpm": TPM,
        "workers": WORKERS,
        "weights": WEIGHTS,
        "runs": {TENANT_A: bench.options.fairshare_a, TENANT_B: bench.options.fairshare_b},
        "reps": reps,
    }


def _line(rep: dict[str, Any]) -> str:
    shares = rep["share_of_weighted"]
    return (
        f"B p95 wait {rep['b_p95_wait_busy_s']:.1f}s busy / {rep['b_p95_wait_idle_s']:.1f}s idle "
        f"(A median {rep['a_median_wait_s']:.1f}s); of weighted share A {shares[TENANT_A]:.0%} "
        f"B {shares[TENANT_B]:.0%}; 429s {rep['share_429']:.1%}; limit use {rep['limit_use']:.0%}"
    )


def _range(figure: Figure) -> str:
    return f"{figure.median:.2f} [{figure.min:.2f}-{figure.max:.2f}]"


def check_fairshare(bench: Bench, measured: dict[str, Any], tally: Tally) -> None:
    """Record the phase's figures (medians and ranges over the repetitions) and judge them
    against the issue's targets."""
    tally.report["fairshare"] = measured
    reps = measured["reps"]
    tally.failed += sum(rep["failed"] for rep in reps)

    def figure(pick: Any) -> Figure:
        return Figure.of([pick(rep) for rep in reps])

    busy = figure(lambda r: r["b_p95_wait_busy_s"])
    idle = figure(lambda r: r["b_p95_wait_idle_s"])
    ratio = figure(lambda r: r["b_p95_wait_busy_s"] / r["b_p95_wait_idle_s"])
    share_a = figure(lambda r: r["share_of_weighted"][TENANT_A])
    share_b = figure(lambda r: r["share_of_weighted"][TENANT_B])
    limited = figure(lambda r: r["share_429"])
    use = figure(lambda r: r["limit_use"])
    runs = measured["runs"]
    measured["figures"] = {
        "b_p95_wait_busy_s": busy.as_dict(),
        "b_p95_wait_idle_s": idle.as_dict(),
        "b_busy_over_idle": ratio.as_dict(),
        "a_share_of_weighted": share_a.as_dict(),
        "b_share_of_weighted": share_b.as_dict(),
        "share_429": limited.as_dict(),
        "limit_use": use.as_dict(),
    }
    tally.extra.append(
        (
            f"fairshare, {runs[TENANT_A]} + {runs[TENANT_B]} runs, {TPM} TPM",
            f"B p95 {_range(busy)}s busy, {_range(idle)}s idle",
            f"of weighted A {_range(share_a)}, B {_range(share_b)}",
            f"429s {limited.median:.1%}, use {_range(use)}",
        )
    )
    tally.checks += [
        Check(
            f"fairshare: B's p95 wait to its call, A busy / idle ({runs[TENANT_A]} + "
            f"{runs[TENANT_B]} runs, {TPM} TPM)",
            f"{ratio.median:.1f} ({busy.median:.1f}s / {idle.median:.1f}s)",
            f"<= {MAX_BUSY_OVER_IDLE:g}",
            ratio.median <= MAX_BUSY_OVER_IDLE,
        ),
        Check(
            "fairshare: each tenant's tokens / its weighted share, both busy",
            f"A {share_a.median:.2f}, B {share_b.median:.2f}",
            f">= {MIN_SHARE_OF_WEIGHTED:g}",
            min(share_a.median, share_b.median) >= MIN_SHARE_OF_WEIGHTED,
        ),
        Check(
            "fairshare: model calls answered 429",
            f"{limited.median:.1%}",
            f"<= {MAX_429_SHARE:.0%}",
            limited.median <= MAX_429_SHARE,
        ),
        Check(
            "fairshare: tokens answered / the limit, once its burst was spent",
            f"{use.median:.0%}",
            f">= {MIN_LIMIT_USE:.0%}",
            use.median >= MIN_LIMIT_USE,
        ),
    ]
