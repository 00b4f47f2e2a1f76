"""The document store: each completed document's fields in a SQL table, through SQLAlchemy Core.

One code path serves both databases: SQLite (the embedded default, a file under ``.data``) and
PostgreSQL (through psycopg 3), chosen by ``DOCUMENT_STORE_URL`` alone. The write is an upsert
keyed by the request id (``INSERT ... ON CONFLICT (request_id) DO UPDATE``, which both dialects
speak), so an activity retried after a worker died mid-write, or a run redriven, leaves one row
holding the last fields. The ``documents`` table is created on first use when it is missing.

The engine (its connection pool) is built once per worker (`create_store_engine`) and owned by
`StoreActivities`, which disposes of it on ``close()``. SQLAlchemy's engine is synchronous, so
each write runs in a thread; it is short and bounded by the timeouts below, well inside the
activity's start-to-close timeout.

Errors: a database that cannot be reached or is busy (refused, timed out, locked, a password an
operator must fix) raises the retryable ``DocumentStoreUnavailable``; a row the database refuses
(integrity, data, or a ``documents`` table of another shape) the permanent
``DocumentStoreRejected``. Neither message holds the URL (it may hold a password) nor the
driver's text (which may quote the fields): the backend, host and SQLSTATE or SQLite code only.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    MetaData,
    Table,
    Text,
    create_engine,
    event,
    inspect,
    select,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Engine, make_url
from temporalio import activity
from temporalio.exceptions import ApplicationError

from aiorch.runtime.errors import ConfigError
from workflows.documents.contract import (
    ACTIVITY_STORE_DOCUMENT,
    DOCUMENT_STORE_REJECTED,
    DOCUMENT_STORE_UNAVAILABLE,
)
from workflows.documents.payloads import StoreDocumentInput, StoreReceipt
from workflows.documents.validation import Problem

T = TypeVar("T")
TABLE_NAME: Final = "documents"
CONNECT_TIMEOUT: Final = timedelta(seconds=10)
# PostgreSQL: the longest one statement may run. SQLite: the longest a write waits for a lock.
STATEMENT_TIMEOUT: Final = timedelta(seconds=30)
# How long a connection pauses before it tries again to switch a new SQLite file to WAL.
WAL_SWITCH_PAUSE: Final = timedelta(milliseconds=10)
# Connections per worker process: writes are short, and the threads that run them are few.
POOL_SIZE: Final = 5
POOL_OVERFLOW: Final = 5
# A connection older than this is replaced (proxies and servers drop idle ones).
POOL_RECYCLE: Final = timedelta(minutes=30)
_POSTGRES_DRIVERS: Final = ("postgresql", "postgres", "postgresql+psycopg")
# The database refused this row or this table's shape: the same write would fail again. (A
# statement that never reached the database, such as fields that are not JSON, neither.)
_REFUSALS: Final = (
    sa_exc.IntegrityError,
    sa_exc.DataError,
    sa_exc.ProgrammingError,
    sa_exc.NotSupportedError,
)
# Everything else the driver or the pool reports is about reaching the database (refused, timed
# out, locked, dropped, a password or a read-only file an operator can fix): retried.
_PASSING: Final = (sa_exc.DBAPIError, sa_exc.TimeoutError, sa_exc.DisconnectionError)

METADATA: Final = MetaData()
# JSON, not PostgreSQL's JSONB: JSONB refuses "\u0000", which SQLite takes, and one code path
# should accept the same documents on both.
DOCUMENTS: Final = Table(
    TABLE_NAME,
    METADATA,
    Column("request_id", Text, primary_key=True),
    Column("pipeline", Text, nullable=False),
    Column("schema_name", Text, nullable=False),
    Column("fields", JSON, nullable=False),
    Column("problems", JSON, nullable=False),
    Column("reviewed_by", Text, nullable=True),
    Column("corrected", Boolean, nullable=False),
    Column("content_sha256", Text, nullable=False),
    Column("stored_at", DateTime(timezone=True), nullable=False),
)


class StoredDocument(BaseModel):
    """A row of the ``documents`` table."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    pipeline: str
    schema_name: str
    fields: dict[str, Any]
    problems: list[Problem]
    reviewed_by: str | None
    corrected: bool
    content_sha256: str
    stored_at: datetime


def create_store_engine(url: str) -> Engine:
    """The engine (and its pool) for ``DOCUMENT_STORE_URL``: ``sqlite:///path`` (the folder is
    created) or ``postgresql://user:password@host:port/db`` (through psycopg 3). No connection is
    made yet.

    Raises:
        ConfigError: not a URL of a supported database; the message does not quote it.
    """
    parsed = _parse(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    return create_engine(
        parsed.set(drivername="postgresql+psycopg"),
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW,
        pool_timeout=CONNECT_TIMEOUT.total_seconds(),
        pool_recycle=int(POOL_RECYCLE.total_seconds()),
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": int(CONNECT_TIMEOUT.total_seconds()),
            "options": f"-c statement_timeout={int(STATEMENT_TIMEOUT.total_seconds() * 1000)}",
            "application_name": "ai-orchestrator",
        },
    )


def _parse(url: str) -> URL:
    shape = "sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError):
        raise ConfigError(f"DOCUMENT_STORE_URL is not a database URL ({shape})") from None
    driver = parsed.drivername
    if driver in ("sqlite", "sqlite+pysqlite"):
        if parsed.database in (None, "", ":memory:"):
            raise ConfigError(
                "DOCUMENT_STORE_URL names no SQLite file: an in-memory database loses every "
                "document when the worker stops"
            )
        return parsed
    if driver in _POSTGRES_DRIVERS:
        return parsed
    raise ConfigError(f"DOCUMENT_STORE_URL: the {driver!r} database is not supported ({shape})")


def _sqlite_engine(parsed: URL) -> Engine:
    assert parsed.database is not None
    try:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"DOCUMENT_STORE_URL: cannot create the folder of the SQLite file ({err.strerror})"
        ) from None
    engine = create_engine(
        parsed.set(drivername="sqlite+pysqlite"),
        pool_size=POOL_SIZE,
        max_overflow=POOL_OVERFLOW,
        pool_timeout=CONNECT_TIMEOUT.total_seconds(),
        connect_args={"timeout": STATEMENT_TIMEOUT.total_seconds()},
    )
    event.listen(engine, "connect", _write_ahead_log)
    return engine


def _write_ahead_log(dbapi_connection: Any, _record: Any) -> None:
    # Write-ahead logging: readers and the writer no longer block each other; writers (of other
    # worker processes too) still take turns, each waiting up to the busy timeout set above.
    # Switching a new file to it is the exception: SQLite refuses the switch at once, without
    # waiting, to a connection that finds another one switching, so that one waits here.
    deadline = time.monotonic() + STATEMENT_TIMEOUT.total_seconds()
    while True:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if err.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        finally:
            cursor.close()
        time.sleep(WAL_SWITCH_PAUSE.total_seconds())


class StoreActivities:
    """The ``store_document`` activity; owns the engine it is given (``close()`` disposes of it)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        self._table_ready = False
        self._table_lock = threading.Lock()

    @activity.defn(name=ACTIVITY_STORE_DOCUMENT)
    async def store_document(self, store_input: StoreDocumentInput) -> StoreReceipt:
        """Upsert the document's row (keyed by request id); a second store replaces the first."""
        stored_at = datetime.now(UTC)
        await asyncio.to_thread(self._guarded, self._upsert, store_input, stored_at)
        return StoreReceipt(
            request_id=store_input.request_id,
            table=TABLE_NAME,
            dialect=self._dialect,
            stored_at=stored_at,
        )

    async def fetch(self, request_id: str) -> StoredDocument | None:
        """The stored row of ``request_id``, or None (for operators and tests)."""
        return await asyncio.to_thread(self._guarded, self._fetch, request_id)

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def _upsert(self, store_input: StoreDocumentInput, stored_at: datetime) -> None:
        row = {
            "request_id": store_input.request_id,
            "pipeline": store_input.pipeline,
            "schema_name": store_input.schema_name,
            "fields": store_input.fields,
            "problems": [problem.model_dump() for problem in store_input.problems],
            "reviewed_by": store_input.reviewed_by,
            "corrected": store_input.corrected,
            "content_sha256": store_input.content_sha256,
            "stored_at": stored_at,
        }
        insert = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        statement = insert(DOCUMENTS).values(row)
        statement = statement.on_conflict_do_update(
            index_elements=[DOCUMENTS.c.request_id],
            set_={name: statement.excluded[name] for name in row if name != "request_id"},
        )
        with self._engine.begin() as connection:
            connection.execute(statement)

    def _fetch(self, request_id: str) -> StoredDocument | None:
        with self._engine.connect() as connection:
            found = connection.execute(
                select(DOCUMENTS).where(DOCUMENTS.c.request_id == request_id)
            ).first()
        if found is None:
            return None
        row = found._asdict()
        stored_at = row["stored_at"]
        # SQLite keeps no zone (the store writes UTC); PostgreSQL answers in the session's zone.
        row["stored_at"] = (
            stored_at.replace(tzinfo=UTC) if stored_at.tzinfo is None else stored_at.astimezone(UTC)
        )
        return StoredDocument.model_validate(row)

    def _guarded(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` once the table exists, with the database's errors mapped."""
        try:
            self._ensure_table()
            return work(*args)
        except sa_exc.SQLAlchemyError as err:
            raise self._failure(err) from None

    def _ensure_table(self) -> None:
        if self._table_ready:
            return
        with self._table_lock:
            if self._table_ready:
                return
            try:
                METADATA.create_all(self._engine, checkfirst=True)
            except sa_exc.DatabaseError:
                # Another worker may have created it between the check and the create.
                if not inspect(self._engine).has_table(TABLE_NAME):
                    raise
            present = {column["name"] for column in inspect(self._engine).get_columns(TABLE_NAME)}
            missing = sorted(set(DOCUMENTS.columns.keys()) - present)
            if missing:
                raise ApplicationError(
                    f"the {TABLE_NAME} table in the document store ({self._where()}) lacks the "
                    f"columns {', '.join(missing)}: migrate it, or point DOCUMENT_STORE_URL at "
                    "another database",
                    type=DOCUMENT_STORE_REJECTED,
                    non_retryable=True,
                )
            self._table_ready = True

    def _failure(self, err: sa_exc.SQLAlchemyError) -> ApplicationError:
        reason = _reason(err)
        if isinstance(err, _REFUSALS) or not isinstance(err, _PASSING):
            return ApplicationError(
                f"the document store ({self._where()}) refused the document ({reason})",
                type=DOCUMENT_STORE_REJECTED,
                non_retryable=True,
            )
        _log().warning("document store unavailable (%s): %s", reason, self._driver_line(err))
        return ApplicationError(
            f"the document store ({self._where()}) is unavailable ({reason}); it will be retried",
            type=DOCUMENT_STORE_UNAVAILABLE,
        )

    def _where(self) -> str:
        url = self._engine.url
        if self._dialect == "sqlite":
            return f"sqlite file {url.database}"
        return f"{self._dialect} at {url.host}:{url.port or 5432}/{url.database}"

    def _driver_line(self, err: sa_exc.SQLAlchemyError) -> str:
        """The driver's own first line (why a connection failed), without the password."""
        original = getattr(err, "orig", None)
        line = (str(original).strip().splitlines() or [""])[0] if original is not None else ""
        password = self._engine.url.password
        return line.replace(str(password), "***") if password else line


def _reason(err: sa_exc.SQLAlchemyError) -> str:
    """The error's class and the database's code (SQLSTATE, or SQLite's error name): what went
    wrong, with nothing of the statement or its values."""
    original = getattr(err, "orig", None)
    code = getattr(original, "sqlstate", None) or getattr(original, "sqlite_errorname", None)
    return f"{type(err).__name__}, {code}" if code else type(err).__name__


def _log() -> logging.LoggerAdapter[logging.Logger] | logging.Logger:
    return activity.logger if activity.in_activity() else logging.getLogger(__name__)
