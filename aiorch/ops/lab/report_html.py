"""The report as one self-contained HTML page (its styles inline, nothing loaded).

A reply is untrusted text: the template is autoescaped (Jinja2), so a reply's ``<script>`` is
shown as text, and the page's Content-Security-Policy lets it run no script and load nothing
should anything ever slip through.
"""

from __future__ import annotations

from typing import Final, Literal

from jinja2 import Environment, StrictUndefined

from aiorch.ops.lab.report import LabReport
from aiorch.ops.lab.report_rows import (
    HEADER,
    change_cells,
    deltas_line,
    diff_title,
    gate_line,
    heading,
    run_deltas_line,
    run_rows,
    totals_rows,
)

DiffLine = Literal["add", "del", "hunk", "same"]

_TEMPLATE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Replay lab {{ report.lab_id }}</title>
<style>
body { font: 15px/1.45 system-ui, sans-serif; color: #1b1f24;
       margin: 2rem auto; max-width: 72rem; padding: 0 1rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid #d0d7de; padding: .25rem .5rem;
         text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
pre { background: #f6f8fa; padding: .5rem; overflow-x: auto; white-space: pre-wrap; }
.add { background: #e6ffec; } .del { background: #ffebe9; } .hunk { color: #6e7781; }
.held { color: #cf222e; font-weight: bold; } .passed { color: #1a7f37; }
</style>
</head>
<body>
<h1>Replay lab {{ report.lab_id }}</h1>
<ul>{% for line in heading %}<li>{{ line }}</li>{% endfor %}</ul>
<h2>Totals</h2>
{{ grid(header, totals) }}
<p>{{ deltas }}</p>
{% if report.gates %}
<h2>Fail if</h2>
<ul>{% for gate in report.gates %}
<li class="{{ 'held' if gate.held else 'passed' }}">{{ gate_line(gate) }}</li>{% endfor %}</ul>
{% endif %}
{% if report.skipped %}
<h2>Skipped</h2>
<ul>{% for run_id, why in report.skipped.items() %}
<li>{{ run_id }}: {{ why }}</li>{% endfor %}</ul>
{% endif %}
<h2>Runs</h2>
{% for run in report.runs %}
<section>
<h3>{{ run.workflow_id }} ({{ run.pipeline }})</h3>
{{ grid(header, rows(run)) }}
<p>{{ run_deltas_line(run) }}</p>
{% for diff in (run.vs_original, run.vs_baseline) %}
<h4>{{ diff_title(diff) }}</h4>
{% if diff.fields %}{{ grid(("field", "change", "before", "after"), changes(diff)) }}{% endif %}
{% if diff.text is not none %}<pre>
{% for kind, line in diff_lines(diff.text) %}<span class="{{ kind }}">{{ line }}</span>
{% endfor %}</pre>{% endif %}
{% endfor %}
</section>
{% endfor %}
</body>
</html>
"""

_GRID: Final = """{% macro grid(header, rows) %}<table>
<tr>{% for cell in header %}<th>{{ cell }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table>{% endmacro %}"""


def _diff_line(line: str) -> DiffLine:
    if line.startswith(("+++", "---", "@@")):
        return "hunk"
    if line.startswith("+"):
        return "add"
    return "del" if line.startswith("-") else "same"


def _diff_lines(diff: str) -> list[tuple[DiffLine, str]]:
    return [(_diff_line(line), line) for line in diff.splitlines()]


def _environment() -> Environment:
    # Every value is escaped, whatever the template's name; an unknown name is an error.
    environment = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True)
    environment.globals.update(
        heading=heading,
        gate_line=gate_line,
        diff_title=diff_title,
        run_deltas_line=run_deltas_line,
        diff_lines=_diff_lines,
        rows=lambda run: [[row.label, *row.cells] for row in run_rows(run)],
        changes=lambda diff: [change_cells(change) for change in diff.fields],
    )
    return environment


_PAGE: Final = _environment().from_string(_GRID + _TEMPLATE)


def render(report: LabReport) -> str:
    """The whole report as one HTML page."""
    totals = [[row.label, *row.cells] for row in totals_rows(report.totals)]
    return _PAGE.render(
        report=report,
        heading=heading(report),
        header=HEADER,
        totals=totals,
        deltas=deltas_line(report.deltas),
    )
