"""The document store: each completed document's fields in a SQL table, through SQLAlchemy Core.

One code path serves both databases: SQLite (the embedded default, a file under ``.data``) and
PostgreSQL (through psycopg 3), chosen by ``DOCUMENT_STORE_URL`` alone. The write is an upsert
keyed by the request id (``INSERT ... ON CONFLICT (request_id) DO UPDATE ... WHERE``, which both
dialects speak) that updates a row only for the run chain that owns it
(`activities.documents.table`). An activity retried after a worker died mid-write, a continued
or a re-edited run leaves one row holding the last fields; a run of another chain under the
same request id (a reused id, another pipeline, another tenant; a redrive too, which starts a
new chain) leaves the row as it was and fails with the permanent ``DocumentStoreConflict``. The
``documents`` table is created on first use when it is missing, and given the owner columns
when it lacks them.

The engine (its connection pool) is built once per worker (`create_store_engine`) and owned by
`StoreActivities`, which disposes of it on ``close()``. SQLAlchemy's engine is synchronous, so
each write runs in a thread; it is short and bounded by the timeouts below, well inside the
activity's start-to-close timeout.

Errors: a database that cannot be reached or is busy (refused, timed out, locked, a password an
operator must fix) raises the retryable ``DocumentStoreUnavailable``; a row the database refuses
(integrity, data, or a ``documents`` table of another shape) the permanent
``DocumentStoreRejected``; a row another chain owns the permanent ``DocumentStoreConflict``.
No message holds the URL (it may hold a password) nor the driver's text (which may quote the
fields): the backend, host and SQLSTATE or SQLite code only.
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

from sqlalchemy import create_engine, event, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Engine, make_url
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.documents.table import (
    DOCUMENTS,
    OWNER_COLUMNS,
    TABLE_NAME,
    StoredDocument,
    TableOfAnotherShape,
    prepare,
)
from aiorch_runtime.errors import ConfigError
from workflows.steps.contract import (
    ACTIVITY_STORE_DOCUMENT,
    DOCUMENT_STORE_CONFLICT,
    DOCUMENT_STORE_REJECTED,
    DOCUMENT_STORE_UNAVAILABLE,
)
from workflows.steps.document_payloads import StoreDocumentInput, StoreReceipt

T = TypeVar("T")
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
        """Write the document's row (keyed by request id) for the run chain that owns it: a
        second store of the same chain replaces the first.

        Raises:
            ApplicationError: ``DocumentStoreConflict`` (permanent), another chain's row holds
                the request id and stays as it was; ``DocumentStoreRejected`` (permanent) or
                ``DocumentStoreUnavailable`` (retried), see the module doc.
        """
        store_input = _owned(store_input)
        stored_at = datetime.now(UTC)
        owner = await asyncio.to_thread(self._guarded, self._upsert, store_input, stored_at)
        if owner is not None:
            raise _conflict(store_input.request_id, owner)
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

    def _upsert(
        self, store_input: StoreDocumentInput, stored_at: datetime
    ) -> StoredDocument | None:
        """Write the row unless another chain owns it; that row when it does (None: written)."""
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
            "workflow_id": store_input.workflow_id,
            "chain_id": store_input.chain_id,
            "tenant": store_input.tenant,
            "requested_by": store_input.requested_by,
        }
        insert = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        statement = insert(DOCUMENTS).values(row)
        kept = {"request_id", *OWNER_COLUMNS}
        # The owner's columns never change, and a row whose owner is another chain (or none,
        # a row from before owners) is not updated: the statement then changes no row.
        statement = statement.on_conflict_do_update(
            index_elements=[DOCUMENTS.c.request_id],
            set_={name: statement.excluded[name] for name in row if name not in kept},
            where=(DOCUMENTS.c.workflow_id == statement.excluded.workflow_id)
            & (DOCUMENTS.c.chain_id == statement.excluded.chain_id),
        )
        with self._engine.begin() as connection:
            # RETURNING rather than rowcount, which psycopg does not report for an upsert.
            if connection.execute(statement.returning(DOCUMENTS.c.request_id)).first():
                return None
            found = connection.execute(
                select(DOCUMENTS).where(DOCUMENTS.c.request_id == store_input.request_id)
            ).first()
        if found is None:
            raise ApplicationError(
                f"the document store ({self._where()}) wrote no row for request "
                f"{store_input.request_id}; it will be retried",
                type=DOCUMENT_STORE_UNAVAILABLE,
            )
        return _document(found._asdict())

    def _fetch(self, request_id: str) -> StoredDocument | None:
        with self._engine.connect() as connection:
            found = connection.execute(
                select(DOCUMENTS).where(DOCUMENTS.c.request_id == request_id)
            ).first()
        return None if found is None else _document(found._asdict())

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
                prepare(self._engine)
            except TableOfAnotherShape as err:
                raise ApplicationError(
                    f"the {TABLE_NAME} table in the document store ({self._where()}) lacks the "
                    f"columns {', '.join(err.missing)}: migrate it, or point DOCUMENT_STORE_URL "
                    "at another database",
                    type=DOCUMENT_STORE_REJECTED,
                    non_retryable=True,
                ) from None
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


def _owned(store_input: StoreDocumentInput) -> StoreDocumentInput:
    """``store_input`` with its owner: its own, or for an input recorded before inputs named
    one, the run that scheduled this activity (its workflow id and run id)."""
    if store_input.chain_id is not None or not activity.in_activity():
        return store_input
    info = activity.info()
    return store_input.model_copy(
        update={
            "workflow_id": store_input.workflow_id or info.workflow_id,
            "chain_id": info.workflow_run_id,
        }
    )


def _document(row: dict[str, Any]) -> StoredDocument:
    stored_at = row["stored_at"]
    # SQLite keeps no zone (the store writes UTC); PostgreSQL answers in the session's zone.
    row["stored_at"] = (
        stored_at.replace(tzinfo=UTC) if stored_at.tzinfo is None else stored_at.astimezone(UTC)
    )
    return StoredDocument.model_validate(row)


def _conflict(request_id: str, owner: StoredDocument) -> ApplicationError:
    """The refusal of a write over another chain's row: which run wrote it and when, nothing
    of its fields or its tenant."""
    if owner.chain_id is None:
        writer = "a run stored before rows named their run chain"
    else:
        writer = f"another run chain ({owner.pipeline}, run {owner.chain_id})"
    return ApplicationError(
        f"request {request_id} is stored already, by {writer} at "
        f"{owner.stored_at.isoformat(timespec='seconds')}: that row was left as it was and "
        "this run's fields were not stored; start the document under a new request id",
        type=DOCUMENT_STORE_CONFLICT,
        non_retryable=True,
    )


def _log() -> logging.LoggerAdapter[logging.Logger] | logging.Logger:
    return activity.logger if activity.in_activity() else logging.getLogger(__name__)
