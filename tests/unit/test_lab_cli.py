"""``aiorch lab run`` up to the forks and from their outcomes on (Typer's runner, in this
process): ``--select`` over a real SQLite ledger filled from the recorded histories, read-only
and bounded; the candidate and the rules checked before anything runs; the report's files, the
summary and the exit status from a hand-built lab run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.cli.lab import CheckFailed, conclude, rules_of
from aiorch.cli.output import EXIT_CHECK_FAILED, EXIT_ERROR, EXIT_USAGE, UsageError
from aiorch.ops import ledger
from aiorch.ops.lab.outcomes import LabRun
from aiorch.ops.lab.report import LabReport
from aiorch.ops.lab.selection import SelectionRefused, selected_runs
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support.lab_runs import comparison, lab_run

HISTORIES = sorted((Path(__file__).parents[1] / "replay" / "histories").glob("*.json"))
COUNT = "SELECT count(*) AS runs FROM runs"


@pytest.fixture(scope="module")
async def ledger_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite ledger holding every recorded history's run, as ``ledger sync`` writes it."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.db'}"
    engine = ledger.open_ledger(url)
    try:
        for path in HISTORIES:
            history = WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))
            events = history.events
            ledger.write(engine, await ledger.project(path.stem, path.stem, events, DATA_CONVERTER))
    finally:
        engine.dispose()
    return url


def lab(url: str, select: str, *more: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``aiorch lab run --select SELECT --from analyze --model gpt-4o-mini MORE`` over the
    ledger at ``url``: its exit status and output."""
    monkeypatch.setenv("LEDGER_URL", url)
    args = ["lab", "run", "--select", select, "--from", "analyze", "--model", "gpt-4o-mini"]
    done = CliRunner().invoke(build_app(), [*args, *more])
    return done.exit_code, done.output


def test_select_returns_each_selected_run_once_in_its_order(ledger_url: str) -> None:
    """The run ids are the query's ``run_id`` column, in its order, each once, whatever else
    it returns; they are the ledger's runs."""
    everything = ledger.read_only(ledger_url, "SELECT run_id FROM runs ORDER BY run_id DESC")
    expected = [row[0] for row in everything.rows]
    assert len(expected) == len(HISTORIES)
    doubled = (
        "SELECT pipeline, run_id FROM runs UNION ALL SELECT pipeline, run_id FROM runs "
        "ORDER BY run_id DESC"
    )
    assert selected_runs(ledger_url, doubled, limit=len(HISTORIES)) == expected
    documents = selected_runs(
        ledger_url, "SELECT run_id FROM runs WHERE pipeline = 'documents'", limit=100
    )
    assert 0 < len(documents) < len(expected)


def test_select_over_the_limit_is_refused(ledger_url: str) -> None:
    """A query that selects more runs than the limit is refused, naming how many."""
    with pytest.raises(SelectionRefused, match=f"selected {len(HISTORIES)} runs, more than"):
        selected_runs(ledger_url, "SELECT run_id FROM runs", limit=len(HISTORIES) - 1)


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM runs RETURNING run_id",
        "UPDATE runs SET state = 'x' RETURNING run_id",
        "INSERT INTO runs (run_id) VALUES ('x') RETURNING run_id",
        "DROP TABLE runs",
        "ATTACH DATABASE 'other.db' AS other",
        "PRAGMA query_only = 0",
    ],
)
def test_a_select_that_would_write_is_refused_and_changes_nothing(
    ledger_url: str, statement: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--select`` runs read-only: a statement that would change the ledger is a usage error
    in one line, and the ledger keeps every run."""
    before = ledger.read_only(ledger_url, COUNT).rows
    code, output = lab(ledger_url, statement, monkeypatch=monkeypatch)
    assert code == EXIT_USAGE, output
    assert output.startswith("error: --select: refused: the ledger is read-only here")
    assert len(output.strip().splitlines()) == 1
    assert ledger.read_only(ledger_url, COUNT).rows == before == [(len(HISTORIES),)]


def test_a_select_without_run_id_says_what_it_returned(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query with no ``run_id`` column is a usage error that names the columns it had."""
    code, output = lab(ledger_url, "SELECT workflow_id, state FROM runs", monkeypatch=monkeypatch)
    assert code == EXIT_USAGE
    assert output.strip() == (
        "error: --select: the query must return a run_id column (it returned workflow_id, state)"
    )


@pytest.mark.parametrize(
    ("select", "more", "code", "message"),
    [
        ("SELECT run_id FROM runs", ["--limit", "2"], EXIT_USAGE, "more than --limit 2"),
        ("SELECT run_id FROM runs WHERE 0", [], EXIT_ERROR, "the query selected no run"),
        ("SELECT run_id FROM nowhere", [], EXIT_ERROR, "--select: no such table: nowhere"),
    ],
)
def test_a_select_that_picks_nothing_to_fork_fails_before_any_fork(
    ledger_url: str,
    select: str,
    more: list[str],
    code: int,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Too many runs, none, or a query that does not run: one line, and no fork is started."""
    found, output = lab(ledger_url, select, *more, monkeypatch=monkeypatch)
    assert found == code
    assert output.startswith("error: ") and message in output, output


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (["--fail-if", "problem_rate > 0.1"], "--fail-if: unknown metric 'problem_rate'"),
        (["--fail-if", "__import__('os')"], "--fail-if: __import__(): nothing can be called"),
        (["--fail-if", "score_rate < 0.9"], "--fail-if: 'score_rate < 0.9' reads score_rate"),
        (["--score", "field.total == 1"], "--score: unknown name 'field'"),
        (["--temperature", "3"], "--temperature: Input should be less than or equal to 2"),
        (["--name", "no spaces"], "--name: String should match pattern"),
        (["--prompt-file", "/nonexistent/prompt.txt"], "--prompt-file: cannot read"),
    ],
)
def test_bad_rules_and_candidates_are_usage_errors_before_the_ledger_is_read(
    tmp_path: Path, more: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule or a candidate option that is wrong is exit 2 in one line, before the ledger is
    read (here there is none, which would be exit 1)."""
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    code, output = lab(missing, "SELECT run_id FROM runs", *more, monkeypatch=monkeypatch)
    assert code == EXIT_USAGE, output
    assert output.startswith(f"error: {message}"), output


def test_a_candidate_that_changes_nothing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a model, a prompt or a temperature the candidate would be
    the baseline: a usage error."""
    monkeypatch.setenv("LEDGER_URL", f"sqlite:///{tmp_path / 'none.db'}")
    args = ["lab", "run", "--select", "SELECT run_id FROM runs", "--from", "analyze"]
    done = CliRunner().invoke(build_app(), args)
    assert done.exit_code == EXIT_USAGE
    assert done.output.startswith("error: the candidate changes nothing")


def _lab_run_with_problems() -> LabRun:
    return lab_run(
        [
            comparison("r1", candidate={"problems": ["total: off"]}),
            comparison("r2"),
        ]
    )


def test_a_held_rule_writes_the_report_then_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a rule that holds, the three files are written, the summary (with the rule's
    outcome) goes to stdout, and the command fails with exit status 4 naming the rule."""
    gates, rule = rules_of(["problems_rate > baseline + 0.02", "cost_delta_usd > 1"], None)
    with pytest.raises(CheckFailed) as failed:
        conclude(_lab_run_with_problems(), rule=rule, gates=gates, out_dir=tmp_path, as_json=False)
    assert failed.value.exit_code == EXIT_CHECK_FAILED == 4
    assert str(failed.value) == "--fail-if held: problems_rate > baseline + 0.02"
    stdout = capsys.readouterr().out
    assert "HELD: problems_rate > baseline + 0.02 (problems_rate = 0.5" in stdout
    assert "passed: cost_delta_usd > 1 (cost_delta_usd = 0" in stdout
    report = LabReport.model_validate_json((tmp_path / "report.json").read_text())
    assert [gate.held for gate in report.gates] == [True, False]
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.html").is_file()


def test_rules_that_do_not_hold_pass_and_json_goes_to_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No rule holds: no error; ``--json`` prints the report's JSON, scored by the rule."""
    gates, rule = rules_of(["score_rate < baseline - 0.5"], "problems == 0")
    conclude(_lab_run_with_problems(), rule=rule, gates=gates, out_dir=None, as_json=True)
    report = LabReport.model_validate_json(capsys.readouterr().out)
    assert report.totals["candidate"].score_rate == 0.5
    assert report.totals["baseline"].score_rate == 1.0
    assert [(gate.rule, gate.held) for gate in report.gates] == [
        ("score_rate < baseline - 0.5", False)
    ]


def test_a_rule_reading_score_rate_needs_a_score() -> None:
    """Checked before anything runs: ``score_rate`` with no ``--score`` is a usage error."""
    with pytest.raises(UsageError, match="give --score too"):
        rules_of(["score_rate < 0.9"], None)
