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
7. LangGraph with its SQLite checkpointer, when installed (``pip install -e '.[bench]'``).

``--phases`` runs only the phases named (``--phases actions``: the action count alone, well
under a minute); ``--skip`` leaves phases out. Every run of every phase is checked through its
result; a lost or failed run fails the bench. It prints the actions per run and their checks
first, then a table with every timed figure as median [min-max] and the acceptance checks, and
writes everything, with the machine's description, to ``bench/results/<timestamp>.json``.
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from aiorch.devstack.processes import temporal_cli_path
from aiorch_runtime.config import load_settings
from aiorch_runtime.temporal import AiOrchestratorPlugin
from bench import actions, costs, phases
from bench.load import BatchFigures, BenchError
from bench.procstat import machine_info
from bench.report import (
    MAX_PARKED_RSS_MIB,
    MAX_UNLOADED_RATIO,
    MIN_APPROVALS_PER_S,
    MIN_SQLITE_RATIO,
    MIN_THROUGHPUT_RATIO,
    Check,
    actions_checks,
    actions_tables,
    checks_table,
    compare_batches,
    cost_checks_of,
    cost_table,
    figure_json,
    lanes_table,
    print_report,
    profile_table,
    show,
    table,
)
from bench.stack import PROJECT_ROOT, BenchStack
from bench.stats import Figure, ratio

PHASES = ("actions", "unloaded", "load", "profile", "sqlite", "parked", "fault", "peer")


@dataclass(frozen=True)
class Options:
    """What to run; ``--quick`` shrinks everything for the end-to-end test."""

    ns: tuple[int, ...]
    reps: int
    parked: int
    sqlite_n: int
    fault_n: int
    unloaded_runs: int
    peer_n: int
    approve_concurrency: int
    actions_k: int
    price_per_million_actions: float
    timeout_s: float
    out_dir: Path
    data_dir: Path | None
    skip: frozenset[str]


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
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "bench" / "results")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary dir")
    parser.add_argument("--phases", default="", help=f"only these phases: {','.join(PHASES)}")
    parser.add_argument("--skip", default="", help="phases to leave out (same names)")
    args = parser.parse_args(argv)
    quick = args.quick
    only = frozenset(p for p in args.phases.split(",") if p) or frozenset(PHASES)
    skip = frozenset(p for p in args.skip.split(",") if p)
    if unknown := (only | skip) - set(PHASES):
        parser.error(f"unknown phase(s) {', '.join(sorted(unknown))}; known: {', '.join(PHASES)}")
    if args.actions_k is not None and args.actions_k < 1:
        parser.error("--actions-k must be at least 1")
    skip |= frozenset(PHASES) - only
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
        out_dir=args.out,
        data_dir=args.data_dir,
        skip=skip,
    )


def _batches_json(batches: dict[str, list[BatchFigures]]) -> dict[str, Any]:
    return {name: phases.figures_dicts(runs) for name, runs in batches.items()}


def _lost_failed(batches: dict[str, list[BatchFigures]]) -> tuple[int, int]:
    runs = [b for group in batches.values() for b in group]
    return sum(b.lost for b in runs), sum(b.failed for b in runs)


async def _bench(options: Options, data_dir: Path, console: Console) -> dict[str, Any]:
    def log(line: str) -> None:
        console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {line}")

    report: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(),
        "options": {
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
            "skipped": sorted(options.skip),
        },
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
    lost = failed = 0
    unloaded: dict[str, Figure] | None = None
    loads: dict[int, dict[str, dict[str, Figure]]] = {}
    extra: list[tuple[str, str, str, str]] = []
    checks: list[Check] = []
    cost_checks: list[Check] = []
    cost_tables: list[Table] = []
    profile_tables: list[Table] = []
    with BenchStack(data_dir, batch_size=min(options.actions_k, actions.IN_FLIGHT)) as stack:
        log(f"stack up: dev server {stack.address} (WAL), workers for baseline and ours")
        client = await Client.connect(stack.address, plugins=[AiOrchestratorPlugin(settings)])
        # Warm-up (not measured): first imports, connections, the vector collection.
        await phases.unloaded(client, 1, 2, lambda _: None)

        if "actions" not in options.skip:
            # First: the counter is namespace-wide, and nothing else has run on the server yet
            # but the warm-up, whose runs have closed.
            signer = stack.local.reviewer_key.signer()
            k = options.actions_k
            counted, ids = await actions.measure(client, stack.metrics_url, k, log, signer)
            lanes = await actions.measure_lanes(
                client, stack.metrics_url, k, log, signer, stack.simulator_url
            )
            price = options.price_per_million_actions
            report["actions"] = actions.report_json(counted, k, price, lanes)
            failed += actions.lost_failed(counted, lanes)
            requests = costs.requests_log(stack.simulator_url)
            prices = settings.llm_price_table
            per_lane = {
                "sync": costs.model_cost(
                    costs.chats_of_runs(requests, ids["happy"]), k, prices, "sync"
                ),
                "batch": costs.model_cost(costs.chats_of_batches(requests), k, prices, "batch"),
                "cached": costs.model_cost(
                    costs.chats_of_runs(requests, lanes["cached"].ids), k, prices, "sync"
                ),
            }
            lane_actions = {
                "sync": counted["happy"]["ours"].per_run,
                "batch": lanes["batch"].batch.per_run,
                "cached": lanes["cached"].batch.per_run,
            }
            report["cost"] = costs.report_json(per_lane, lane_actions, price)
            share = prices[settings.llm_model].batch if settings.llm_model in prices else 0.5
            cost_checks = [
                *actions_checks(counted),
                *cost_checks_of(counted, lanes, per_lane, share),
            ]
            cost_tables = [
                *actions_tables(counted, k, price),
                lanes_table(lanes, price),
                cost_table(per_lane, lane_actions, price),
            ]

        if "unloaded" not in options.skip:
            medians = await phases.unloaded(client, options.reps, options.unloaded_runs, log)
            base = Figure.of([s * 1000 for s in medians["baseline"]])
            ours = Figure.of([s * 1000 for s in medians["ours"]])
            unloaded = {"baseline": base, "ours": ours, "ratio": ratio(ours, base)}
            report["unloaded_ms"] = figure_json(unloaded)
            checks.append(
                Check(
                    "unloaded latency ours/baseline",
                    show(unloaded["ratio"]),
                    f"<= {MAX_UNLOADED_RATIO}",
                    unloaded["ratio"].median <= MAX_UNLOADED_RATIO,
                )
            )

        if "load" not in options.skip:
            report["load"] = {}
            for n in options.ns:
                batches = await phases.load(client, stack, n, options.reps, options.timeout_s, log)
                loads[n] = compare_batches(batches)
                report["load"][str(n)] = {
                    "figures": {k: figure_json(v) for k, v in loads[n].items()},
                    "batches": _batches_json(batches),
                }
                batch_lost, batch_failed = _lost_failed(batches)
                lost, failed = lost + batch_lost, failed + batch_failed
            top = max(options.ns)
            throughput = loads[top]["runs_per_s"]["ratio"]
            checks.append(
                Check(
                    f"throughput ours/baseline at N={top}",
                    show(throughput),
                    f">= {MIN_THROUGHPUT_RATIO}",
                    throughput.median >= MIN_THROUGHPUT_RATIO,
                )
            )

        if "profile" not in options.skip:
            top = max(options.ns)
            profiled = await phases.profile(client, stack, top, options.timeout_s, data_dir, log)
            report["profile"] = profiled
            failed += profiled.get("lost_or_failed", 0)
            if "skipped" in profiled:
                extra.append(("worker profile (py-spy)", "skipped", profiled["skipped"][:60], ""))
            else:
                profile_tables.append(profile_table(profiled))

        if "sqlite" not in options.skip:
            sqlite = await phases.sqlite_settings(
                client, stack, options.sqlite_n, options.reps, options.timeout_s, log
            )
            report["sqlite"] = {"n": options.sqlite_n}
            for name, batches in sqlite.items():
                wal = Figure.of([b.runs_per_s for b in batches["wal"]])
                default = Figure.of([b.runs_per_s for b in batches["default"]])
                sqlite_ratio = ratio(wal, default)
                report["sqlite"][name] = {
                    "runs_per_s": figure_json(
                        {"wal": wal, "default": default, "wal_over_default": sqlite_ratio}
                    ),
                    "batches": _batches_json(batches),
                }
                batch_lost, batch_failed = _lost_failed(batches)
                lost, failed = lost + batch_lost, failed + batch_failed
                extra.append(
                    (
                        f"SQLite default vs WAL ({name}, N={options.sqlite_n}): runs/s",
                        f"default {show(default)}",
                        f"WAL {show(wal)}",
                        f"WAL/default {show(sqlite_ratio)}",
                    )
                )
                # The server's own gain is judged on the baseline, which only the server limits.
                if name == "baseline":
                    checks.append(
                        Check(
                            "embedded default (WAL) / default SQLite runs/s (baseline)",
                            show(sqlite_ratio),
                            f">= {MIN_SQLITE_RATIO}",
                            sqlite_ratio.median >= MIN_SQLITE_RATIO,
                        )
                    )

        if "parked" not in options.skip:
            parked = await phases.parked(
                client,
                stack,
                options.parked,
                options.approve_concurrency,
                options.timeout_s,
                log,
            )
            report["parked"] = parked
            lost, failed = lost + parked["lost"], failed + parked["failed"]
            rss = parked["worker_peak_rss_mib_waiting"]
            extra.append(
                (
                    f"{parked['n']} parked runs",
                    f"peak RSS {rss:.0f} MiB",
                    f"approve {parked['approvals_per_s']:.1f}/s",
                    f"complete {parked['completions_per_s']:.1f}/s",
                )
            )
            checks.append(
                Check(
                    f"{parked['n']} parked: worker peak RSS (MiB)",
                    f"{rss:.0f}",
                    f"< {MAX_PARKED_RSS_MIB:.0f}",
                    rss < MAX_PARKED_RSS_MIB,
                )
            )
            approvals = parked["approvals_per_s"]
            checks.append(
                Check(
                    f"{parked['n']} parked: approvals per second (update)",
                    f"{approvals:.1f}",
                    f">= {MIN_APPROVALS_PER_S:.0f}",
                    approvals >= MIN_APPROVALS_PER_S,
                )
            )
            all_done = parked["approved"] == parked["n"] and not parked["lost"] + parked["failed"]
            checks.append(
                Check(
                    f"{parked['n']} parked: approved and completed",
                    f"{parked['approved']} approved, {parked['lost']} lost, "
                    f"{parked['failed']} failed",
                    "all",
                    all_done,
                )
            )

        if "fault" not in options.skip:
            fault = await phases.fault(client, stack, options.fault_n, options.timeout_s, log)
            report["fault"] = fault
            lost, failed = lost + fault["lost"], failed + fault["failed"]
            extra.append(
                (
                    f"fault: worker SIGKILL + server crash-restart, N={fault['n']}",
                    f"{fault['closed_at_kill']} closed at the kill",
                    f"all closed in {fault['seconds']:.0f}s",
                    f"lost {fault['lost']}, failed {fault['failed']}",
                )
            )
            checks.append(
                Check(
                    "worker SIGKILL + server restart: runs lost or failed",
                    str(fault["lost"] + fault["failed"]),
                    "0",
                    fault["lost"] + fault["failed"] == 0,
                )
            )

    if "peer" not in options.skip:
        peer = phases.peer_langgraph(options.peer_n, data_dir, log)
        report["peer_langgraph"] = peer
        top = max(options.ns)
        if "runs_per_s" in peer and top in loads:
            ours_rps = loads[top]["runs_per_s"]["ours"].median
            peer["ours_over_langgraph_runs_per_s"] = ours_rps / peer["runs_per_s"]
            extra.append(
                (
                    "LangGraph + SqliteSaver (in-process, sequential)",
                    f"{peer['runs_per_s']:.0f} runs/s",
                    f"ours N={top}: {ours_rps:.1f} runs/s",
                    f"ours/LangGraph {peer['ours_over_langgraph_runs_per_s']:.2f}",
                )
            )
        elif "skipped" in peer:
            extra.append(("LangGraph peer", "skipped", peer["skipped"][:60], ""))

    checks.append(
        Check("runs lost or failed, all phases", f"{lost + failed}", "0", not lost + failed)
    )
    report["lost"], report["failed"] = lost, failed
    report["checks"] = [check.__dict__ for check in [*cost_checks, *checks]]
    report["finished"] = datetime.now(UTC).isoformat()
    machine = report["machine"]
    title = (
        f"ai-orchestrator bench ({machine['cores']} cores, load {machine['load_average'][0]:.1f})"
    )
    print_report(
        console,
        [
            *cost_tables,
            checks_table(cost_checks, "cost per run (issues 16 and 27)"),
            table(title, unloaded, loads, extra),
            *profile_tables,
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
