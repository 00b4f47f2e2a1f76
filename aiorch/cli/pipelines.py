"""Pipeline files: ``pipeline check``, ``pipeline list``, ``pipeline show``, ``pipeline graph``.

None of them needs Temporal: they read files (``check``, or a path given to ``show`` and
``graph``) or the folder ``PIPELINES_DIR`` names, with the engine's step types.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from aiorch.cli.output import CliError, command_group, one_line_errors, out, plain, print_table
from aiorch.ops import pipelines
from aiorch_runtime.pipeline_files import CheckedFile, pipeline_paths, read_file, scan
from aiorch_runtime.pipeline_places import FileProblem
from workflows.data import compile_spec
from workflows.data.spec import PipelineRecord
from workflows.orchestrator import DATA_PIPELINES

app = command_group("Pipeline files: check them, list the worker's, show one, draw its graph.")


class GraphFormat(StrEnum):
    DOT = "dot"
    MERMAID = "mermaid"


def _checked(paths: list[Path]) -> list[CheckedFile]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += pipeline_paths(path)
        else:
            files.append(path)
    return [read_file(path, DATA_PIPELINES.catalog, pipelines.code_names()) for path in files]


@app.command()
def check(
    files: Annotated[list[Path], typer.Argument(help="pipeline files, or folders of them")],
) -> None:
    """Check pipeline files: every problem as FILE:LINE:COLUMN: RULE: what is wrong. Exit 1
    when there is one."""
    checked = _checked(files)
    found = scan(checked)
    for problem in found.problems:
        _print_problem(problem)
    for item in checked:
        if item.record is not None and item.path in found.files.values():
            record = item.record
            steps = len(record.spec.steps)
            out.print(plain(f"{item.path}: ok ({record.name} {record.label}, {steps} steps)"))
    if found.problems:
        raise typer.Exit(1)


def _print_problem(problem: FileProblem) -> None:
    out.print(plain(str(problem)))


def _record(name_or_file: str) -> PipelineRecord:
    """The record of a pipeline file given by path, or of pipeline ``name`` in PIPELINES_DIR.

    Raises:
        CliError: neither, or the file has problems.
    """
    path = Path(name_or_file)
    if path.is_file():
        [checked] = _checked([path])
        if checked.record is None:
            first = checked.problems[0]
            raise CliError(
                f"{first} (and {len(checked.problems) - 1} more: `aiorch pipeline check`)"
            )
        return checked.record
    record = pipelines.record_of(name_or_file)
    if record is None:
        raise CliError(
            f"no pipeline file {name_or_file!r} (a path, or a pipeline in PIPELINES_DIR: "
            f"{', '.join(p.name for p in pipelines.data_pipelines()) or 'none'})"
        )
    return record


@app.command("list")
@one_line_errors
def list_pipelines(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON, for scripts")] = False,
) -> None:
    """List the pipelines the worker runs: those written in Python and PIPELINES_DIR's files
    (each with its version as its file is now)."""
    rows = []
    for pipeline in pipelines.every():
        record = pipelines.record_of(pipeline.name) if pipelines.is_data(pipeline) else None
        folder = pipelines.folder()
        rows.append(
            {
                "name": pipeline.name,
                "workflow_type": pipeline.workflow_type,
                "version": record.label if record else None,
                "defined_in": (
                    str(folder.scan().files.get(pipeline.name, folder.path))
                    if record and folder
                    else "python"
                ),
                "description": record.spec.description if record else "",
            }
        )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    keys = ("name", "workflow_type", "version", "defined_in", "description")
    print_table(
        ("name", "workflow type", "version", "defined in", "description"),
        [[plain(row[key] or "") for key in keys] for row in rows],
        wrap=("description",),
    )


@app.command()
@one_line_errors
def show(
    pipeline: Annotated[str, typer.Argument(help="a pipeline in PIPELINES_DIR, or a file")],
) -> None:
    """Print a pipeline file as it is now: its name, version, hash and text."""
    record = _record(pipeline)
    out.print(plain(f"# {record.name} version {record.version} (sha256 {record.sha256})"))
    out.print(plain(record.text.rstrip("\n")))


@app.command()
@one_line_errors
def graph(
    pipeline: Annotated[str, typer.Argument(help="a pipeline in PIPELINES_DIR, or a file")],
    fmt: Annotated[GraphFormat, typer.Option("--format", help="output format")] = GraphFormat.DOT,
) -> None:
    """Print a pipeline file's state graph as Graphviz DOT or Mermaid."""
    record = _record(pipeline)
    drawn = compile_spec(record.spec, DATA_PIPELINES.catalog).graph
    typer.echo(drawn.to_dot() if fmt is GraphFormat.DOT else drawn.to_mermaid(), nl=False)


def register(root: typer.Typer) -> None:
    """Add the ``pipeline`` group to ``root``."""
    root.add_typer(app, name="pipeline")
