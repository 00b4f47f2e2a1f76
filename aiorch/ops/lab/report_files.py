"""The report's three files in one folder: ``report.md``, ``report.html`` and ``report.json``
(the `LabReport` model's JSON)."""

from __future__ import annotations

from pathlib import Path

from aiorch.ops.lab import report_html, report_markdown
from aiorch.ops.lab.report import LabReport

NAMES = ("report.md", "report.html", "report.json")


def write_reports(report: LabReport, folder: Path) -> list[Path]:
    """Write the report as Markdown, HTML and JSON into ``folder`` (made if missing, files of
    the same names replaced); the paths written.

    Raises:
        OSError: the folder or a file could not be written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    bodies = (
        report_markdown.render(report),
        report_html.render(report),
        report.model_dump_json(indent=2) + "\n",
    )
    written = []
    for name, body in zip(NAMES, bodies, strict=True):
        path = folder / name
        path.write_text(body, encoding="utf-8")
        written.append(path)
    return written
