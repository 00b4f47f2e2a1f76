"""Filling the ledger from Temporal: ``sync`` once, ``follow`` as a loop.

A sync lists the project's runs from visibility (`aiorch.ops.visibility.runs_query`): every
open run, and every run that closed since the watermark (less `VISIBILITY_LAG`, since
visibility shows a close a moment after it happened). It reads the history of each one the
ledger does not already hold as it is (a closed run whose stored event count equals the one
visibility reports is skipped; an open run is read again), projects it
(`aiorch.ops.ledger._projection.project`) and upserts its rows by their natural keys, one run
per transaction. So a sync repeated changes nothing, and one after downtime catches up from the
watermark. The watermark then moves to the moment the sync began, or to the close of the
earliest run it could not read, so that run is tried again.

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
from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecution,
    WorkflowExecutionStatus,
)
from temporalio.service import RPCError

from aiorch.ops import visibility
from aiorch.ops.ledger import _schema as schema
from aiorch.ops.ledger._projection import Projection, project
from aiorch.ops.results import run_converter
from aiorch.ops.retries import retrying

VISIBILITY_LAG: Final = timedelta(seconds=60)
WATERMARK: Final = "watermark"
CONCURRENCY: Final = 8


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
    connection.execute(statement.on_conflict_do_update(index_elements=keys, set_=changes), rows)


def write(engine: Engine, projection: Projection) -> None:
    """A run's rows, in one transaction."""
    with engine.begin() as connection:
        upsert(connection, schema.runs, [projection.run])
        upsert(connection, schema.transitions, projection.transitions)
        upsert(connection, schema.model_calls, projection.model_calls)
        upsert(connection, schema.review_decisions, projection.review_decisions)
        upsert(connection, schema.corrections, projection.corrections)


def watermark(engine: Engine) -> datetime | None:
    """Where the last sync left off (None: the ledger has never synced)."""
    with engine.connect() as connection:
        found = connection.execute(
            select(schema.sync_state.c.value).where(schema.sync_state.c.name == WATERMARK)
        ).scalar()
    return datetime.fromisoformat(found) if found else None


def _held(engine: Engine) -> dict[str, tuple[str, int]]:
    """Each stored run's Temporal status and event count, by run id."""
    runs = schema.runs
    with engine.connect() as connection:
        rows = connection.execute(select(runs.c.run_id, runs.c.status, runs.c.history_length))
        return {run_id: (status, length) for run_id, status, length in rows}


def listing_query(since: datetime | None) -> str:
    """The visibility query of a sync from watermark ``since`` (None: every run)."""
    if since is None:
        return visibility.runs_query()
    at = visibility.visibility_time(since - VISIBILITY_LAG)
    return visibility.runs_query(f"(CloseTime >= '{at}' OR {visibility.OPEN})")


def _unchanged(execution: WorkflowExecution, held: dict[str, tuple[str, int]]) -> bool:
    stored = held.get(execution.run_id)
    return (
        stored is not None
        and stored[0] != "running"
        and execution.status != WorkflowExecutionStatus.RUNNING
        and stored[1] == execution.history_length
    )


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
    held = _held(engine)
    stale = [e for e in executions if not _unchanged(e, held)]
    gate = asyncio.Semaphore(concurrency)
    # One writer at a time: SQLite takes one, and a run's rows go in one transaction anyway.
    writing = asyncio.Lock()
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
        async with writing:
            await asyncio.to_thread(write, engine, projection)

    await asyncio.gather(*(one(execution) for execution in stale))
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
