"""The bench's phases as a table: each a `Phase` that runs (``bench.phases`` measures) and then
checks (records its figures in the report and judges them against the targets in
``bench.report``).

``bench.run`` walks `PHASES` in order over one `Bench`, adding up every phase's figures in one
`Tally`; a phase left out by ``--phases`` or ``--skip`` is neither run nor checked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bench import phases
from bench.canary_phase import check_canary, run_canary
from bench.cost_phase import check_actions, run_actions
from bench.fairshare_phase import check_fairshare, run_fairshare
from bench.ledger_phase import check_ledger, run_ledger
from bench.load import BatchFigures
from bench.report import (
    MAX_PARKED_RSS_MIB,
    MAX_UNLOADED_RATIO,
    MIN_APPROVALS_PER_S,
    MIN_SQLITE_RATIO,
    MIN_THROUGHPUT_RATIO,
    Check,
    compare_batches,
    figure_json,
    profile_table,
    show,
)
from bench.spillover_phase import check_spillover, run_spillover
from bench.stats import Figure, ratio
from bench.tally import Bench, Tally

T = TypeVar("T")


@dataclass(frozen=True)
class Phase(Generic[T]):
    """One phase: ``run`` measures, ``check`` records and judges what it measured.

    ``on_stack`` phases run while the bench's stack is up; the others after it is down, so
    that nothing of ours shares the machine with them.
    """

    name: str
    run: Callable[[Bench], Awaitable[T]]
    check: Callable[[Bench, T, Tally], None]
    on_stack: bool = True


def _batches_json(batches: dict[str, list[BatchFigures]]) -> dict[str, Any]:
    return {name: phases.figures_dicts(runs) for name, runs in batches.items()}


async def _run_unloaded(bench: Bench) -> dict[str, list[float]]:
    options = bench.options
    return await phases.unloaded(bench.client, options.reps, options.unloaded_runs, bench.log)


def _check_unloaded(bench: Bench, medians: dict[str, list[float]], tally: Tally) -> None:
    base = Figure.of([s * 1000 for s in medians["baseline"]])
    ours = Figure.of([s * 1000 for s in medians["ours"]])
    tally.unloaded = {"baseline": base, "ours": ours, "ratio": ratio(ours, base)}
    tally.report["unloaded_ms"] = figure_json(tally.unloaded)
    within = tally.unloaded["ratio"].median <= MAX_UNLOADED_RATIO
    tally.checks.append(
        Check(
            "unloaded latency ours/baseline",
            show(tally.unloaded["ratio"]),
            f"<= {MAX_UNLOADED_RATIO}",
            within,
        )
    )


async def _run_load(bench: Bench) -> dict[int, dict[str, list[BatchFigures]]]:
    options = bench.options
    return {
        n: await phases.load(
            bench.client, bench.stack, n, options.reps, options.timeout_s, bench.log
        )
        for n in options.ns
    }


def _check_load(bench: Bench, by_n: dict[int, dict[str, list[BatchFigures]]], tally: Tally) -> None:
    tally.report["load"] = {}
    for n, batches in by_n.items():
        tally.loads[n] = compare_batches(batches)
        tally.report["load"][str(n)] = {
            "figures": {k: figure_json(v) for k, v in tally.loads[n].items()},
            "batches": _batches_json(batches),
        }
        tally.count_batches(batches)
    top = max(bench.options.ns)
    throughput = tally.loads[top]["runs_per_s"]["ratio"]
    tally.checks.append(
        Check(
            f"throughput ours/baseline at N={top}",
            show(throughput),
            f">= {MIN_THROUGHPUT_RATIO}",
            throughput.median >= MIN_THROUGHPUT_RATIO,
        )
    )


async def _run_profile(bench: Bench) -> dict[str, Any]:
    top = max(bench.options.ns)
    timeout_s = bench.options.timeout_s
    return await phases.profile(
        bench.client, bench.stack, top, timeout_s, bench.data_dir, bench.log
    )


def _check_profile(bench: Bench, profiled: dict[str, Any], tally: Tally) -> None:
    tally.report["profile"] = profiled
    tally.failed += profiled.get("lost_or_failed", 0)
    if "skipped" in profiled:
        tally.extra.append(("worker profile (py-spy)", "skipped", profiled["skipped"][:60], ""))
    else:
        tally.profile_tables.append(profile_table(profiled))


async def _run_sqlite(bench: Bench) -> dict[str, dict[str, list[BatchFigures]]]:
    options = bench.options
    return await phases.sqlite_settings(
        bench.client, bench.stack, options.sqlite_n, options.reps, options.timeout_s, bench.log
    )


def _check_sqlite(
    bench: Bench, sqlite: dict[str, dict[str, list[BatchFigures]]], tally: Tally
) -> None:
    n = bench.options.sqlite_n
    tally.report["sqlite"] = {"n": n}
    for name, batches in sqlite.items():
        wal = Figure.of([b.runs_per_s for b in batches["wal"]])
        default = Figure.of([b.runs_per_s for b in batches["default"]])
        sqlite_ratio = ratio(wal, default)
        tally.report["sqlite"][name] = {
            "runs_per_s": figure_json(
                {"wal": wal, "default": default, "wal_over_default": sqlite_ratio}
            ),
            "batches": _batches_json(batches),
        }
        tally.count_batches(batches)
        tally.extra.append(
            (
                f"SQLite default vs WAL ({name}, N={n}): runs/s",
                f"default {show(default)}",
                f"WAL {show(wal)}",
                f"WAL/default {show(sqlite_ratio)}",
            )
        )
        # The server's own gain is judged on the baseline, which only the server limits.
        if name == "baseline":
            tally.checks.append(
                Check(
                    "embedded default (WAL) / default SQLite runs/s (baseline)",
                    show(sqlite_ratio),
                    f">= {MIN_SQLITE_RATIO}",
                    sqlite_ratio.median >= MIN_SQLITE_RATIO,
                )
            )


async def _run_parked(bench: Bench) -> dict[str, Any]:
    options = bench.options
    return await phases.parked(
        bench.client,
        bench.stack,
        options.parked,
        options.approve_concurrency,
        options.timeout_s,
        bench.log,
    )


def _check_parked(bench: Bench, parked: dict[str, Any], tally: Tally) -> None:
    tally.report["parked"] = parked
    tally.lost, tally.failed = tally.lost + parked["lost"], tally.failed + parked["failed"]
    n, rss, approvals = (
        parked["n"],
        parked["worker_peak_rss_mib_waiting"],
        parked["approvals_per_s"],
    )
    tally.extra.append(
        (
            f"{n} parked runs",
            f"peak RSS {rss:.0f} MiB",
            f"approve {approvals:.1f}/s",
            f"complete {parked['completions_per_s']:.1f}/s",
        )
    )
    all_done = parked["approved"] == n and not parked["lost"] + parked["failed"]
    tally.checks += [
        Check(
            f"{n} parked: worker peak RSS (MiB)",
            f"{rss:.0f}",
            f"< {MAX_PARKED_RSS_MIB:.0f}",
            rss < MAX_PARKED_RSS_MIB,
        ),
        Check(
            f"{n} parked: approvals per second (update)",
            f"{approvals:.1f}",
            f">= {MIN_APPROVALS_PER_S:.0f}",
            approvals >= MIN_APPROVALS_PER_S,
        ),
        Check(
            f"{n} parked: approved and completed",
            f"{parked['approved']} approved, {parked['lost']} lost, {parked['failed']} failed",
            "all",
            all_done,
        ),
    ]


async def _run_fault(bench: Bench) -> dict[str, Any]:
    options = bench.options
    return await phases.fault(
        bench.client, bench.stack, options.fault_n, options.timeout_s, bench.log
    )


def _check_fault(bench: Bench, fault: dict[str, Any], tally: Tally) -> None:
    tally.report["fault"] = fault
    tally.lost, tally.failed = tally.lost + fault["lost"], tally.failed + fault["failed"]
    tally.extra.append(
        (
            f"fault: worker SIGKILL + server crash-restart, N={fault['n']}",
            f"{fault['closed_at_kill']} closed at the kill",
            f"all closed in {fault['seconds']:.0f}s",
            f"lost {fault['lost']}, failed {fault['failed']}",
        )
    )
    tally.checks.append(
        Check(
            "worker SIGKILL + server restart: runs lost or failed",
            str(fault["lost"] + fault["failed"]),
            "0",
            fault["lost"] + fault["failed"] == 0,
        )
    )


async def _run_peer(bench: Bench) -> dict[str, Any]:
    return phases.peer_langgraph(bench.options.peer_n, bench.data_dir, bench.log)


def _check_peer(bench: Bench, peer: dict[str, Any], tally: Tally) -> None:
    tally.report["peer_langgraph"] = peer
    top = max(bench.options.ns)
    if "runs_per_s" in peer and top in tally.loads:
        ours_rps = tally.loads[top]["runs_per_s"]["ours"].median
        peer["ours_over_langgraph_runs_per_s"] = ours_rps / peer["runs_per_s"]
        tally.extra.append(
            (
                "LangGraph + SqliteSaver (in-process, sequential)",
                f"{peer['runs_per_s']:.0f} runs/s",
                f"ours N={top}: {ours_rps:.1f} runs/s",
                f"ours/LangGraph {peer['ours_over_langgraph_runs_per_s']:.2f}",
            )
        )
    elif "skipped" in peer:
        tally.extra.append(("LangGraph peer", "skipped", peer["skipped"][:60], ""))


PHASES: tuple[Phase[Any], ...] = (
    Phase("actions", run_actions, check_actions),
    Phase("unloaded", _run_unloaded, _check_unloaded),
    Phase("load", _run_load, _check_load),
    Phase("profile", _run_profile, _check_profile),
    Phase("sqlite", _run_sqlite, _check_sqlite),
    Phase("parked", _run_parked, _check_parked),
    Phase("fault", _run_fault, _check_fault),
    Phase("ledger", run_ledger, check_ledger),
    Phase("fairshare", run_fairshare, check_fairshare),
    Phase("spillover", run_spillover, check_spillover),
    Phase("canary", run_canary, check_canary),
    Phase("peer", _run_peer, _check_peer, on_stack=False),
)
PHASE_NAMES = tuple(phase.name for phase in PHASES)
