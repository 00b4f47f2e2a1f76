"""Running a user's SQL over the ledger, read-only whatever it says.

SQLite is opened read-only (the URI's ``mode=ro``), and an authorizer refuses what a read-only
file still lets a connection do: a ``PRAGMA`` that sets a value (``writable_schema``,
``query_only``), ``ATTACH`` (another file, maybe writable) and any write at all. PostgreSQL runs
the statement as a prepared statement (one statement only) in a ``READ ONLY`` transaction that
is rolled back. Either way a refused statement ends in `NotReadOnly` (one line).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import psycopg
from sqlalchemy import make_url

from aiorch.ops.ledger._schema import engine_for

# What a read-only SQLite statement may do (sqlite3's authorizer action codes).
_READING: Final = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        getattr(sqlite3, "SQLITE_RECURSIVE", 33),
    }
)


# How SQLite says it refused: the authorizer denied it, or the file is opened read-only.
_REFUSALS: Final = frozenset({"SQLITE_AUTH", "SQLITE_READONLY"})


class NotReadOnly(Exception):
    """The statement would change the ledger (or could not be run read-only)."""


class QueryFailed(Exception):
    """The statement did not run (a syntax error, no such table, ...): the database's word."""


@dataclass(frozen=True)
class Answer:
    """A statement's result: its column names and rows."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


class _Reader:
    """sqlite3's authorizer for a read-only connection; remembers whether it refused."""

    def __init__(self) -> None:
        self.refused = False

    def __call__(self, action: int, first: str | None, second: str | None, *_: object) -> int:
        if action in _READING or (action == sqlite3.SQLITE_PRAGMA and second is None):
            return sqlite3.SQLITE_OK  # a read, or reading a pragma's value
        self.refused = True
        return sqlite3.SQLITE_DENY


def _sqlite(path: str, sql: str) -> Answer:
    if not Path(path).is_file():
        raise QueryFailed(f"no ledger at {path}: run `aiorch ledger sync` first")
    connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        reader = _Reader()
        connection.set_authorizer(reader)
        try:
            cursor = connection.execute(sql)
            rows = [tuple(row) for row in cursor.fetchall()]
        except sqlite3.DatabaseError as err:
            if reader.refused or getattr(err, "sqlite_errorname", "") in _REFUSALS:
                raise NotReadOnly(f"refused: the ledger is read-only here ({err})") from None
            raise QueryFailed(str(err)) from None
        except sqlite3.ProgrammingError as err:
            raise QueryFailed(str(err)) from None
        columns = [column[0] for column in cursor.description or ()]
    finally:
        connection.close()
    return Answer(columns, rows)


def _postgresql(url: str, sql: str) -> Answer:
    engine = engine_for(url)
    raw: Any = engine.raw_connection()
    try:
        connection = raw.driver_connection
        connection.read_only = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, prepare=True)
                columns = [column.name for column in cursor.description or ()]
                rows = [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        except psycopg.errors.ReadOnlySqlTransaction as err:
            raise NotReadOnly(f"refused: the ledger is read-only here ({err})") from None
        except psycopg.Error as err:
            raise QueryFailed(
                str(err).splitlines()[0] if str(err) else type(err).__name__
            ) from None
        finally:
            connection.rollback()
    finally:
        raw.close()
        engine.dispose()
    return Answer(columns, rows)


def read_only(url: str, sql: str) -> Answer:
    """Run ``sql`` (one statement) on the ledger at ``url``, unable to change it.

    Raises:
        NotReadOnly: the statement would write, or set something.
        QueryFailed: it did not run.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise QueryFailed("LEDGER_URL names no SQLite file")
        return _sqlite(parsed.database, sql)
    if parsed.get_backend_name() == "postgresql":
        return _postgresql(url, sql)
    raise QueryFailed(f"the ledger keeps to SQLite and PostgreSQL, not {parsed.get_backend_name()}")


def as_text(value: object) -> str:
    """A cell as a table or CSV shows it (NULL: empty)."""
    return "" if value is None else str(value)


def rows_as_dicts(answer: Answer) -> Sequence[dict[str, Any]]:
    """The rows as objects, by column name (for JSON)."""
    return [dict(zip(answer.columns, row, strict=True)) for row in answer.rows]
