"""The document store's ``documents`` table: its columns, its rows, and bringing a table that an
earlier release created up to date.

Each row belongs to the run chain that wrote it first: ``workflow_id`` and ``chain_id`` (the
chain's first run id, which continue-as-new keeps), with that chain's ``tenant`` and
``requested_by``. A write from another chain under the same request id (a reused id after the
first run closed, a run of another pipeline, another tenant's) never replaces the row.

The owner columns came after the table: a table without them gets them added (``ALTER TABLE ...
ADD COLUMN``, nullable, so it is quick and safe on a live table), and its old rows keep NULL
owners, which no chain matches: they are never replaced. A table that lacks any other column is
of another shape and refused for good.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    MetaData,
    Table,
    Text,
    inspect,
    text,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from workflows.steps.document_payloads import Problem

TABLE_NAME: Final = "documents"
# The columns that say who owns a row; added to tables created before rows had owners.
OWNER_COLUMNS: Final = ("workflow_id", "chain_id", "tenant", "requested_by")

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
    *(Column(name, Text, nullable=True) for name in OWNER_COLUMNS),
)


class StoredDocument(BaseModel):
    """A row of the ``documents`` table (owner columns None: written before rows had owners)."""

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
    workflow_id: str | None = None
    chain_id: str | None = None
    tenant: str | None = None
    requested_by: str | None = None


class TableOfAnotherShape(Exception):
    """The ``documents`` table lacks columns (``missing``) that the store does not add."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(", ".join(missing))
        self.missing = missing


def prepare(engine: Engine) -> None:
    """Create the table when it is missing, and add the owner columns when it lacks them.

    Several workers may do this at once: a create or an add that another worker did first
    fails, and what the table then holds decides.

    Raises:
        TableOfAnotherShape: the table lacks columns other than the owner columns.
        sqlalchemy.exc.SQLAlchemyError: the database failed.
    """
    try:
        METADATA.create_all(engine, checkfirst=True)
    except sa_exc.DatabaseError:
        if not inspect(engine).has_table(TABLE_NAME):
            raise
    missing = _missing(engine)
    foreign = [name for name in missing if name not in OWNER_COLUMNS]
    if foreign:
        raise TableOfAnotherShape(foreign)
    for name in missing:
        try:
            with engine.begin() as connection:
                # The name is one of OWNER_COLUMNS, never input.
                connection.execute(text(f"ALTER TABLE {TABLE_NAME} ADD COLUMN {name} TEXT"))
        except sa_exc.DatabaseError:
            if name in _missing(engine):
                raise


def _missing(engine: Engine) -> list[str]:
    present = {column["name"] for column in inspect(engine).get_columns(TABLE_NAME)}
    return sorted(set(DOCUMENTS.columns.keys()) - present)
