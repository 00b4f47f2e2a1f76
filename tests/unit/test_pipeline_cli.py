"""`aiorch pipeline check|list|show|graph` in process: what an operator reads, and the exit
status a script relies on. None of them needs Temporal."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.cli.output import out
from aiorch.ops import pipelines, visibility
from tests.support.pipeline_files import TRIAGE_V1, write_pipeline

BROKEN = Path(__file__).resolve().parent / "pipeline_files"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """PIPELINES_DIR with the triage file; the operator's tools read it afresh."""
    write_pipeline(tmp_path, TRIAGE_V1)
    monkeypatch.setenv("PIPELINES_DIR", str(tmp_path))
    pipelines.reload()
    yield tmp_path
    pipelines.reload()


def run(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(build_app("pipeline"), ["pipeline", *args])
    return done.exit_code, done.output


def test_check_says_ok_for_a_good_file_and_exits_0(folder: Path) -> None:
    """A good file: its name, version and steps, exit 0."""
    code, output = run("check", str(folder / "support_triage.yaml"))
    assert code == 0
    assert "ok (SupportTriage 1@" in output and "6 steps" in output


def test_check_prints_every_problem_of_a_folder_and_exits_1(folder: Path) -> None:
    """A folder with broken files: one FILE:LINE:COLUMN: RULE line per problem, exit 1; the
    good file is still said to be ok."""
    for name in ("01_unknown_step_type.yaml", "10_template_input_field.yaml"):
        shutil.copy(BROKEN / name, folder / name)
    code, output = run("check", str(folder))
    assert code == 1
    assert f"{folder / '01_unknown_step_type.yaml'}:31:5: unknown-step-type:" in output
    assert f"{folder / '10_template_input_field.yaml'}:13:13: unknown-template-field:" in output
    assert "support_triage.yaml: ok" in output


def test_list_names_every_pipeline_with_its_version(folder: Path) -> None:
    """The pipelines written in Python and the folder's, each file's with its version."""
    code, output = run("list", "--json")
    assert code == 0, output
    rows = {row["name"]: row for row in json.loads(output)}
    assert set(rows) == {*(pipeline.name for pipeline in pipelines.registered()), "SupportTriage"}
    assert rows["SupportTriage"]["version"].startswith("1@")
    assert rows["SupportTriage"]["defined_in"] == str(folder / "support_triage.yaml")
    assert rows["llm"]["version"] is None


@pytest.mark.parametrize("width", [60, 120, 240])
def test_list_cuts_no_path_and_no_description(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """`pipeline list` at any terminal width prints each file's path whole and every word of
    its description (a table that wraps the description, or aligned lines), never cut."""
    deep = tmp_path / "operators" / "pipelines-for-the-support-team" / "current"
    deep.mkdir(parents=True)
    path = write_pipeline(deep, TRIAGE_V1)
    monkeypatch.setenv("PIPELINES_DIR", str(deep))
    monkeypatch.setattr(out, "width", width)
    pipelines.reload()
    try:
        code, output = run("list")
    finally:
        pipelines.reload()
    assert code == 0, output
    assert str(path) in output
    words = output.split()
    for word in ("Classify", "reviewed,", "store", "result."):
        assert word in words, word


def test_waiting_runs_are_those_in_any_review_state_of_any_pipeline(folder: Path) -> None:
    """`list --waiting` (and the inbox) asks visibility for open runs in every review state:
    the pipelines written in Python's and a pipeline file's (SupportTriage's urgent_review),
    which `--state await_review` alone would miss; with --state too it is one line, exit 1."""
    query = visibility.waiting_for_review()
    assert "ExecutionStatus = 'Running'" in query
    for review_state in ("await_review", "escalate", "urgent_review"):
        assert f"'{review_state}'" in query
    assert "'completed'" not in query
    done = CliRunner().invoke(build_app("list"), ["list", "--waiting", "--state", "idle"])
    assert done.exit_code == 1
    assert done.output == "error: --waiting lists every review state; leave out --state\n"


def test_show_prints_the_file_with_its_hash_and_graph_draws_it(folder: Path) -> None:
    """`show NAME` prints the file as it is now under its version and hash; `graph NAME`
    draws it; a name no file has is one line."""
    code, output = run("show", "SupportTriage")
    assert code == 0
    assert output.startswith("# SupportTriage version 1 (sha256 ")
    assert "  - id: reply_review" in output
    code, output = run("graph", "SupportTriage", "--format", "mermaid")
    assert code == 0 and "route --> urgent_review: urgent" in output
    code, output = run("show", "Nobody")
    assert code == 1 and "no pipeline file 'Nobody'" in output
