"""The bench's report: one table on the terminal and one JSON file, with the acceptance checks.

Every figure is the median over repetitions with its min and max; a ratio's min and max are
those of the per-repetition ratios (baseline and ours ran back to back in each repetition).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.load import BatchFigures
from bench.stats import Figure, ratio

# Acceptance (issue 7).
MIN_THROUGHPUT_RATIO = 0.85
MAX_UNLOADED_RATIO = 1.15
MIN_SQLITE_RATIO = 1.8
MAX_PARKED_RSS_MIB = 600.0

BATCH_FIGURES: tuple[tuple[str, str, Callable[[BatchFigures], float]], ...] = (
    ("runs_per_s", "completed runs/s", lambda b: b.runs_per_s),
    ("p50_s", "p50 start-to-finish (s)", lambda b: b.p50_s),
    ("p95_s", "p95 start-to-finish (s)", lambda b: b.p95_s),
    ("server_cpu_ms_per_run", "server CPU ms/run", lambda b: b.server_cpu_s_per_run * 1000),
    ("worker_cpu_ms_per_run", "worker CPU ms/run", lambda b: b.worker_cpu_s_per_run * 1000),
    ("history_events", "history events/run", lambda b: b.history_events),
)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def show(figure: Figure) -> str:
    """``median [min..max]``."""
    return f"{_fmt(figure.median)} [{_fmt(figure.min)}..{_fmt(figure.max)}]"


@dataclass(frozen=True)
class Check:
    """One acceptance criterion and whether this run met it."""

    name: str
    value: str
    target: str
    passed: bool


def compare_batches(
    batches: dict[str, list[BatchFigures]],
) -> dict[str, dict[str, Figure]]:
    """For each figure: baseline, ours and ours/baseline."""
    out: dict[str, dict[str, Figure]] = {}
    for key, _, get in BATCH_FIGURES:
        base = Figure.of([get(b) for b in batches["baseline"]])
        ours = Figure.of([get(b) for b in batches["ours"]])
        out[key] = {"baseline": base, "ours": ours, "ratio": ratio(ours, base)}
    return out


def table(
    title: str,
    unloaded: dict[str, Figure] | None,
    loads: dict[int, dict[str, dict[str, Figure]]],
    extra_rows: list[tuple[str, str, str, str]],
) -> Table:
    """The main table: figure, baseline, ours, ours/baseline."""
    grid = Table(title=title, title_justify="left")
    for column in ("figure: median \\[min..max]", "baseline", "ours", "ours/baseline"):
        grid.add_column(column)
    if unloaded is not None:
        grid.add_row(
            "unloaded single run (ms)",
            show(unloaded["baseline"]),
            show(unloaded["ours"]),
            show(unloaded["ratio"]),
        )
    labels = {key: label for key, label, _ in BATCH_FIGURES}
    for n, figures in loads.items():
        grid.add_section()
        for key, row in figures.items():
            grid.add_row(
                f"N={n}: {labels[key]}",
                show(row["baseline"]),
                show(row["ours"]),
                show(row["ratio"]),
            )
    if extra_rows:
        grid.add_section()
        for row_values in extra_rows:
            grid.add_row(*row_values)
    return grid


def checks_table(checks: list[Check]) -> Table:
    """The acceptance checks, each PASS or MISS."""
    grid = Table(title="acceptance (issue 7)", title_justify="left")
    for column in ("check", "measured", "target", "result"):
        grid.add_column(column)
    for check in checks:
        verdict = "[green]PASS[/]" if check.passed else "[red]MISS[/]"
        grid.add_row(check.name, check.value, check.target, verdict)
    return grid


def print_report(console: Console, grid: Table, checks: list[Check]) -> None:
    """Print both tables."""
    console.print(grid)
    console.print(checks_table(checks))


def figure_json(figures: dict[str, Figure]) -> dict[str, Any]:
    """A {name: Figure} map as JSON."""
    return {name: figure.as_dict() for name, figure in figures.items()}
