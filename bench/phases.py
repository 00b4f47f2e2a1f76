"""The bench's phases, each returning plain data for the report.

- ``unloaded``: one run at a time, baseline and ours alternating;
- ``load``: N runs started at once, baseline and ours alternating, for each N;
- ``profile``: one such batch per side with py-spy on its worker (``bench.profile``);
- ``sqlite``: baseline and ours on the WAL server and on a default-SQLite server, alternating;
- ``parked``: runs waiting in ``await_review``, the worker's peak RSS, then a batch approval;
- ``fault``: a worker SIGKILL and a server crash-restart while a batch runs;
- ``peer``: LangGraph with its SQLite checkpointer, when installed (a subprocess).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from temporalio.client import Client

from aiorch.ops.batch import review_all_with_progress, waiting_runs
from aiorch.ops.visibility import CLOSED, state_is
from bench import profile as spy
from bench.load import (
    BASELINE,
    OURS,
    Batch,
    BatchFigures,
    BenchError,
    Target,
    check_results,
    closed_runs,
    count,
    cpu_snapshot,
    run_batch,
    single_run_latency,
    start_batch,
    wait_count,
)
from bench.procstat import busy_fraction, peak_rss_mib, reset_peak_rss, rss_mib
from bench.stack import PROJECT_ROOT, BenchStack
from workflows.llm.graph import State
from workflows.payloads import ReviewDecision

Log = Callable[[str], None]


SETTLE_BUSY = 0.15  # start a batch once the machine is at most this busy ...
SETTLE_MAX_S = 20.0  # ... or after this long: on a shared machine it may never be quiet


async def settle() -> float:
    """Wait (bounded) for a quiet machine before a batch; returns the busy fraction then.

    The previous batch leaves work behind on the server: timers due 10 s after they were
    armed (each workflow task's timeout, our activities' heartbeat timeouts), visibility, task
    acks. It should not be charged to the next batch, so that batch starts once the machine is
    nearly idle again (the idle stack keeps it 1-5% busy); on a shared machine other jobs come
    and go, hence the bound. The baseline's activity timers (60 s) are not waited for: they
    fire later at a low rate, which this cannot tell from idle (docs/performance.md).
    """
    deadline = time.monotonic() + SETTLE_MAX_S
    while True:
        busy = await asyncio.to_thread(busy_fraction, 1.0)
        if busy <= SETTLE_BUSY or time.monotonic() >= deadline:
            return busy


def _pair(rep: int) -> tuple[Target, Target]:
    # Alternate which goes first, so drift over the run favours neither.
    return (BASELINE, OURS) if rep % 2 == 0 else (OURS, BASELINE)


async def unloaded(client: Client, reps: int, runs: int, log: Log) -> dict[str, list[float]]:
    """Median single-run latency per repetition for each target (seconds)."""
    medians: dict[str, list[float]] = {"baseline": [], "ours": []}
    for rep in range(reps):
        for target in _pair(rep):
            seconds = []
            for _ in range(runs):
                elapsed, ok = await single_run_latency(client, target)
                if not ok:
                    raise BenchError(f"an unloaded {target.name} run did not complete")
                seconds.append(elapsed)
            medians[target.name].append(statistics.median(seconds))
        log(
            f"unloaded rep {rep + 1}/{reps}: baseline {medians['baseline'][-1] * 1000:.0f} ms, "
            f"ours {medians['ours'][-1] * 1000:.0f} ms"
        )
    return medians


def _pids(stack: BenchStack, target: Target) -> dict[str, int]:
    worker = stack.ours if target is OURS else stack.baseline
    if worker is None:
        raise BenchError(f"no {target.name} worker is running")
    return {"server": stack.server_pid(), "worker": worker.pid, "simulator": stack.simulator_pid()}


async def load(
    client: Client, stack: BenchStack, n: int, reps: int, timeout_s: float, log: Log
) -> dict[str, list[BatchFigures]]:
    """``reps`` batches of ``n`` runs per target, alternating."""
    batches: dict[str, list[BatchFigures]] = {"baseline": [], "ours": []}
    for rep in range(reps):
        for target in _pair(rep):
            busy = await settle()
            figures = await run_batch(client, target, n, _pids(stack, target), timeout_s=timeout_s)
            figures = replace(figures, machine_busy_before=busy)
            batches[target.name].append(figures)
            log(
                f"N={n} rep {rep + 1}/{reps} {target.name} (machine {busy:.0%} busy before): "
                f"{figures.runs_per_s:.1f} runs/s, "
                f"p50 {figures.p50_s:.2f}s, p95 {figures.p95_s:.2f}s, "
                f"lost {figures.lost}, failed {figures.failed}"
            )
    return batches


async def profile(
    client: Client, stack: BenchStack, n: int, timeout_s: float, data_dir: Path, log: Log
) -> dict[str, Any]:
    """One batch of ``n`` per side with py-spy on that side's worker: GIL-held milliseconds per
    run by component (``bench.profile``), or why it was skipped."""
    executable = spy.py_spy()
    if executable is None:
        return {"skipped": "py-spy is not installed (pip install -e '.[bench]')"}
    by_side: dict[str, Counter[str]] = {}
    failed = 0
    for target in (BASELINE, OURS):
        await settle()
        pids = _pids(stack, target)
        output = data_dir / f"profile-{target.name}.txt"
        try:
            with spy.sampling(executable, pids["worker"], output):
                figures = await run_batch(client, target, n, pids, timeout_s=timeout_s)
        except spy.ProfilerFailed as err:
            log(f"profile skipped: {err}")
            skipped = f"py-spy could not sample the {target.name} worker: {err}"
            return {"skipped": skipped, "lost_or_failed": failed}
        failed += figures.lost + figures.failed
        with output.open() as raw:
            by_side[target.name] = spy.samples_by_component(raw)
        log(
            f"profile N={n} {target.name}: {sum(by_side[target.name].values())} samples, "
            f"{figures.runs_per_s:.1f} runs/s with the profiler attached"
        )
    return {**spy.report_json(n, by_side), "lost_or_failed": failed}


async def sqlite_settings(
    client: Client, stack: BenchStack, n: int, reps: int, timeout_s: float, log: Log
) -> dict[str, dict[str, list[BatchFigures]]]:
    """Baseline and ours at ``n`` on two fresh servers: WAL (embedded default) and default SQLite.

    Each repetition runs the four batches back to back (WAL/default order alternating), so
    each WAL/default pair shares the machine's state, and both servers hold the same number of
    runs at every step. The baseline shows what the server's settings do on their own; ours
    adds our worker's share of the machine.
    """
    sides = stack.start_side_servers()
    batches: dict[str, dict[str, list[BatchFigures]]] = {
        target.name: {"wal": [], "default": []} for target in (BASELINE, OURS)
    }
    try:
        clients = {
            name: await Client.connect(side.address, plugins=client.config()["plugins"])
            for name, side in sides.items()
        }
        for rep in range(reps):
            order = ("wal", "default") if rep % 2 == 0 else ("default", "wal")
            for target in _pair(rep):
                for name in order:
                    side = sides[name]
                    worker = side.ours if target is OURS else side.baseline
                    pids = {"server": side.server.pid, "worker": worker.pid}
                    busy = await settle()
                    figures = await run_batch(clients[name], target, n, pids, timeout_s=timeout_s)
                    batches[target.name][name].append(replace(figures, machine_busy_before=busy))
                    log(
                        f"SQLite rep {rep + 1}/{reps} {target.name} on {name}: "
                        f"{figures.runs_per_s:.1f} runs/s, lost {figures.lost}, "
                        f"failed {figures.failed}"
                    )
    finally:
        stack.stop_side_servers()
    return batches


async def parked(
    client: Client, stack: BenchStack, n: int, concurrency: int, timeout_s: float, log: Log
) -> dict[str, Any]:
    """``n`` runs with review ``always`` parked in await_review, then all approved at once."""
    worker = stack.restart_ours()  # a fresh process: its peak RSS is this phase's alone
    reset_peak_rss(worker.pid)
    batch = Batch.new(n)
    began = time.monotonic()
    cpu_before = cpu_snapshot({"server": stack.server_pid(), "worker": worker.pid})
    await start_batch(client, OURS, batch, "always")
    waiting_query = batch.query(state_is(State.AWAIT_REVIEW))
    waiting = await wait_count(client, waiting_query, n, timeout_s)
    parked_s = time.monotonic() - began
    if waiting < n:
        raise BenchError(f"only {waiting} of {n} runs reached await_review in {timeout_s:g} s")
    await asyncio.sleep(2.0)  # parked and idle: what the worker holds while runs wait
    peak_waiting = peak_rss_mib(worker.pid)
    rss_waiting = rss_mib(worker.pid)
    log(f"parked {n} runs in {parked_s:.1f}s; worker peak RSS {peak_waiting:.0f} MiB")

    ids = await waiting_runs(client, State.AWAIT_REVIEW)
    mine = set(batch.ids)
    ids = [i for i in ids if i in mine]
    decision = ReviewDecision(decision="approve", reviewer="bench")
    approve_began = time.monotonic()
    outcome = await review_all_with_progress(
        client, ids, decision, concurrency=concurrency, signer=stack.local.reviewer_key.signer()
    )
    closed = await wait_count(client, batch.query(CLOSED), n, timeout_s)
    completed_s = time.monotonic() - approve_began
    cpu_after = cpu_snapshot({"server": stack.server_pid(), "worker": worker.pid})
    runs = await closed_runs(client, batch)
    failed = await check_results(client, OURS, list(runs))
    lost = n - len(runs)
    log(
        f"approved {outcome.applied}/{n} at {outcome.per_second:.0f}/s; "
        f"all completed at {closed / completed_s:.0f}/s; lost {lost}, failed {failed}"
    )
    return {
        "n": n,
        "concurrency": concurrency,
        "park_seconds": parked_s,
        "worker_peak_rss_mib_waiting": peak_waiting,
        "worker_rss_mib_waiting": rss_waiting,
        "worker_peak_rss_mib_overall": peak_rss_mib(worker.pid),
        "approved": outcome.applied,
        "refused": len(outcome.refused),
        "errors": len(outcome.errors),
        "approvals_per_s": outcome.per_second,
        "completions_per_s": closed / completed_s,
        "server_cpu_s_per_run": (cpu_after["server"] - cpu_before["server"]) / n,
        "worker_cpu_s_per_run": (cpu_after["worker"] - cpu_before["worker"]) / n,
        "lost": lost,
        "failed": failed + len(outcome.errors),
    }


async def fault(
    client: Client, stack: BenchStack, n: int, timeout_s: float, log: Log
) -> dict[str, Any]:
    """``n`` runs; at a quarter closed, SIGKILL the worker and crash-restart the server."""
    batch = Batch.new(n)
    began = time.monotonic()
    await start_batch(client, OURS, batch, "never")
    await wait_count(client, batch.query(CLOSED), max(1, n // 4), timeout_s)
    closed_at_kill = await count(client, batch.query(CLOSED))
    stack.kill_ours()
    stack.crash_restart_server()
    stack.start_ours_again()
    log(f"fault: worker SIGKILLed and server crash-restarted with {closed_at_kill}/{n} closed")
    closed = await wait_count(client, batch.query(CLOSED), n, timeout_s)
    elapsed = time.monotonic() - began
    runs = await closed_runs(client, batch)
    failed = await check_results(client, OURS, list(runs))
    lost = n - len(runs)
    log(f"fault: {closed}/{n} closed in {elapsed:.0f}s; lost {lost}, failed {failed}")
    return {
        "n": n,
        "closed_at_kill": closed_at_kill,
        "seconds": elapsed,
        "lost": lost,
        "failed": failed,
    }


def peer_langgraph(n: int, data_dir: Path, log: Log) -> dict[str, Any]:
    """LangGraph with its SQLite checkpointer in a subprocess, or why it was skipped."""
    db = data_dir / "langgraph.sqlite"
    done = subprocess.run(
        [sys.executable, "-m", "bench.peer_langgraph", "--n", str(n), "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        return {"skipped": f"peer failed: {done.stderr.strip()[-300:]}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if "skipped" in result:
        log(f"LangGraph peer skipped: {result['skipped']}")
    else:
        log(f"LangGraph peer: {result['runs_per_s']:.0f} runs/s")
    return result


def figures_dicts(batches: list[BatchFigures]) -> list[dict[str, Any]]:
    """The JSON form of a list of batches."""
    return [asdict(b) for b in batches]
