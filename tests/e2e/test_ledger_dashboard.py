"""The compose stack's ledger dashboard and the database behind it, on a real PostgreSQL
(Debian's, started in a temporary directory): ``deploy/ledger/setup-database.sh`` makes the
``ledger`` database and its roles as the ``ledger-db`` job does, the writer fills it with the
recorded histories (tests/replay/histories, projected as ``ledger sync`` projects them, plus one
run cut short while it waits for a reviewer), and each panel's SQL, its Grafana macros and
variables expanded the way Grafana expands them for PostgreSQL, runs as the read-only role
Grafana uses. Its figures must equal what ``ledger report`` computes over the same runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from sqlalchemy import Engine
from temporalio.client import WorkflowHistory

from aiorch.devstack.ledger_dashboard import DASHBOARD_FILE
from aiorch.ops import ledger
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support import ROOT
from tests.support.postgres import SUPERUSER, Postgres, postgres_bin, running_postgres

pytestmark = pytest.mark.e2e

HISTORY_DIR = ROOT / "tests" / "replay" / "histories"
HISTORIES = sorted(HISTORY_DIR.glob("*.json"))
SETUP_SCRIPT = ROOT / "deploy" / "ledger" / "setup-database.sh"
# What Grafana's $__interval is for the test's time range, and that bucket in seconds.
INTERVAL, BUCKET_S = "1h", 3600
COST_TABLE = "Cost by tenant, pipeline, model and lane"
COST_KEYS = (
    "tenant",
    "pipeline",
    "model",
    "lane",
    "runs",
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
)
RATES = "Auto-approval and correction rates"
APPROVED = "Model $ per approved item"
PENDING = "Pending reviews by age"
# A time range (naive UTC, as the ledger stores times), and the dashboard's variables' values.
Window = tuple[datetime, datetime]
Variables = dict[str, list[str]]


@dataclass(frozen=True)
class Ledger:
    """The server, the secret files the setup script read, and the runs the writer wrote."""

    server: Postgres
    secrets: Path
    rows: list[ledger.Projection]

    def password(self, role: str) -> str:
        return (self.secrets / f"{role.replace('_', '-')}-password").read_text().strip()

    def connect(self, role: str, password: str | None = None) -> psycopg.Connection[Any]:
        """A connection to the ledger database as ``role`` (its password, unless given)."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.server.port,
            user=role,
            password=self.password(role) if password is None else password,
            dbname="ledger",
            autocommit=True,
            row_factory=dict_row,
        )

    def read(self, sql: str) -> list[dict[str, Any]]:
        """``sql``'s rows, run as Grafana's read-only role."""
        with self.connect("ledger_reader") as connection:
            return connection.execute(sql).fetchall()


def setup_database(server: Postgres, secrets: Path) -> subprocess.CompletedProcess[str]:
    """The setup script, as the ledger-db job runs it, on the test server."""
    env = {
        **os.environ,
        "PATH": f"{postgres_bin()}:{os.environ['PATH']}",
        "PGHOST": "127.0.0.1",
        "PGPORT": str(server.port),
        "PGUSER": SUPERUSER,
        "POSTGRES_PASSWORD_FILE": str(secrets / "postgres-password"),
        "LEDGER_WRITER_PASSWORD_FILE": str(secrets / "ledger-writer-password"),
        "LEDGER_READER_PASSWORD_FILE": str(secrets / "ledger-reader-password"),
    }
    return subprocess.run(
        ["sh", str(SETUP_SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )


async def projections() -> list[ledger.Projection]:
    """Every recorded history's rows, and those of review_approve cut where it first waits for
    a reviewer (an open run, under a run id of its own)."""
    found = []
    for path in HISTORIES:
        history = WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))
        found.append(await ledger.project(path.stem, path.stem, history.events, DATA_CONVERTER))
    raw = json.loads((HISTORY_DIR / "review_approve.json").read_text())
    for cut in range(1, len(raw["events"])):
        events = WorkflowHistory.from_json("open", {**raw, "events": raw["events"][:cut]}).events
        waiting = await ledger.project("open", "open-review", events, DATA_CONVERTER)
        if waiting.run["awaiting_review"]:
            return [*found, waiting]
    raise AssertionError("review_approve never waits for a reviewer")


@pytest.fixture(scope="module")
async def filled(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Ledger]:
    """The server with the ledger database set up (twice: the script is idempotent) and
    filled by its writer role, as `ledger sync` fills it."""
    secrets = tmp_path_factory.mktemp("secrets")
    rows = await projections()
    with running_postgres() as server:
        (secrets / "postgres-password").write_text(server.password + "\n")
        (secrets / "ledger-writer-password").write_text("writer-Secret-1\n")
        (secrets / "ledger-reader-password").write_text("reader-Secret-1\n")
        for _ in range(2):
            done = setup_database(server, secrets)
            assert done.returncode == 0, done.stderr
        found = Ledger(server, secrets, rows)
        writer = ledger.open_ledger(
            f"postgresql://ledger_writer:{found.password('ledger_writer')}"
            f"@127.0.0.1:{server.port}/ledger"
        )
        for projection in rows:
            ledger.write(writer, projection)
        writer.dispose()
        yield found


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    return document


def panel_sql(title: str) -> str:
    """The SQL of the panel titled ``title``, as provisioned."""
    [sql] = [
        panel["targets"][0]["rawSql"] for panel in dashboard()["panels"] if panel["title"] == title
    ]
    assert isinstance(sql, str)
    return sql


def quoted(values: Sequence[str]) -> str:
    """A multi-value variable as Grafana's PostgreSQL datasource writes it: quoted literals."""
    return ",".join("'" + value.replace("'", "''") + "'" for value in values)


def expand(sql: str, window: Window, variables: Variables) -> str:
    """The SQL Grafana sends for a panel: the variables substituted (``$__interval`` is
    INTERVAL), then its PostgreSQL macros expanded: ``$__timeFilter`` to a BETWEEN of RFC 3339
    times, ``$__timeGroupAlias`` to the epoch floored to the interval, named "time"."""
    text = sql.replace("$__interval", INTERVAL)
    for name, values in variables.items():
        text = text.replace(f"${name}", quoted(values))
    start, end = (moment.strftime("%Y-%m-%dT%H:%M:%SZ") for moment in window)
    text = re.sub(r"\$__timeFilter\(([^)]*)\)", rf"\1 BETWEEN '{start}' AND '{end}'", text)
    text = re.sub(
        rf"\$__timeGroupAlias\(([^,]*),\s*{INTERVAL}\)",
        rf'floor(extract(epoch from \1)/{BUCKET_S})*{BUCKET_S} AS "time"',
        text,
    )
    assert "$" not in text, text
    return text


def windows(rows: Sequence[ledger.Projection]) -> list[Window]:
    """The whole recorded span, and its part from the midnight after the first decision (so
    some decisions and calls fall outside it). Naive UTC, as the ledger stores times."""
    starts = [row.run["started_at"] for row in rows]
    decided = sorted(d["decided_at"] for row in rows for d in row.review_decisions)
    midnight = datetime.combine(decided[0].date() + timedelta(days=1), datetime.min.time())
    assert decided[0] < midnight < decided[-1], "the recorded decisions all fall on one day"
    last = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)
    return [(min(starts) - timedelta(hours=1), last), (midnight, last)]


def scopes(rows: Sequence[ledger.Projection]) -> list[Variables]:
    """Every tenant and pipeline (what Grafana's All sends), then the default tenant's LLM
    pipeline alone."""
    every = {
        "tenant": sorted({row.run["tenant"] for row in rows}),
        "pipeline": sorted({row.run["pipeline"] for row in rows}),
    }
    return [every, {"tenant": ["default"], "pipeline": ["llm"]}]


def in_scope(rows: Sequence[ledger.Projection], scope: Variables) -> list[ledger.Projection]:
    return [
        row
        for row in rows
        if row.run["tenant"] in scope["tenant"] and row.run["pipeline"] in scope["pipeline"]
    ]


@pytest.fixture(scope="module")
def reports(
    filled: Ledger, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[int, Engine]]:
    """For each of `scopes`, by position, a ledger of that scope's runs alone, where
    `ledger report` computes the expected figures (it has no tenant or pipeline filter)."""
    engines = {}
    for index, scope in enumerate(scopes(filled.rows)):
        folder = tmp_path_factory.mktemp(f"scope{index}")
        engines[index] = ledger.open_ledger(f"sqlite:///{folder / 'ledger.db'}")
        for projection in in_scope(filled.rows, scope):
            ledger.write(engines[index], projection)
    yield engines
    for engine in engines.values():
        engine.dispose()


def cases(filled: Ledger) -> Iterator[tuple[int, Variables, Window]]:
    for index, scope in enumerate(scopes(filled.rows)):
        for window in windows(filled.rows):
            yield index, scope, window


def as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC)


def approx(value: Any) -> Any:
    return None if value is None else pytest.approx(float(value))


async def test_the_variables_list_the_ledger_s_tenants_and_pipelines(filled: Ledger) -> None:
    """The tenant and pipeline variables' queries, run as the reader, list each tenant and
    pipeline the ledger's runs name, once."""
    queries = {item["name"]: item["query"] for item in dashboard()["templating"]["list"]}
    assert set(queries) == {"tenant", "pipeline"}
    for name, expected in scopes(filled.rows)[0].items():
        assert [row[name] for row in filled.read(queries[name])] == expected, name


async def test_the_cost_panels_equal_the_cost_report(
    filled: Ledger, reports: dict[int, Engine]
) -> None:
    """The cost table holds the cost report's lines; each cost-over-time panel's series, in
    buckets of the interval, add up to the report's dollars by tenant, pipeline, model or lane:
    in the whole span and a part of it, for every tenant and pipeline and for one of each."""
    for index, scope, window in cases(filled):
        report = ledger.cost(reports[index], *map(as_utc, window))
        assert report, "no model call in the window: the comparison would prove nothing"
        table = filled.read(expand(panel_sql(COST_TABLE), window, scope))
        assert sorted(
            (*(line[key] for key in COST_KEYS), approx(line["cost_usd"])) for line in table
        ) == sorted(
            (*(getattr(line, key) for key in COST_KEYS), approx(line.cost_usd)) for line in report
        )
        for name in ("tenant", "pipeline", "model", "lane"):
            series = filled.read(expand(panel_sql(f"Model cost by {name}"), window, scope))
            assert all(float(point["time"]) % BUCKET_S == 0 for point in series)
            found: dict[str, float] = defaultdict(float)
            for point in series:
                found[point["metric"]] += float(point["value"])
            expected: dict[str, float] = defaultdict(float)
            for line in report:
                expected[getattr(line, name)] += line.cost_usd
            assert found == pytest.approx(expected), name


async def test_the_review_panels_equal_the_reviews_report(
    filled: Ledger, reports: dict[int, Engine]
) -> None:
    """Time to decision by group and by reviewer (decisions, p50, p90), the auto-approval and
    correction rates, the approved items and their model dollars each, and the pending
    reviews by age equal the reviews report's, aged at the same moment."""
    for index, scope, window in cases(filled):
        with filled.connect("ledger_reader") as connection:
            now = connection.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
        report = ledger.reviews(reports[index], *map(as_utc, window), now=now)
        assert report.decisions, "no decision in the window: the comparison would prove nothing"
        for title, expected in (
            ("Time to decision by group", report.by_group),
            ("Time to decision by reviewer", report.by_reviewer),
        ):
            found = filled.read(expand(panel_sql(title), window, scope))
            assert {
                line["name"]: (line["decisions"], approx(line["p50_s"]), approx(line["p90_s"]))
                for line in found
            } == {
                line.name: (line.decisions, approx(line.p50_s), approx(line.p90_s))
                for line in expected
            }, title
        [rates] = filled.read(expand(panel_sql(RATES), window, scope))
        assert (rates["decisions"], rates["auto_approved"], rates["corrected"]) == (
            report.decisions,
            report.auto_approved,
            report.corrected,
        )
        assert rates["auto_approval_rate"] == approx(report.auto_approval_rate)
        assert rates["correction_rate"] == approx(report.correction_rate)
        [approved] = filled.read(expand(panel_sql(APPROVED), window, scope))
        assert approved["approved_items"] == report.approved_items
        assert approved["cost_per_approved_usd"] == approx(report.cost_per_approved_usd)
        [pending] = filled.read(expand(panel_sql(PENDING), window, scope))
        assert pending == report.pending
        assert report.pending["total"] == 1, "the open run is not waiting for a reviewer"


async def test_runs_by_status_counts_the_runs_started_in_the_window(filled: Ledger) -> None:
    """The runs-by-status panel counts the runs in scope started in the window, by status, as
    counted straight from the projected runs (the open one among them)."""
    seen: Counter[str] = Counter()
    for _, scope, window in cases(filled):
        found = filled.read(expand(panel_sql("Runs by status"), window, scope))
        expected = Counter(
            row.run["status"]
            for row in in_scope(filled.rows, scope)
            if window[0] <= row.run["started_at"] <= window[1]
        )
        assert {line["metric"]: line["value"] for line in found} == dict(expected)
        seen += expected
    assert {"running", "completed", "failed"} <= set(seen)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO sync_state VALUES ('x', 'y')",
        "UPDATE runs SET cost_usd = 0",
        "DELETE FROM runs",
        "DROP TABLE corrections",
        "CREATE TABLE other (x integer)",
        "CREATE TEMPORARY TABLE other (x integer)",
    ],
)
async def test_the_reader_cannot_change_the_ledger(filled: Ledger, statement: str) -> None:
    """Every write, drop or create of the read-only role is refused: by its read-only
    sessions, and by its rights once it turns that off; the writer's rows stay."""
    with filled.connect("ledger_reader") as connection:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            connection.execute(statement)
        connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(statement)
    assert len(filled.read("SELECT run_id FROM runs")) == len(filled.rows)


async def test_the_reader_reads_tables_a_later_migration_creates(filled: Ledger) -> None:
    """A table the writer creates after the setup (as a later migration would) is readable by
    the reader at once (default privileges), and writable by it still not."""
    with filled.connect("ledger_writer") as writer:
        writer.execute("CREATE TABLE later_migration (x integer)")
        writer.execute("INSERT INTO later_migration VALUES (7)")
    try:
        assert filled.read("SELECT x FROM later_migration") == [{"x": 7}]
        with filled.connect("ledger_reader") as reader:
            reader.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute("INSERT INTO later_migration VALUES (8)")
    finally:
        with filled.connect("ledger_writer") as writer:
            writer.execute("DROP TABLE later_migration")


async def test_running_the_setup_again_applies_a_new_password(filled: Ledger) -> None:
    """The setup script run again with a replaced reader password keeps the ledger and its
    rights, and the role logs in with the new password only."""
    path = filled.secrets / "ledger-reader-password"
    old = path.read_text().strip()
    path.write_text("reader-Secret-2\n")
    try:
        done = setup_database(filled.server, filled.secrets)
        assert done.returncode == 0, done.stderr
        assert "Secret" not in done.stdout + done.stderr
        assert len(filled.read("SELECT run_id FROM runs")) == len(filled.rows)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            filled.connect("ledger_reader", old)
    finally:
        path.write_text(old + "\n")
        assert setup_database(filled.server, filled.secrets).returncode == 0
