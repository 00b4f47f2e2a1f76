"""The ledger's tables, and the migrations that bring a database to them.

Every table is keyed by a natural key taken from the histories (a run id, a run chain and a
position in its recorded history, an activity's scheduled event id), so projecting a history
twice writes the same rows: syncing is idempotent by construction. Times are stored in UTC
without a zone (the same text in SQLite and PostgreSQL).

A database records the migrations applied to it in ``schema_version``; `migrate` applies the
ones it lacks, in order, each in its own transaction. A migration is a function of a
connection and is never edited once released: a new column or table is a new migration.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    func,
    inspect,
    select,
    text,
)

metadata = MetaData()

schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("applied_at", DateTime, nullable=False),
)

sync_state = Table(
    "sync_state",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("workflow_id", String(255), nullable=False, index=True),
    Column("chain_id", String(64), nullable=False, index=True),
    Column("workflow_type", String(255), nullable=False),
    Column("pipeline", String(255), nullable=False),
    Column("pipeline_version", String(255)),
    Column("tenant", String(255), nullable=False),
    Column("requester", String(255)),
    Column("state", String(255)),
    Column("state_since", DateTime),
    Column("awaiting_review", Boolean, nullable=False),
    Column("status", String(32), nullable=False),
    Column("started_at", DateTime, nullable=False),
    Column("ended_at", DateTime),
    Column("cost_usd", Float, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("model", String(255)),
    Column("lane", String(32)),
    Column("review_rounds", Integer, nullable=False),
    Column("history_length", Integer, nullable=False),
    # The rollout experiment and variant the run was planned with (migration 2).
    Column("experiment", String(64)),
    Column("variant", String(64)),
)

transitions = Table(
    "transitions",
    metadata,
    Column("chain_id", String(64), primary_key=True),
    Column("entry_id", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("workflow_id", String(255), nullable=False),
    Column("position", Integer, nullable=False),
    Column("from_state", String(255), nullable=False),
    Column("to_state", String(255), nullable=False),
    Column("event", String(255), nullable=False),
    Column("at", DateTime, nullable=False),
    Column("reason", Text),
    Column("attempt", Integer, nullable=False),
)

model_calls = Table(
    "model_calls",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("event_id", Integer, primary_key=True, autoincrement=False),
    Column("workflow_id", String(255), nullable=False),
    Column("activity", String(64), nullable=False),
    Column("step", String(255)),
    Column("attempt", Integer, nullable=False),
    Column("model", String(255), nullable=False),
    Column("lane", String(32), nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("scheduled_at", DateTime, nullable=False),
    Column("ended_at", DateTime),
    Column("latency_s", Float),
    Column("outcome", String(32), nullable=False),
    Column("error", Text),
)

review_decisions = Table(
    "review_decisions",
    metadata,
    Column("chain_id", String(64), primary_key=True),
    Column("entry_id", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("workflow_id", String(255), nullable=False),
    Column("review_round", Integer),
    Column("kind", String(16), nullable=False),
    Column("decision", String(32), nullable=False),
    Column("reviewer", String(255)),
    Column("review_group", String(255)),
    Column("rule", String(255)),
    Column("state", String(255), nullable=False),
    Column("review_started_at", DateTime),
    Column("decided_at", DateTime, nullable=False),
    Column("delay_s", Float),
    Column("feedback_present", Boolean, nullable=False),
)

corrections = Table(
    "corrections",
    metadata,
    Column("chain_id", String(64), primary_key=True),
    Column("review_round", Integer, primary_key=True, autoincrement=False),
    Column("reviewer", String(255), primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("field_path", String(512), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("workflow_id", String(255), nullable=False),
    Column("at", DateTime, nullable=False),
    Column("before", Text),
    Column("after", Text),
    Column("feedback_present", Boolean, nullable=False),
)

experiment_halts = Table(
    "experiment_halts",
    metadata,
    Column("experiment", String(64), primary_key=True),
    Column("variant", String(64), primary_key=True),
    Column("halted_at", DateTime, primary_key=True),
    Column("halted_by", String(200), nullable=False),
    Column("reason", Text, nullable=False),
)
"""Each halt of a rollout variant (docs/rollouts.md), written by whoever halted it: the
watcher or an operator (not projected from the histories)."""

judgements = Table(
    "judgements",
    metadata,
    Column("chain", String(64), primary_key=True),
    Column("judge", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("experiment", String(64), nullable=False, index=True),
    Column("variant", String(64), nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("reason", Text),
    Column("at", DateTime, nullable=False),
)
"""Each judgement of a rollout's sampled run (docs/rollouts.md), one per run chain and judge,
written by ``experiments watch`` after the run (not projected from the histories)."""

PROJECTED: Final[tuple[Table, ...]] = (
    runs,
    transitions,
    model_calls,
    review_decisions,
    corrections,
)
"""The tables a sync fills from the histories (not its own bookkeeping)."""


def contents(engine: Engine) -> tuple[dict[str, int], str]:
    """Each projected table's row count, and a digest of every row in key order: equal before
    and after a sync that changed nothing."""
    digest = hashlib.sha256()
    counts = {}
    with engine.connect() as connection:
        for table in PROJECTED:
            rows = connection.execute(select(table).order_by(*table.primary_key.columns)).all()
            counts[table.name] = len(rows)
            digest.update(repr(rows).encode())
    return counts, digest.hexdigest()


def _create_v1(connection: Connection) -> None:
    for table in (sync_state, *PROJECTED):
        table.create(connection)


def _add_rollouts_v2(connection: Connection) -> None:
    # A database created at version 1 by this code already has the runs' columns (v1 creates
    # the tables as declared above); one created by an older release lacks them.
    have = {column["name"] for column in inspect(connection).get_columns(runs.name)}
    for column in ("experiment", "variant"):
        if column not in have:
            connection.execute(text(f"ALTER TABLE runs ADD COLUMN {column} VARCHAR(64)"))
    experiment_halts.create(connection, checkfirst=True)


def _add_judgements_v3(connection: Connection) -> None:
    judgements.create(connection, checkfirst=True)


Migration = Callable[[Connection], None]
MIGRATIONS: Final[Sequence[Migration]] = (_create_v1, _add_rollouts_v2, _add_judgements_v3)
"""Migration n + 1 brings a database from version n to n + 1; applied in order, never edited."""


def engine_for(url: str) -> Engine:
    """An engine for ``url`` (``sqlite:///path``, ``postgresql://...``): a PostgreSQL URL
    without a driver uses psycopg 3, a SQLite file's folder is created."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    engine = create_engine(url)
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    return engine


def version(connection: Connection) -> int:
    """The migrations applied to the database (0: none, or no ledger yet)."""
    if not connection.dialect.has_table(connection, schema_version.name):
        return 0
    return int(connection.execute(select(func.max(schema_version.c.version))).scalar() or 0)


def migrate(engine: Engine) -> int:
    """Apply the migrations the database lacks; returns its version after."""
    with engine.begin() as connection:
        schema_version.create(connection, checkfirst=True)
    current = 0
    for number, step in enumerate(MIGRATIONS, start=1):
        with engine.begin() as connection:
            current = version(connection)
            if current >= number:
                continue
            step(connection)
            connection.execute(
                schema_version.insert().values(
                    version=number, applied_at=datetime.now(UTC).replace(tzinfo=None)
                )
            )
            current = number
    return current
