"""``python -m bench.run [--quick] [--phases actions,load] [--n 200,1000]`` (``make bench``).

One run, one dev server that it starts itself (a persistent SQLite file in WAL mode, as the
embedded default runs), the LLM simulator answering at once, and these phases in order:

1. billable Temporal actions per run (the server's ``action`` counter), baseline and ours, for
   the happy, review and retry paths, ``--actions-k`` runs each, and the cost per million runs
   at ``--price-per-million-actions`` (``bench.actions``); first, while nothing else has run;
   then ours in the batch lane and with a cached prompt prefix, and what a run costs in dollars,
   model and actions, per lane (``bench.costs``);
2. unloaded single-run latency, baseline and ours alternating;
3. for each N: N runs started at once, baseline and ours alternating, ``--reps`` times;
3a. one batch of the largest N per side with py-spy on its worker, when installed: where each
   worker's Python time goes, in milliseconds per run by component (``bench.profile``);
4. the same dev server with SQLite's default settings against the WAL default (baseline and
   ours, N = ``--sqlite-n``), alternating;
5. ``--parked`` runs waiting in ``await_review``: the worker's peak RSS, then all approved through
   the ``submit_review`` update by the batch reviewer (``starter.py review-all``);
6. a worker SIGKILL plus a server crash-restart (same SQLite file) during a batch;
7. the run ledger: ``--ledger-n`` mixed runs synced twice, then ``ledger follow`` behind 20 new
   runs/s for ``--ledger-stream-s`` seconds, its lag per run (``bench.ledger_phase``);
7a. fair share: tenant A's ``--fairshare-a`` runs flood a model limited to 9,000 tokens a
   minute on three workers, then tenant B starts ``--fairshare-b``: B's waits against its
   waits with A idle, each tenant's share of the tokens (``bench.fairshare_phase``);
7b. spill-over: the same shape with the batch lane allowed and ``SPILL_OVER=on``, A's
   ``--spillover-a`` runs batch-eligible, B's ``--spillover-b`` not; one worker SIGKILLed while
   it creates a spilled calls' batch: A's runs answered synchronously and spilled, calls in
   more than one batch, B's waits and the shares as in 7a (``bench.spillover_phase``);
7c. canary: document runs at 8/s with a 10 % variant seeded worse until the watcher halts it
   (at most ``--canary-n``): judged runs of B at the halt, runs of B after it
   (``bench.canary_phase``; its runs that fail on the seeded problem are meant to);
8. LangGraph with its SQLite checkpointer, when installed (``pip install -e '.[bench]'``).

``--phases`` runs only the phases named (``--phases actions``: the action count alone, well
under a minute); ``--skip`` leaves phases out. Every run of every phase is checked through its
result; a lost or failed run fails the bench. It prints the actions per run and their checks
first, then a table with every timed figure as median [min-max] and the acceptance checks, and
writes everything, with the machine's description, to ``bench/results/<timestamp>.json``.

Each phase is a row of ``bench.phase_table.PHASES``: what it runs, then what it checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from temporalio.client import Client

from aiorch.devstack.processes import temporal_cli_path
from aiorch_runtime.config import load_settings
from aiorch_runtime.signals import interrupt_on_stop
from aiorch_runtime.temporal import AiOrchestratorPlugin
from bench import phases
from bench.action_counts import IN_FLIGHT
from bench.load import BenchError
from bench.phase_table import PHASE_NAMES, PHASES
from bench.procstat import machine_info
from bench.report import Check, checks_table, print_report, table
from bench.stack import PROJECT_ROOT, BenchStack
from bench.tally import Bench, Options, Tally


def parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny N, one repetition (tests)")
    parser.add_argument("--n", default=None, help="batch sizes, comma-separated (200,1000)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per figure (3)")
    parser.add_argument("--parked", type=int, default=None, help="runs parked in review (10000)")
    parser.add_argument("--sqlite-n", type=int, default=None, help="batch size, SQLite phase")
    parser.add_argument("--fault-n", type=int, default=None, help="batch size, fault phase")
    parser.add_argument("--approve-concurrency", type=int, default=32)
    parser.add_argument(
        "--actions-k", type=int, default=None, help="runs per path, actions phase (50)"
    )
    parser.add_argument(
        "--price-per-million-actions",
        type=float,
        default=50.0,
        help="USD per million Temporal actions, for the cost per run (50)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per batch, seconds")
    parser.add_argument("--ledger-n", type=int, default=None, help="mixed runs, ledger (500)")
    parser.add_argument(
        "--ledger-stream-s", type=float, default=None, help="seconds of 20 runs/s, ledger (60)"
    )
    parser.add_argument("--fairshare-a", type=int, default=None, help="A's runs, fairshare (150)")
    parser.add_argument("--fairshare-b", type=int, default=None, help="B's runs, fairshare (10)")
    parser.add_argument(
        "--spillover-a", type=int, default=None, help="A's eligible runs, spillover (2000)"
    )
    parser.add_argument("--spillover-b", type=int, default=None, help="B's runs, spillover (50)")
    parser.add_argument("--canary-n", type=int, default=None, help="most runs, canary (2500)")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "bench" / "results")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary dir")
    parser.add_argument("--phases", default="", help=f"only these phases: {','.join(PHASE_NAMES)}")
    parser.add_argument("--skip", default="", help="phases to leave out (same names)")
    args = parser.parse_args(argv)
    quick = args.quick
    only = frozenset(p for p in args.phases.split(",") if p) or frozenset(PHASE_NAMES)
    skip = frozenset(p for p in args.skip.split(",") if p)
    if unknown := (only | skip) - set(PHASE_NAMES):
        parser.error(
            f"unknown phase(s) {', '.join(sorted(unknown))}; known: {', '.join(PHASE_NAMES)}"
        )
    if args.actions_k is not None and args.actions_k < 1:
        parser.error("--actions-k must be at least 1")
    skip |= frozenset(PHASE_NAMES) - only
    ns = args.n or ("10" if quick else "200,1000")
    return Options(
        ns=tuple(int(n) for n in ns.split(",")),
        reps=args.reps or (1 if quick else 3),
        parked=args.parked or (20 if quick else 10_000),
        sqlite_n=args.sqlite_n or (10 if quick else 200),
        fault_n=args.fault_n or (10 if quick else 200),
        unloaded_runs=2 if quick else 5,
        peer_n=20 if quick else 1000,
        approve_concurrency=args.approve_concurrency,
        actions_k=args.actions_k or (5 if quick else 50),
        price_per_million_actions=args.price_per_million_actions,
        timeout_s=args.timeout,
        ledger_n=args.ledger_n or (25 if quick else 500),
        ledger_stream_s=args.ledger_stream_s or (3.0 if quick else 60.0),
        fairshare_a=args.fairshare_a or (100 if quick else 150),
        fairshare_b=args.fairshare_b or (4 if quick else 10),
        spillover_a=args.spillover_a or (100 if quick else 2000),
        spillover_b=args.spillover_b or (4 if quick else 50),
        canary_n=args.canary_n or (500 if quick else 2500),
        out_dir=args.out,
        data_dir=args.data_dir,
        skip=skip,
    )


def _options_json(options: Options) -> dict[str, Any]:
    return {
        "ns": list(options.ns),
        "reps": options.reps,
        "parked": options.parked,
        "sqlite_n": options.sqlite_n,
        "fault_n": options.fault_n,
        "unloaded_runs": options.unloaded_runs,
        "peer_n": options.peer_n,
        "approve_concurrency": options.approve_concurrency,
        "actions_k": options.actions_k,
        "price_per_million_actions": options.price_per_million_actions,
        "ledger_n": options.ledger_n,
        "ledger_stream_s": options.ledger_stream_s,
        "fairshare_a": options.fairshare_a,
        "fairshare_b": options.fairshare_b,
        "spillover_a": options.spillover_a,
        "spillover_b": options.spillover_b,
        "canary_n": options.canary_n,
        "skipped": sorted(options.skip),
    }


async def _bench(options: Options, data_dir: Path, console: Console) -> dict[str, Any]:
    def log(line: str) -> None:
        console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {line}")

    report: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(),
        "options": _options_json(options),
        "machine": machine_info(temporal_cli_path()),
    }
    settings = load_settings()
    report["worker_tuning"] = {
        "max_concurrent_activities": settings.worker_max_concurrent_activities,
        "max_concurrent_workflow_tasks": settings.worker_max_concurrent_workflow_tasks,
        "max_cached_workflows": settings.worker_max_cached_workflows,
        "workflow_task_pollers": settings.worker_workflow_task_pollers,
        "activity_task_pollers": settings.worker_activity_task_pollers,
    }
    tally = Tally(report)
    chosen = [phase for phase in PHASES if phase.name not in options.skip]
    with BenchStack(data_dir, batch_size=min(options.actions_k, IN_FLIGHT)) as stack:
        log(f"stack up: dev server {stack.address} (WAL), workers for baseline and ours")
        client = await Client.connect(stack.address, plugins=[AiOrchestratorPlugin(settings)])
        bench = Bench(options, settings, client, stack, data_dir, log)
        # Warm-up (not measured): first imports, connections, the vector collection.
        await phases.unloaded(client, 1, 2, lambda _: None)
        for phase in (p for p in chosen if p.on_stack):
            phase.check(bench, await phase.run(bench), tally)
    for phase in (p for p in chosen if not p.on_stack):
        phase.check(bench, await phase.run(bench), tally)

    lost, failed = tally.lost, tally.failed
    checks = [
        *tally.checks,
        Check("runs lost or failed, all phases", f"{lost + failed}", "0", not lost + failed),
    ]
    report["lost"], report["failed"] = lost, failed
    report["checks"] = [check.__dict__ for check in [*tally.cost_checks, *checks]]
    report["finished"] = datetime.now(UTC).isoformat()
    machine = report["machine"]
    title = (
        f"ai-orchestrator bench ({machine['cores']} cores, load {machine['load_average'][0]:.1f})"
    )
    print_report(
        console,
        [
            *tally.cost_tables,
            checks_table(tally.cost_checks, "cost per run (issues 16 and 27)"),
            table(title, tally.unloaded, tally.loads, tally.extra),
            *tally.profile_tables,
            checks_table(checks),
        ],
    )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench; exit status 1 when a run was lost or failed (acceptance misses are
    reported, not fatal: the figures are the product)."""
    options = parse_args(argv)
    # Wide enough for the table in a log file or CI, where there is no terminal to measure.
    console = Console(width=None if sys.stdout.isatty() else 150)
    data_dir = options.data_dir or Path(tempfile.mkdtemp(prefix="aiorch-bench-"))
    began = time.monotonic()
    try:
        # A SIGTERM unwinds like Ctrl-C, so the stack's servers are stopped, not orphaned.
        with interrupt_on_stop():
            report = asyncio.run(_bench(options, data_dir, console))
    except BenchError as err:
        console.print(f"[red]bench failed:[/] {err}")
        return 1
    finally:
        if options.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    report["seconds"] = time.monotonic() - began
    options.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = options.out_dir / f"{stamp}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {path} ({report['seconds']:.0f} s)")
    return 1 if report["lost"] or report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
