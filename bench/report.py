"""The bench's report: tables on the terminal and one JSON file, with the acceptance checks.

First the billable Temporal actions per run (exact counts, ``bench.actions``) with the cost
checks of issue 16, then the timing table, where every figure is the median over repetitions
with its min and max; a ratio's min and max are those of the per-repetition ratios (baseline
and ours ran back to back in each repetition), and the targets of issues 7 and 16.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.action_counts import (
    PATHS,
    SYNC_ACTIONS,
    ActionBatch,
    LaneBatch,
    format_count,
    short_type,
    type_order,
)
from bench.costs import LANE_NAMES, ModelCost
from bench.load import BatchFigures
from bench.stats import Figure, ratio

# Targets (issue 16; the SQLite figure from issue 7): ours against the bare baseline on the same
# public runner and tuning.
MIN_THROUGHPUT_RATIO = 0.9
MAX_UNLOADED_RATIO = 1.0
MIN_SQLITE_RATIO = 1.8
MAX_PARKED_RSS_MIB = 1024.0
MIN_APPROVALS_PER_S = 50.0
# Cost per run (issue 16): billable actions per run.
MAX_HAPPY_ACTIONS = 6
MAX_REVIEW_ACTIONS_OVER_BASELINE = 3
# Issue 27: with a 2,000-token shared prefix, the share of input read from the prompt cache.
MIN_CACHED_SHARE = 0.9

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


def profile_table(profiled: dict[str, Any]) -> Table:
    """The profile phase (``bench.profile``): GIL-held ms per run by component, per side."""
    grid = Table(
        title=f"where each worker's Python time goes (py-spy --gil, N={profiled['n']}, ms per run)",
        title_justify="left",
    )
    for column in ("component", "baseline", "ours", "ours - baseline"):
        grid.add_column(column)
    sides = profiled["gil_ms_per_run"]
    for label, excess in profiled["ours_minus_baseline_ms_per_run"].items():
        grid.add_row(
            label,
            _fmt(sides["baseline"].get(label, 0.0)),
            _fmt(sides["ours"].get(label, 0.0)),
            f"{excess:+.2f}",
        )
    totals = {name: sum(figures.values()) for name, figures in sides.items()}
    grid.add_section()
    grid.add_row(
        "total",
        _fmt(totals["baseline"]),
        _fmt(totals["ours"]),
        f"{totals['ours'] - totals['baseline']:+.2f}",
    )
    return grid


def has_rows(grid: Table) -> bool:
    """Whether a table has anything to show."""
    return grid.row_count > 0


def _money(value: float) -> str:
    return f"${value:,.0f}" if value >= 100 else f"${value:,.2f}"


def actions_tables(
    batches: dict[str, dict[str, ActionBatch]], k: int, price_per_million_actions: float
) -> list[Table]:
    """Billable actions per run and cost per million runs per path, then the same by type."""
    price = _money(price_per_million_actions)
    summary = Table(
        title=f"billable Temporal actions per run (the server's `action` counter, {k} runs per "
        f"path); cost at {price} per million actions",
        title_justify="left",
    )
    for column in (
        "path",
        "baseline",
        "ours",
        "ours/baseline",
        "baseline $/1M runs",
        "ours $/1M runs",
    ):
        summary.add_column(column)
    by_type = Table(title="billable actions per run, by action type", title_justify="left")
    for column in ("path", "action type", "baseline", "ours"):
        by_type.add_column(column)
    for spec in PATHS:
        base, ours = batches[spec.name]["baseline"], batches[spec.name]["ours"]
        summary.add_row(
            f"{spec.name}: {spec.description}",
            format_count(base.per_run),
            format_count(ours.per_run),
            f"{ours.per_run / base.per_run:.2f}" if base.per_run else "n/a",
            _money(base.per_run * price_per_million_actions),
            _money(ours.per_run * price_per_million_actions),
        )
        base_types, ours_types = base.per_run_by_type, ours.per_run_by_type
        for number, kind in enumerate(
            sorted(base_types.keys() | ours_types.keys(), key=type_order)
        ):
            by_type.add_row(
                spec.name if number == 0 else "",
                short_type(kind),
                format_count(base_types.get(kind, 0.0)),
                format_count(ours_types.get(kind, 0.0)),
            )
        by_type.add_section()
    return [summary, by_type]


def actions_checks(batches: dict[str, dict[str, ActionBatch]]) -> list[Check]:
    """Issue 16's targets for actions per run, and whether every count was whole per run."""
    happy, review = batches["happy"], batches["review"]
    review_limit = review["baseline"].per_run + MAX_REVIEW_ACTIONS_OVER_BASELINE
    not_whole = [
        f"{path}/{target}"
        for path, sides in batches.items()
        for target, batch in sides.items()
        if not batch.whole
    ]
    return [
        _per_run_check("happy-path", happy, MAX_HAPPY_ACTIONS, f"<= {MAX_HAPPY_ACTIONS}"),
        _per_run_check(
            "review-path",
            review,
            review_limit,
            f"<= baseline + {MAX_REVIEW_ACTIONS_OVER_BASELINE} = {format_count(review_limit)}",
        ),
        Check(
            "action counts whole per run in every batch (no chance heartbeats)",
            "yes" if not not_whole else "no: " + ", ".join(not_whole),
            "all",
            not not_whole,
        ),
    ]


def lanes_table(lanes: dict[str, LaneBatch], price_per_million_actions: float) -> Table:
    """Ours in the other lanes (happy path): actions per run, the batch groups' share apart."""
    grid = Table(
        title="billable Temporal actions per run by lane (ours, review never); a batch group's "
        "actions are shared by its runs",
        title_justify="left",
    )
    for column in ("lane", "per run", "own per run", "groups", "per group", "$/1M runs"):
        grid.add_column(column)
    for name, lane in lanes.items():
        grid.add_row(
            f"{name}: {lane.lane.description}",
            format_count(lane.batch.per_run),
            format_count(lane.per_run_own),
            str(lane.groups),
            format_count(lane.per_group) if lane.groups else "-",
            _money(lane.batch.per_run * price_per_million_actions),
        )
    return grid


def _tokens(model: ModelCost) -> str:
    cached = f" ({model.cached_tokens:,.0f} cached)" if model.cached_tokens else ""
    return f"{model.prompt_tokens:,.0f}{cached} / {model.completion_tokens:,.0f}"


def cost_table(
    per_lane: dict[str, ModelCost],
    actions_per_run: dict[str, float],
    price_per_million_actions: float,
) -> Table:
    """What a run costs in dollars per million runs: its model calls (the simulator's token
    counts at LLM_PRICE_TABLE's rates) and its Temporal actions."""
    grid = Table(
        title="cost per million runs in dollars: the model (the simulator's tokens at "
        f"LLM_PRICE_TABLE's rates) and Temporal actions at {_money(price_per_million_actions)} "
        "per million",
        title_justify="left",
    )
    for column in (
        "lane",
        "model",
        "tokens in / out per run",
        "model $/1M runs",
        "actions/run",
        "actions $/1M runs",
        "total $/1M runs",
    ):
        grid.add_column(column)
    for name, model in per_lane.items():
        actions = actions_per_run[name]
        actions_usd = actions * price_per_million_actions
        model_usd = model.usd_per_run * 1_000_000 if model.usd_per_run is not None else None
        shown = _money(model_usd) if model_usd is not None else "unpriced"
        if model.cached_tokens and model.uncached_usd_per_run is not None:
            shown += f" (uncached {_money(model.uncached_usd_per_run * 1_000_000)})"
        grid.add_row(
            LANE_NAMES.get(name, name),
            model.model,
            _tokens(model),
            shown,
            format_count(actions),
            _money(actions_usd),
            _money(model_usd + actions_usd) if model_usd is not None else "-",
        )
    return grid


def cost_checks_of(
    batches: dict[str, dict[str, ActionBatch]],
    lanes: dict[str, LaneBatch],
    per_lane: dict[str, ModelCost],
    batch_share: float,
) -> list[Check]:
    """Issue 27's checks: the synchronous lane's actions unchanged, the batch lane's model cost
    the batch share of the synchronous lane's, most of a shared prefix read from the cache."""
    counts = {path: batches[path]["ours"].per_run for path in SYNC_ACTIONS}
    shown = " / ".join(format_count(counts[path]) for path in SYNC_ACTIONS)
    wanted = " / ".join(str(n) for n in SYNC_ACTIONS.values())
    checks = [
        Check(
            "synchronous lane: billable actions per run (happy / review / retry)",
            shown,
            wanted,
            all(counts[path] == n for path, n in SYNC_ACTIONS.items()),
        )
    ]
    batch, sync = per_lane["batch"], per_lane["sync"]
    if batch.usd_per_run is not None and sync.usd_per_run:
        ratio = batch.usd_per_run / sync.usd_per_run
        checks.append(
            Check(
                "batch lane: model cost per run / synchronous lane's (same prompts)",
                f"{ratio:.3f}",
                f"the batch share ({batch_share:g}) within 1%",
                abs(ratio - batch_share) <= 0.01 * batch_share,
            )
        )
    own = lanes["batch"].per_run_own
    checks.append(
        Check(
            "batch lane: a run's own actions whole (its group's counted apart)",
            format_count(own),
            "whole",
            own == round(own),
        )
    )
    share = per_lane["cached"].cached_share
    checks.append(
        Check(
            "2,000-token shared prefix: share of input read from the prompt cache",
            f"{share:.3f}",
            f">= {MIN_CACHED_SHARE}",
            share >= MIN_CACHED_SHARE,
        )
    )
    return checks


def _per_run_check(path: str, sides: dict[str, ActionBatch], limit: float, target: str) -> Check:
    """Ours within ``limit`` billable actions per run of ``path``, the baseline's shown too."""
    ours, baseline = sides["ours"].per_run, sides["baseline"].per_run
    return Check(
        f"billable actions per {path} run, ours (baseline {format_count(baseline)})",
        format_count(ours),
        target,
        ours <= limit,
    )


def checks_table(checks: list[Check], title: str = "targets (issues 7 and 16)") -> Table:
    """The acceptance checks, each PASS or MISS."""
    grid = Table(title=title, title_justify="left")
    for column in ("check", "measured", "target", "result"):
        grid.add_column(column)
    for check in checks:
        verdict = "[green]PASS[/]" if check.passed else "[red]MISS[/]"
        grid.add_row(check.name, check.value, check.target, verdict)
    return grid


def print_report(console: Console, tables: Sequence[Table]) -> None:
    """Print the tables that have rows, in order."""
    for grid in tables:
        if has_rows(grid):
            console.print(grid)


def figure_json(figures: dict[str, Figure]) -> dict[str, Any]:
    """A {name: Figure} map as JSON."""
    return {name: figure.as_dict() for name, figure in figures.items()}
