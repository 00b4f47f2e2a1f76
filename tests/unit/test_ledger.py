"""The ledger's projection, store, read-only SQL and reports over the recorded histories
(tests/replay/histories), each counted again here straight from the history's JSON."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from temporalio.client import WorkflowHistory

from aiorch.ops import ledger
from aiorch.ops.ledger import _changes as changes
from aiorch.ops.ledger import _schema as schema
from aiorch_runtime.temporal import DATA_CONVERTER

HISTORIES = sorted((Path(__file__).parents[1] / "replay" / "histories").glob("*.json"))
MODEL_ACTIVITIES = {"invoke_llm", "await_batch"}
DECISIONS = {"approve", "reedit", "reject", "correct"}
NOTES = {"continued_as_new", "review_vote"}


def raw_events(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(path.read_text())["events"]
    return events


def recorded_entries(path: Path) -> list[dict[str, Any]]:
    """The history entries the run recorded since it started, read from its close event's
    plain JSON payload (the result, a RunFailed failure's details, or the carried state)."""
    events = raw_events(path)
    started = datetime.fromisoformat(events[0]["eventTime"].replace("Z", "+00:00"))
    last = events[-1]
    if "workflowExecutionCompletedEventAttributes" in last:
        payload = last["workflowExecutionCompletedEventAttributes"]["result"]["payloads"][0]
    elif "workflowExecutionFailedEventAttributes" in last:
        info = last["workflowExecutionFailedEventAttributes"]["failure"]["applicationFailureInfo"]
        payload = info["details"]["payloads"][0]
    else:
        return []
    result = json.loads(base64.b64decode(payload["data"]))
    return [
        entry
        for entry in result.get("history", [])
        if datetime.fromisoformat(entry["at"].replace("Z", "+00:00")) >= started
    ]


async def projected(path: Path) -> ledger.Projection:
    history = WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))
    return await ledger.project(path.stem, path.stem, history.events, DATA_CONVERTER)


@pytest.fixture
def open_ledger() -> Iterator[Callable[[str], Engine]]:
    """`ledger.open_ledger`, each engine it opened disposed after the test: a SQLite
    connection left to the garbage collector warns (3.13) in whichever test collects it."""
    opened: list[Engine] = []

    def opening(url: str) -> Engine:
        engine = ledger.open_ledger(url)
        opened.append(engine)
        return engine

    yield opening
    for engine in opened:
        engine.dispose()


@pytest.mark.parametrize("path", HISTORIES, ids=lambda path: path.stem)
async def test_projection_holds_each_model_call_transition_and_decision_once(path: Path) -> None:
    """A run's rows are its history's: one model call per scheduled model activity, one
    transition per history entry the run recorded (notes aside) and one decision row per
    review decision or counted vote."""
    found = await projected(path)
    scheduled = [
        event
        for event in raw_events(path)
        if event["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
        and event["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        in MODEL_ACTIVITIES
    ]
    entries = recorded_entries(path)
    assert [call["event_id"] for call in found.model_calls] == [
        int(event["eventId"]) for event in scheduled
    ]
    assert len(found.transitions) == sum(entry["event"] not in NOTES for entry in entries)
    assert len(found.review_decisions) == sum(
        entry["event"] in DECISIONS or entry["event"] == "review_vote" for entry in entries
    )
    assert found.run["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in found.model_calls))


async def test_a_dead_lettered_run_shows_its_failed_attempts_and_end() -> None:
    """The dead-lettered run ends in ``dead_letter`` (read from its RunFailed failure), with
    each failed model call an attempt that cost nothing, its error kept."""
    found = await projected(next(p for p in HISTORIES if p.stem == "dead_letter"))
    assert (found.run["status"], found.run["state"]) == ("failed", "dead_letter")
    assert found.run["attempts"] == len(found.model_calls) == 3
    assert {call["outcome"] for call in found.model_calls} == {"failed"}
    assert all(call["error"] and call["cost_usd"] == 0 for call in found.model_calls)


async def test_storing_every_history_twice_changes_nothing(
    tmp_path: Path, open_ledger: Callable[[str], Engine]
) -> None:
    """Writing the same projections again leaves every table's rows and their digest as
    they were: rows are keyed by what the history holds, not by when they were written."""
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    projections = [await projected(path) for path in HISTORIES]
    for projection in projections:
        ledger.write(engine, projection)
    first = ledger.contents(engine)
    for projection in reversed(projections):
        ledger.write(engine, projection)
    assert ledger.contents(engine) == first
    assert first[0]["runs"] == len(HISTORIES)


async def test_a_sync_looks_up_only_the_listed_runs_it_holds(
    tmp_path: Path, open_ledger: Callable[[str], Engine]
) -> None:
    """What a sync compares with the listing: the stored status and event count of each listed
    run the ledger holds, found among many more listed ids than one lookup takes, and nothing
    for a run it does not hold."""
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    projections = [await projected(path) for path in HISTORIES]
    for projection in projections:
        ledger.write(engine, projection)
    unknown = [f"unknown-{n}" for n in range(2 * changes.LOOKUP_CHUNK)]
    held = [p.run["run_id"] for p in projections]
    found = changes.stored(engine, [*unknown[:700], *held, *unknown[700:]])
    assert found == {
        p.run["run_id"]: changes.Stored(p.run["status"], p.run["history_length"])
        for p in projections
    }
    assert changes.stored(engine, unknown) == {}


def test_migrations_apply_once(tmp_path: Path, open_ledger: Callable[[str], Engine]) -> None:
    """Opening a ledger twice applies each migration once, and records it."""
    url = f"sqlite:///{tmp_path / 'nested' / 'ledger.db'}"
    open_ledger(url)
    engine = open_ledger(url)
    with engine.connect() as connection:
        versions = connection.execute(select(schema.schema_version.c.version)).scalars().all()
    assert versions == list(range(1, len(schema.MIGRATIONS) + 1))


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM runs",
        "DROP TABLE runs",
        "INSERT INTO sync_state VALUES ('x', 'y')",
        "UPDATE runs SET cost_usd = 0",
        "PRAGMA writable_schema = 1",
        "PRAGMA query_only = 0",
        "ATTACH DATABASE ':memory:' AS other",
        "CREATE TABLE other (x INTEGER)",
        "VACUUM",
    ],
)
async def test_sql_refuses_every_write(
    tmp_path: Path, statement: str, open_ledger: Callable[[str], Engine]
) -> None:
    """A statement that would change the ledger (or how it may be changed) is refused, and
    the file is byte for byte as it was."""
    path = tmp_path / "ledger.db"
    engine = open_ledger(f"sqlite:///{path}")
    ledger.write(engine, await projected(HISTORIES[0]))
    engine.dispose()
    before = path.read_bytes()
    with pytest.raises(ledger.NotReadOnly, match="read-only"):
        ledger.read_only(f"sqlite:///{path}", statement)
    assert path.read_bytes() == before


async def test_sql_reads(tmp_path: Path, open_ledger: Callable[[str], Engine]) -> None:
    """A SELECT (and reading a pragma) answers with its columns and rows."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_ledger(url)
    for path in HISTORIES:
        ledger.write(engine, await projected(path))
    answer = ledger.read_only(url, "SELECT status, count(*) AS n FROM runs GROUP BY status")
    assert answer.columns == ["status", "n"]
    assert sum(n for _, n in answer.rows) == len(HISTORIES)
    assert ledger.read_only(url, "PRAGMA user_version").rows == [(0,)]
    with pytest.raises(ledger.QueryFailed, match="no such table"):
        ledger.read_only(url, "SELECT * FROM missing_table")


async def test_reports_over_the_recorded_runs(
    tmp_path: Path, open_ledger: Callable[[str], Engine]
) -> None:
    """The reviews report counts the histories' decisions, the rule's approval among them,
    the reedits and corrections; the cost report adds up every model call's cost."""
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    projections = [await projected(path) for path in HISTORIES]
    for projection in projections:
        ledger.write(engine, projection)
    entries = [entry for path in HISTORIES for entry in recorded_entries(path)]
    decisions = [entry for entry in entries if entry["event"] in DECISIONS]

    found = ledger.reviews(engine, now=datetime.now(UTC))
    assert found.decisions == len(decisions)
    assert found.auto_approved == sum(bool(entry.get("rule")) for entry in decisions)
    assert found.corrected == sum(entry["event"] in {"reedit", "correct"} for entry in decisions)
    assert sum(line.decisions for line in found.by_reviewer) == len(decisions)
    assert found.pending["total"] == 0

    with engine.connect() as connection:
        total = connection.execute(select(func.sum(schema.model_calls.c.cost_usd))).scalar()
    assert sum(line.cost_usd for line in ledger.cost(engine)) == pytest.approx(total)
    assert sum(line.calls for line in ledger.cost(engine)) == sum(
        len(p.model_calls) for p in projections
    )
