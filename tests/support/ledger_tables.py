"""Reading a ledger's tables whole, to show that a second sync changed nothing."""

from __future__ import annotations

import hashlib

from sqlalchemy import Engine, select

from aiorch.ops.ledger import _schema as schema


def contents(engine: Engine) -> tuple[dict[str, int], str]:
    """Each projected table's row count, and a digest of every row, in key order."""
    digest = hashlib.sha256()
    counts = {}
    with engine.connect() as connection:
        for table in schema.PROJECTED:
            rows = connection.execute(select(table).order_by(*table.primary_key.columns)).all()
            counts[table.name] = len(rows)
            digest.update(repr(rows).encode())
    return counts, digest.hexdigest()
