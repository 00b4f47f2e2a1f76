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
import time
from typing import Any, Final

from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.config import Settings
from bench.costs import requests_log
from bench.report import Check
from bench.shared_limit import (
    TENANT_A,
    TENANT_B,
    TPM,
    WEIGHTS,
    WORKERS,
    burst_spent,
    busy_figures,
    ended,
    fresh_limit,
    simulator_call,
    start_runs,
    start_workers,
)
from bench.stats import Figure
from bench.tally import Bench, Tally

TASK_QUEUE: Final = "aiorch-fairshare"
# Issue 43's targets.
MAX_BUSY_OVER_IDLE: Final = 2.0
MIN_SHARE_OF_WEIGHTED: Final = 0.9
MAX_429_SHARE: Final = 0.01
MIN_LIMIT_USE: Final = 0.85


async def _repetition(bench: Bench, store: CapacityStore) -> dict[str, Any]:
    options, client, timeout = bench.options, bench.client, bench.options.timeout_s
    await fresh_limit(bench, store)
    alone = await start_runs(client, TASK_QUEUE, TENANT_B, options.fairshare_b)
    outcomes = [await ended(alone, timeout)]
    await fresh_limit(bench, store)
    flood = await start_runs(client, TASK_QUEUE, TENANT_A, options.fairshare_a)
    spent_at = await burst_spent(bench, flood, time.monotonic() + timeout)
    busy = await start_runs(client, TASK_QUEUE, TENANT_B, options.fairshare_b)
    outcomes += await asyncio.gather(ended(flood, timeout), ended(busy, timeout))
    log = await asyncio.to_thread(requests_log, bench.stack.simulator_url)
    return {
        "failed": sum(o.failed + o.lost for o in outcomes),
        **busy_figures(log, alone, flood, busy, spent_at),
    }


async def run_fairshare(bench: Bench) -> dict[str, Any]:
    """The whole phase (see the module doc); plain data for the report."""
    settings = Settings(capacity_store_url=bench.stack.local.addresses.capacity_store_url)
    store = CapacityStore.from_settings(settings)
    assert store is not None, "the bench stack runs a capacity store"
    workers = start_workers(bench, "fairshare", {"TEMPORAL_TASK_QUEUE": TASK_QUEUE})
    reps: list[dict[str, Any]] = []
    try:
        for rep in range(bench.options.reps):
            reps.append(await _repetition(bench, store))
            bench.log(f"fairshare {rep + 1}/{bench.options.reps}: {busy_line(reps[-1])}")
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.to_thread(simulator_call, bench, "DELETE", "/_sim/ratelimits", None)
        await store.close()
    return {
        "tpm": TPM,
        "workers": WORKERS,
        "weights": WEIGHTS,
        "runs": {TENANT_A: bench.options.fairshare_a, TENANT_B: bench.options.fairshare_b},
        "reps": reps,
    }


def busy_line(rep: dict[str, Any]) -> str:
    """One repetition's synchronous figures (`bench.shared_limit.busy_figures`) in a line."""
    shares = rep["share_of_weighted"]
    return (
        f"B p95 wait {rep['b_p95_wait_busy_s']:.1f}s busy / {rep['b_p95_wait_idle_s']:.1f}s idle "
        f"(A median {rep['a_median_wait_s']:.1f}s); of weighted share A {shares[TENANT_A]:.0%} "
        f"B {shares[TENANT_B]:.0%}; 429s {rep['share_429']:.1%}; limit use {rep['limit_use']:.0%}"
    )


def span(figure: Figure) -> str:
    """A figure as median [min-max]."""
    return f"{figure.median:.2f} [{figure.min:.2f}-{figure.max:.2f}]"


def busy_checks(
    phase: str, reps: list[dict[str, Any]], runs: dict[str, int]
) -> tuple[dict[str, Any], tuple[str, str, str, str], list[Check]]:
    """The synchronous figures of ``phase``'s repetitions (medians and ranges), its row of
    the bench's table, and its checks against issue 43's targets."""

    def figure(pick: Any) -> Figure:
        return Figure.of([pick(rep) for rep in reps])

    busy = figure(lambda r: r["b_p95_wait_busy_s"])
    idle = figure(lambda r: r["b_p95_wait_idle_s"])
    ratio = figure(lambda r: r["b_p95_wait_busy_s"] / r["b_p95_wait_idle_s"])
    share_a = figure(lambda r: r["share_of_weighted"][TENANT_A])
    share_b = figure(lambda r: r["share_of_weighted"][TENANT_B])
    limited = figure(lambda r: r["share_429"])
    use = figure(lambda r: r["limit_use"])
    figures = {
        "b_p95_wait_busy_s": busy.as_dict(),
        "b_p95_wait_idle_s": idle.as_dict(),
        "b_busy_over_idle": ratio.as_dict(),
        "a_share_of_weighted": share_a.as_dict(),
        "b_share_of_weighted": share_b.as_dict(),
        "share_429": limited.as_dict(),
        "limit_use": use.as_dict(),
    }
    row = (
        f"{phase}, {runs[TENANT_A]} + {runs[TENANT_B]} runs, {TPM} TPM",
        f"B p95 {span(busy)}s busy, {span(idle)}s idle",
        f"of weighted A {span(share_a)}, B {span(share_b)}",
        f"429s {limited.median:.1%}, use {span(use)}",
    )
    checks = [
        Check(
            f"{phase}: B's p95 wait to its call, A busy / idle ({runs[TENANT_A]} + "
            f"{runs[TENANT_B]} runs, {TPM} TPM)",
            f"{ratio.median:.1f} ({busy.median:.1f}s / {idle.median:.1f}s)",
            f"<= {MAX_BUSY_OVER_IDLE:g}",
            ratio.median <= MAX_BUSY_OVER_IDLE,
        ),
        Check(
            f"{phase}: each tenant's synchronous tokens / its weighted share, both busy",
            f"A {share_a.median:.2f}, B {share_b.median:.2f}",
            f">= {MIN_SHARE_OF_WEIGHTED:g}",
            min(share_a.median, share_b.median) >= MIN_SHARE_OF_WEIGHTED,
        ),
        Check(
            f"{phase}: model calls answered 429",
            f"{limited.median:.1%}",
            f"<= {MAX_429_SHARE:.0%}",
            limited.median <= MAX_429_SHARE,
        ),
        Check(
            f"{phase}: tokens answered / the limit, once its burst was spent",
            f"{use.median:.0%}",
            f">= {MIN_LIMIT_USE:.0%}",
            use.median >= MIN_LIMIT_USE,
        ),
    ]
    return figures, row, checks


def check_fairshare(bench: Bench, measured: dict[str, Any], tally: Tally) -> None:
    """Record the phase's figures (medians and ranges over the repetitions) and judge them
    against the issue's targets."""
    tally.report["fairshare"] = measured
    reps = measured["reps"]
    tally.failed += sum(rep["failed"] for rep in reps)
    measured["figures"], row, checks = busy_checks("fairshare", reps, measured["runs"])
    tally.extra.append(row)
    tally.checks += checks
