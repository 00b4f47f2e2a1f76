"""What the Markdown and the HTML report show, as plain text in rows and cells, so both say the
same thing: each kind's totals, each run's three outcomes, the deltas, the gates. The renderers
only lay these out and escape them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiorch.ops.lab.gates import shown
from aiorch.ops.lab.outcomes import ForkKind
from aiorch.ops.lab.report import (
    Deltas,
    ForkReport,
    GateOutcome,
    KindTotals,
    LabReport,
    RunReport,
)
from aiorch.ops.lab.report_diffs import FieldChange, OutputDiff
from aiorch.ops.lab.scores import KINDS

HEADER: Final = ("", *KINDS)


@dataclass(frozen=True)
class Row:
    """A label and one cell per kind (original, baseline, candidate)."""

    label: str
    cells: Sequence[str]


def share(rate: float | None, count: int) -> str:
    """A rate as a percentage with its count (``4.0% (2)``), or ``n/a``."""
    return "n/a" if rate is None else f"{rate:.1%} ({count})"


def dollars(value: float | None, *, signed: bool = False) -> str:
    """Dollars to the micro-dollar (``$0.001250``)."""
    if value is None:
        return "n/a"
    return f"{'-' if value < 0 else '+' if signed else ''}${abs(value):.6f}"


def number(value: float | None, *, signed: bool = False, digits: int = 0) -> str:
    """A count or a duration as a table shows it."""
    if value is None:
        return "n/a"
    return f"{value:+,.{digits}f}" if signed else f"{value:,.{digits}f}"


def value(field: Any) -> str:
    """A field's value as JSON (``"ACME"``, ``340.5``, ``null``)."""
    return json.dumps(field, ensure_ascii=False, default=str)


def totals_rows(totals: dict[ForkKind, KindTotals]) -> list[Row]:
    """The totals table: rates with their counts, then sums with their medians."""
    kinds = [totals[kind] for kind in KINDS]
    return [
        Row("runs", [str(t.runs) for t in kinds]),
        Row("with problems", [share(t.problems_rate, t.with_problems) for t in kinds]),
        Row("needs review", [share(t.needs_review_rate, t.needs_review) for t in kinds]),
        Row("failed", [share(t.error_rate, t.failed) for t in kinds]),
        Row("output changed from the original", [share(t.changed_rate, t.changed) for t in kinds]),
        Row("score passed", [share(t.score_rate, t.passed) for t in kinds]),
        Row("tokens (median)", [f"{number(t.tokens)} ({number(t.median_tokens)})" for t in kinds]),
        Row(
            "cost (median)",
            [f"{dollars(t.cost_usd)} ({dollars(t.median_cost_usd)})" for t in kinds],
        ),
        Row(
            "model latency s (median)",
            [
                f"{number(t.latency_s, digits=2)} ({number(t.median_latency_s, digits=2)})"
                for t in kinds
            ],
        ),
    ]


def deltas_line(deltas: Deltas) -> str:
    """Candidate - baseline in one line: sums, and the median run's."""
    return (
        f"candidate - baseline: tokens {number(deltas.tokens_delta, signed=True)} "
        f"(median {number(deltas.median_tokens_delta, signed=True)}), "
        f"cost {dollars(deltas.cost_delta_usd, signed=True)} "
        f"(median {dollars(deltas.median_cost_delta_usd, signed=True)}), "
        f"model latency {number(deltas.latency_delta_s, signed=True, digits=2)} s "
        f"(median {number(deltas.median_latency_delta_s, signed=True, digits=2)} s)"
    )


def run_deltas_line(run: RunReport) -> str:
    """One run's candidate - baseline."""
    return (
        f"candidate - baseline: tokens {number(run.tokens_delta, signed=True)}, "
        f"cost {dollars(run.cost_delta_usd, signed=True)}, "
        f"model latency {number(run.latency_delta_s, signed=True, digits=2)} s"
    )


def _score(fork: ForkReport) -> str:
    if fork.score is None:
        return ""
    verdict = "pass" if fork.score.passed else "fail"
    return verdict if fork.score.error is None else f"{verdict}: {fork.score.error}"


def _end(fork: ForkReport) -> str:
    outcome = fork.outcome
    ended = outcome.state if outcome.error is None else f"{outcome.state}, failed: {outcome.error}"
    return ended if outcome.model is None else f"{ended} ({outcome.model})"


def run_rows(run: RunReport) -> list[Row]:
    """A run's three outcomes side by side."""
    forks = [run.original, run.baseline, run.candidate]
    rows = [
        Row("ended in", [_end(fork) for fork in forks]),
        Row("problems", ["; ".join(fork.outcome.problems) or "none" for fork in forks]),
        Row("needs review", ["yes" if fork.outcome.needs_review else "no" for fork in forks]),
        Row("would have waited", ["; ".join(fork.outcome.waits) for fork in forks]),
        Row("model calls", [str(fork.outcome.use.calls) for fork in forks]),
        Row("tokens", [number(fork.tokens) for fork in forks]),
        Row("cost", [dollars(fork.outcome.use.cost_usd) for fork in forks]),
        Row("model latency s", [number(fork.outcome.use.latency_s, digits=2) for fork in forks]),
        Row("score", [_score(fork) for fork in forks]),
    ]
    return [row for row in rows if any(row.cells)]


def diff_title(diff: OutputDiff) -> str:
    """What a diff compares, and whether anything changed."""
    title = f"candidate against the {diff.against}"
    if diff.note is not None:
        return f"{title}: {diff.note}"
    return f"{title}: the same output" if diff.same else title


def change_cells(change: FieldChange) -> tuple[str, str, str, str]:
    """A field change as path, what changed, before and after."""
    before = "" if change.change == "added" else value(change.before)
    after = "" if change.change == "removed" else value(change.after)
    return change.path, change.change, before, after


def gate_line(gate: GateOutcome) -> str:
    """A ``--fail-if`` rule's outcome and the values it read."""
    read = ", ".join(f"{name} = {shown(found)}" for name, found in gate.values.items())
    return f"{'HELD' if gate.held else 'passed'}: {gate.rule} ({read})"


def heading(report: LabReport) -> list[str]:
    """What the lab run forked onto what, as lines."""
    lines = [
        f"variant {report.candidate.describe()}",
        f"forked from {report.from_state}, {len(report.runs)} run(s) compared"
        + (f", {len(report.skipped)} skipped" if report.skipped else ""),
        f"selected by: {' '.join(report.select.split())}",
    ]
    if report.score_rule is not None:
        lines.append(f"score: {report.score_rule}")
    if report.spend_cap_usd is not None:
        lines.append(f"spend cap: {dollars(report.spend_cap_usd)}")
    return lines
