"""The spill-over phase (issue 43): the fair-share phase's shape (``bench.shared_limit``: one
simulator limit of `TPM` tokens a minute, three workers of ours, ``TENANT_WEIGHTS`` A=3, B=1)
with ``LLM_BATCH=allowed`` and ``SPILL_OVER=on``, every one of A's runs batch-eligible, and one
worker SIGKILLed while it creates a spilled calls' batch.

Each repetition, from fresh buckets and a simulator that forgot its batches:

1. **A idle**: B's ``--spillover-b`` runs (not eligible) start at once, as in the fair-share
   phase;
2. **A busy**: A's ``--spillover-a`` runs, ``options.batch_eligible: true``, start at once;
   once A's burst is spent, B's runs start at once. Meanwhile, as soon as a worker runs
   ``submit_batch`` (the simulator holds every create call `CREATE_DELAY_MS` after the batch
   exists, and answers a batch `COMPLETION_S` after it), that worker is SIGKILLed and a new
   one started; every run is driven to its end.

Figures: A's runs answered synchronously, and the calls that spilled (the distinct calls in
the simulator's batches, read from their input files); the batches created, and the **calls
found in more than one batch** (a duplicate submission; target 0); the groups whose
submission was retried after the kill; runs completed, failed and lost; and the synchronous
figures of the fair-share phase (B's p95 wait with A busy and idle, each tenant's share of the
synchronous tokens while both busy, 429s, the limit's use). The issue's load, the default, is
2,000 + 50 runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any, Final

from aiorch.devstack.processes import ManagedProcess
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_keys, scope_name
from aiorch_runtime.config import Settings
from bench.batch_crash import audit_batches, batch_state, retried_submissions, submitting_worker
from bench.costs import requests_log
from bench.fairshare_phase import busy_checks, busy_line
from bench.report import Check
from bench.shared_limit import (
    MODEL,
    TENANT_A,
    TENANT_B,
    TPM,
    WEIGHTS,
    WORKERS,
    answers,
    burst_spent,
    busy_figures,
    dispatch_delays,
    ended,
    fresh_limit,
    simulator_call,
    start_runs,
    start_worker,
    waits,
)
from bench.stats import percentile
from bench.tally import Bench, Tally

PHASE: Final = "spillover"
TASK_QUEUE: Final = "aiorch-spillover"
# A call told to wait longer than this for the limit spills: about 15 s of the limit's tokens
# (some 20 calls) may queue ahead of an eligible call before it takes the batch lane.
SPILL_OVER_WAIT_S: Final = 15
ENV: Final = {
    "TEMPORAL_TASK_QUEUE": TASK_QUEUE,
    "LLM_BATCH": "allowed",
    "LLM_BATCH_SIZE": "200",
    "LLM_BATCH_DELAY_S": "5",
    "LLM_BATCH_POLL_S": "2",
    "SPILL_OVER": "on",
    "SPILL_OVER_WAIT_S": str(SPILL_OVER_WAIT_S),
}
# The simulator's batches: each create call answers 3 s after its batch exists (the window in
# which the kill lands), and each batch is answered 10 s after its creation (polled meanwhile).
CREATE_DELAY_MS: Final = 3000
COMPLETION_S: Final = 10.0
MAX_DUPLICATES: Final = 0
# How often the fair queue is looked at while B's runs are busy, and which of the model's keys
# (`scope_keys`) holds each queued place's tenant, priority and time of joining.
SAMPLE_S: Final = 5.0
PLACES_KEY: Final = 7


async def _kill_a_submitter(
    bench: Bench, workers: list[ManagedProcess], rep: int, stop: asyncio.Event
) -> dict[str, Any]:
    """SIGKILL the first worker found running ``submit_batch`` and start a new one in its
    place; what was going on at that moment (empty when ``stop`` was set first: every run
    ended without a batch being created while it was looked for)."""
    began = time.monotonic()
    url = bench.stack.simulator_url
    while not stop.is_set():
        if (await asyncio.to_thread(batch_state, url))["submissions"]:
            found = await submitting_worker(bench.client, workers)
            if found is not None:
                n, group = found
                workers[n].kill()
                killed_at = time.monotonic() - began
                state = await asyncio.to_thread(batch_state, url)
                workers[n] = await asyncio.to_thread(
                    start_worker, bench, PHASE, f"{n}-after-kill-{rep}", ENV
                )
                return {
                    "after_s": killed_at,
                    "worker": n,
                    "group": group,
                    "batches_created": state["submissions"],
                    "batches_in_progress": sum(
                        b["status"] == "in_progress" for b in state["batches"]
                    ),
                    "restart_s": time.monotonic() - began - killed_at,
                }
        await asyncio.sleep(0.2)
    return {}


async def _sample_queue(
    bench: Bench, store: CapacityStore, tenants: dict[str, str], until: asyncio.Event
) -> list[dict[str, Any]]:
    """Every `SAMPLE_S` until ``until`` is set: the places in the model's fair queue per tenant,
    and the runs waiting in ``await_capacity`` per tenant (``tenants``: run id to tenant). A
    place with no run waiting behind it is one left by a call that went elsewhere (spilled)."""
    scope = scope_name(bench.stack.local.addresses.openai_base_url, MODEL)
    places_key = scope_keys(scope)[PLACES_KEY]
    began = time.monotonic()
    samples: list[dict[str, Any]] = []
    while not until.is_set():
        queued = await store.redis.hvals(places_key)
        places = Counter(
            (info.decode() if isinstance(info, bytes) else info).split(" ")[0] for info in queued
        )
        waiting: Counter[str] = Counter()
        query = f"TaskQueue = '{TASK_QUEUE}' AND AiState = 'await_capacity'"
        async for found in bench.client.list_workflows(query):
            waiting[tenants.get(found.id, "other")] += 1
        samples.append(
            {
                "at_s": time.monotonic() - began,
                "places": dict(places),
                "runs_waiting": dict(waiting),
            }
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(until.wait(), SAMPLE_S)
    return samples


async def _fresh_batches(bench: Bench) -> None:
    await asyncio.to_thread(simulator_call, bench, "DELETE", "/_sim/batches", None)
    settings = {"completion_s": COMPLETION_S, "create_delay_ms": CREATE_DELAY_MS}
    await asyncio.to_thread(simulator_call, bench, "PUT", "/_sim/batches", settings)


async def _repetition(
    bench: Bench, store: CapacityStore, workers: list[ManagedProcess], rep: int
) -> dict[str, Any]:
    options, client, timeout = bench.options, bench.client, bench.options.timeout_s
    load_before = os.getloadavg()
    await _fresh_batches(bench)
    await fresh_limit(bench, store)
    alone = await start_runs(client, TASK_QUEUE, TENANT_B, options.spillover_b)
    outcomes = [await ended(alone, timeout)]
    await fresh_limit(bench, store)
    began, since = time.monotonic(), datetime.now(UTC)
    eligible = {"batch_eligible": True}
    flood = await start_runs(client, TASK_QUEUE, TENANT_A, options.spillover_a, eligible)
    floods_ended = asyncio.Event()
    kill = asyncio.create_task(_kill_a_submitter(bench, workers, rep, floods_ended))
    spent_at = await burst_spent(bench, flood, began + timeout)
    busy = await start_runs(client, TASK_QUEUE, TENANT_B, options.spillover_b)
    b_done = asyncio.Event()
    tenants = {run: TENANT_A for run in flood.at} | {run: TENANT_B for run in busy.at}
    sampling = asyncio.create_task(_sample_queue(bench, store, tenants, b_done))
    b_ended = await ended(busy, timeout)
    b_done.set()
    outcomes += [b_ended, await ended(flood, timeout)]
    floods_ended.set()
    killed = await kill
    seconds = time.monotonic() - began
    log = await asyncio.to_thread(requests_log, bench.stack.simulator_url)
    audit = await asyncio.to_thread(audit_batches, bench.stack.simulator_url)
    dispatched = await dispatch_delays(busy)
    return {
        "a_sync": len(answers(log, flood)),
        "a_spilled": audit.calls,
        "batch": audit.as_dict(),
        "retried_submissions": await retried_submissions(client, since),
        "kill": killed,
        "runs": {
            "completed": sum(o.completed for o in outcomes),
            "failed": sum(o.failed for o in outcomes),
            "lost": sum(o.lost for o in outcomes),
        },
        "busy_s": seconds,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        **busy_figures(log, alone, flood, busy, spent_at),
        "b_waits_busy_s": waits(log, busy),
        # B's wait before its model call's activity even started: the task queue's backlog.
        "b_p95_dispatch_idle_s": percentile(await dispatch_delays(alone), 0.95),
        "b_p95_dispatch_busy_s": percentile(dispatched, 0.95),
        "b_dispatch_busy_s": dispatched,
        "queue_while_b_busy": await sampling,
    }


async def run_spillover(bench: Bench) -> dict[str, Any]:
    """The whole phase (see the module doc); plain data for the report."""
    settings = Settings(capacity_store_url=bench.stack.local.addresses.capacity_store_url)
    store = CapacityStore.from_settings(settings)
    assert store is not None, "the bench stack runs a capacity store"
    workers = [start_worker(bench, PHASE, str(n), ENV) for n in range(WORKERS)]
    reps: list[dict[str, Any]] = []
    try:
        for rep in range(bench.options.reps):
            reps.append(await _repetition(bench, store, workers, rep))
            bench.log(f"spillover {rep + 1}/{bench.options.reps}: {_line(reps[-1])}")
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.to_thread(simulator_call, bench, "DELETE", "/_sim/ratelimits", None)
        await asyncio.to_thread(simulator_call, bench, "DELETE", "/_sim/batches", None)
        await store.close()
    return {
        "tpm": TPM,
        "workers": WORKERS,
        "weights": WEIGHTS,
        "settings": ENV | {"create_delay_ms": CREATE_DELAY_MS, "completion_s": COMPLETION_S},
        "runs": {TENANT_A: bench.options.spillover_a, TENANT_B: bench.options.spillover_b},
        "reps": reps,
    }


def _line(rep: dict[str, Any]) -> str:
    batch, runs, kill = rep["batch"], rep["runs"], rep["kill"]
    killed = (
        f"worker {kill['worker']} killed at {kill['after_s']:.0f}s "
        f"({kill['batches_created']} batches created)"
        if kill
        else "no worker killed"
    )
    return (
        f"A {rep['a_sync']} sync / {rep['a_spilled']} spilled in {batch['batches']} batches, "
        f"{batch['duplicates']} duplicates, {rep['retried_submissions']} retried; {killed}; "
        f"runs {runs['completed']} completed, {runs['failed']} failed, {runs['lost']} lost; "
        f"{busy_line(rep)}; B p95 to its call's activity {rep['b_p95_dispatch_busy_s']:.1f}s "
        f"busy / {rep['b_p95_dispatch_idle_s']:.1f}s idle"
    )


def check_spillover(bench: Bench, measured: dict[str, Any], tally: Tally) -> None:
    """Record the phase's figures and judge them against issue 43's targets: the fair-share
    phase's, 0 duplicate batch submissions after the kill, and every spilled call answered."""
    tally.report[PHASE] = measured
    reps = measured["reps"]
    tally.failed += sum(rep["runs"]["failed"] for rep in reps)
    tally.lost += sum(rep["runs"]["lost"] for rep in reps)
    figures, row, checks = busy_checks(PHASE, reps, measured["runs"])
    measured["figures"] = figures
    duplicates = sum(rep["batch"]["duplicates"] for rep in reps)
    killed = sum(bool(rep["kill"]) for rep in reps)
    spilled = [rep["a_spilled"] for rep in reps]
    tally.extra.append(row)
    tally.extra.append(
        (
            f"{PHASE}: A's runs sync / spilled",
            " / ".join(f"{rep['a_sync']}/{rep['a_spilled']}" for rep in reps),
            f"batches {'/'.join(str(rep['batch']['batches']) for rep in reps)}",
            f"duplicates {duplicates}, kills {killed}/{len(reps)}",
        )
    )
    tally.checks += [
        *checks,
        Check(
            f"{PHASE}: A's eligible runs past their share went through the batch lane",
            f"{min(spilled)} calls spilled (fewest of {len(reps)})",
            "> 0",
            min(spilled) > 0,
        ),
        Check(
            f"{PHASE}: calls in more than one batch, a worker killed while submitting "
            f"({killed} of {len(reps)} repetitions)",
            f"{duplicates}",
            f"{MAX_DUPLICATES}",
            duplicates <= MAX_DUPLICATES and killed == len(reps),
        ),
    ]
