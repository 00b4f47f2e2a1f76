"""Filling the ledger from Temporal: ``sync`` once, ``follow`` as a loop.

A sync lists the project's runs from visibility (`aiorch.ops.visibility.runs_query`): every
open run, and every run that closed since the watermark (less `VISIBILITY_LAG`, since
visibility shows a close a moment after it happened). It reads the history of each one whose
history grew since the ledger stored it (`aiorch.ops.ledger._changes`: a closed run's event
count comes with the listing, an open run's from a describe), ``CONCURRENCY`` at a time,
projects it (`aiorch.ops.ledger._projection.project`) and upserts its rows by their natural
keys: one writer, several runs per transaction (a run's rows never split across two). So a
sync repeated changes nothing and reads no history, and one after downtime catches up from
the watermark. The watermark then moves to the moment the sync
began, or to the close of the earliest run it could not read, so that run is tried again.

Reading histories and listing runs are not billable actions: the ledger adds none to a run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection, Engine, Table, select
from sqlalchemy.dialects import postgresql, sqlite
from temporalio.client import Client, RPCTimeoutOrCancelledError, WorkflowExecution
from temporalio.service import RPCError

from aiorch.ops import visibility
from aiorch.ops.ledger import _schema as schema
from aiorch.ops.ledger._changes import changed, stored
from aiorch.ops.ledger._projection import Projection, project
from aiorch.ops.results import run_converter
from aiorch.ops.retries import retrying

VISIBILITY_LAG: Final = timedelta(seconds=60)
WATERMARK: Final = "watermark"
CONCURRENCY: Final = 8
WRITE_BATCH: Final = 200
FOLLOW_READY_LINE: Final = "ledger follow started"
"""What ``ledger follow`` prints (stderr) once it runs, before its first sync."""


@dataclass(frozen=True)
class SyncReport:
    """What one sync did: runs listed, projected (read and written) and skipped (held as they
    are), the runs it could not read (run id: why), and the watermark it left."""

    listed: int
    projected: int
    skipped: int
    watermark: datetime
    failed: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the operator."""
        text = f"{self.listed} run(s) listed: {self.projected} projected, {self.skipped} unchanged"
        if self.failed:
            text += f", {len(self.failed)} unreadable"
        return f"{text}; watermark {self.watermark.isoformat()}"


def upsert(connection: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table``, or update the row that holds the same primary key."""
    if not rows:
        return
    dialect = connection.dialect.name
    if dialect == "sqlite":
        statement: Any = sqlite.insert(table)
    elif dialect == "postgresql":
        statement = postgresql.insert(table)
    else:
        raise ValueError(f"the ledger keeps to SQLite and PostgreSQL, not {dialect}")
    keys = [column.name for column in table.primary_key.columns]
    changes = {c.name: statement.excluded[c.name] for c in table.columns if c.name not in keys}
    # PostgreSQL refuses one statement that updates a row twice: the last row of a key wins,
    # as it would statement by statement.
    unique = list({tuple(row[key] for key in keys): row for row in rows}.values())
    connection.execute(statement.on_conflict_do_update(index_elements=keys, set_=changes), unique)


def write(engine: Engine, projection: Projection) -> None:
    """A run's rows, in one transaction."""
    write_many(engine, [projection])


def write_many(engine: Engine, projections: Sequence[Projection]) -> None:
    """Several runs' rows, in one transaction: one statement per table, not per run, so a
    sync of many runs pays for few commits (each one a disk sync in SQLite)."""
    with engine.begin() as connection:
        upsert(connection, schema.runs, [p.run for p in projections])
        upsert(connection, schema.transitions, [r for p in projections for r in p.transitions])
        upsert(connection, schema.model_calls, [r for p in projections for r in p.model_calls])
        upsert(
            connection,
            schema.review_decisions,
            [r for p in projections for r in p.review_decisions],
        )
        upsert(connection, schema.corrections, [r for p in projections for r in p.corrections])


async def _write_from(queue: asyncio.Queue[Projection | None], engine: Engine) -> None:
    """Write what ``queue`` brings until it brings None: whatever has queued up while the last
    transaction ran, at most `WRITE_BATCH` runs, goes in the next one. One writer: SQLite
    takes one at a time, and no run waits for a commit of its own."""
    done = False
    while not done:
        batch: list[Projection] = []
        item = await queue.get()
        while item is not None:
            batch.append(item)
            if len(batch) >= WRITE_BATCH or queue.empty():
                break
            item = queue.get_nowait()
        done = item is None
        if batch:
            await asyncio.to_thread(write_many, engine, batch)


def watermark(engine: Engine) -> datetime | None:
    """Where the last sync left off (None: the ledger has never synced)."""
    with engine.connect() as connection:
        found = connection.execute(
            select(schema.sync_state.c.value).where(schema.sync_state.c.name == WATERMARK)
        ).scalar()
    return datetime.fromisoformat(found) if found else None


def listing_query(since: datetime | None) -> str:
    """The visibility query of a sync from watermark ``since`` (None: every run)."""
    if since is None:
        return visibility.runs_query()
    at = visibility.visibility_time(since - VISIBILITY_LAG)
    return visibility.runs_query(f"(CloseTime >= '{at}' OR {visibility.OPEN})")


async def read_run(client: Client, execution: WorkflowExecution) -> Projection:
    """The projection of one listed run, from its history as the server holds it now.

    Raises:
        temporalio.service.RPCError: the server failed (after retries).
        Exception: the codec's or the converter's errors (this reader lacks the keys).
    """
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    history = await retrying(handle.fetch_history)
    converter = run_converter(client, execution.id)
    return await project(execution.id, execution.run_id, history.events, converter)


async def sync(client: Client, engine: Engine, *, concurrency: int = CONCURRENCY) -> SyncReport:
    """Bring the ledger up to date once (see the module doc).

    Raises:
        temporalio.service.RPCError: listing the runs failed.
    """
    began = datetime.now(UTC)
    since = watermark(engine)
    executions = [e async for e in client.list_workflows(listing_query(since))]
    gate = asyncio.Semaphore(concurrency)
    held = await asyncio.to_thread(stored, engine, (e.run_id for e in executions))
    stale = await changed(client, executions, held, gate)
    queue: asyncio.Queue[Projection | None] = asyncio.Queue()
    writer = asyncio.create_task(_write_from(queue, engine))
    failed: dict[str, str] = {}
    retry_from = began

    async def one(execution: WorkflowExecution) -> None:
        nonlocal retry_from
        async with gate:
            try:
                projection = await read_run(client, execution)
            except Exception as err:  # one unreadable run must not stop the others
                failed[execution.run_id] = f"{execution.id}: {type(err).__name__}: {err}"[:300]
                closed = execution.close_time or began
                retry_from = min(retry_from, closed + VISIBILITY_LAG)
                return
        queue.put_nowait(projection)

    try:
        await asyncio.gather(*(one(execution) for execution in stale))
    finally:
        queue.put_nowait(None)
        await writer
    with engine.begin() as connection:
        upsert(
            connection, schema.sync_state, [{"name": WATERMARK, "value": retry_from.isoformat()}]
        )
    return SyncReport(
        listed=len(executions),
        projected=len(stale) - len(failed),
        skipped=len(executions) - len(stale),
        watermark=retry_from,
        failed=failed,
    )


async def follow(
    client: Client,
    engine: Engine,
    *,
    interval: timedelta,
    stop: asyncio.Event,
    each: Callable[[SyncReport | Exception], None],
) -> int:
    """Sync every ``interval`` until ``stop`` is set (a sync under way finishes first);
    returns the number of syncs. Each sync's report goes to ``each``, and so does a sync that
    failed on the server (unreachable, say), which is tried again at the next interval."""
    done = 0
    while not stop.is_set():
        outcome: SyncReport | Exception
        try:
            outcome = await sync(client, engine)
        except (RPCError, RPCTimeoutOrCancelledError) as err:
            outcome = err
        done += 1
        each(outcome)
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval.total_seconds())
        except TimeoutError:
            continue
    return done
