"""The report as Markdown, for a pull request or a CI summary.

A reply and a document's fields are untrusted text: in a table cell every character Markdown
or HTML would act on is escaped, and a diff sits in a code fence longer than any run of
backticks inside it, so no reply can close the fence, add a link or slip in HTML.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from aiorch.ops.lab.report import LabReport, RunReport
from aiorch.ops.lab.report_diffs import OutputDiff
from aiorch.ops.lab.report_rows import (
    HEADER,
    Row,
    change_cells,
    deltas_line,
    diff_title,
    gate_line,
    heading,
    run_deltas_line,
    run_rows,
    totals_rows,
)

# What Markdown or inline HTML act on in running text; each is written with a backslash.
_ACTIVE: Final = re.compile(r"([\\`*_\[\]|<>#~&!])")
_CONTROLS: Final = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def text(value: str) -> str:
    """``value`` as inert Markdown text on one line."""
    return _ACTIVE.sub(r"\\\1", _CONTROLS.sub("", " ".join(value.splitlines())))


def code_fence(body: str, language: str = "") -> str:
    """``body`` in a fence that nothing in it can close."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{_CONTROLS.sub('', body)}\n{fence}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table, every cell escaped."""
    lines = [
        "| " + " | ".join(text(cell) for cell in header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    lines += ["| " + " | ".join(text(cell) for cell in row) + " |" for row in rows]
    return lines


def _rows(rows: Sequence[Row]) -> list[list[str]]:
    return [[row.label, *row.cells] for row in rows]


def _diff(diff: OutputDiff) -> list[str]:
    lines = ["", f"#### {text(diff_title(diff))}"]
    if diff.fields:
        changes = [change_cells(change) for change in diff.fields]
        lines += ["", *table(("field", "change", "before", "after"), changes)]
    if diff.text is not None:
        lines += ["", code_fence(diff.text, "diff")]
    return lines


def _run(run: RunReport) -> list[str]:
    lines = ["", f"### {text(run.workflow_id)} ({text(run.pipeline)})", ""]
    lines += table(HEADER, _rows(run_rows(run)))
    lines += ["", text(run_deltas_line(run))]
    lines += _diff(run.vs_original) + _diff(run.vs_baseline)
    return lines


def render(report: LabReport) -> str:
    """The whole report as one Markdown document."""
    lines = [f"# Replay lab {text(report.lab_id)}", ""]
    lines += [f"- {text(line)}" for line in heading(report)]
    lines += ["", "## Totals", "", *table(HEADER, _rows(totals_rows(report.totals)))]
    lines += ["", text(deltas_line(report.deltas))]
    if report.gates:
        lines += ["", "## Fail if", ""]
        lines += [f"- {text(gate_line(gate))}" for gate in report.gates]
    if report.skipped:
        lines += ["", "## Skipped", ""]
        lines += [f"- {text(run_id)}: {text(why)}" for run_id, why in report.skipped.items()]
    lines += ["", "## Runs"]
    for run in report.runs:
        lines += _run(run)
    return "\n".join(lines) + "\n"
