"""Which of the runs a sync listed it must read again: those whose history grew since the
ledger stored them.

A closed run's event count comes with the listing (visibility records it at the close). An open
run's does not: visibility reports 0 events for a run until it closes, so the count of an open
run the ledger already holds is asked of the server with one ``DescribeWorkflowExecution``
(a read of the run's current state, not of its history, and no billable action); the run is
read again only when that count differs from the stored one. A run the ledger does not hold is
always read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Engine, select
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from aiorch.ops.ledger import _schema as schema
from aiorch.ops.retries import retrying

# Run ids per ``IN (...)`` lookup: well under SQLite's and PostgreSQL's parameter limits.
LOOKUP_CHUNK: Final = 500
RUNNING: Final = "running"


@dataclass(frozen=True)
class Stored:
    """What the ledger holds of a run: how Temporal had closed it (or ``running``) and the
    number of events it was projected from."""

    status: str
    history_length: int


def stored(engine: Engine, run_ids: Iterable[str]) -> dict[str, Stored]:
    """The stored status and event count of each of ``run_ids`` the ledger holds: a lookup by
    key of the listed runs only, so a sync's cost does not grow with the ledger's size."""
    ids = list(run_ids)
    runs = schema.runs
    found: dict[str, Stored] = {}
    with engine.connect() as connection:
        for start in range(0, len(ids), LOOKUP_CHUNK):
            chunk = ids[start : start + LOOKUP_CHUNK]
            rows = connection.execute(
                select(runs.c.run_id, runs.c.status, runs.c.history_length).where(
                    runs.c.run_id.in_(chunk)
                )
            )
            found.update({run_id: Stored(status, length) for run_id, status, length in rows})
    return found


def _is_open(execution: WorkflowExecution) -> bool:
    return execution.status == WorkflowExecutionStatus.RUNNING


async def _current_length(client: Client, execution: WorkflowExecution) -> int | None:
    """An open run's event count now (None: the server could not say; the run is read)."""
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    try:
        description = await retrying(handle.describe)
    except RPCError:
        return None
    return description.history_length


async def changed(
    client: Client,
    executions: Sequence[WorkflowExecution],
    held: dict[str, Stored],
    gate: asyncio.Semaphore,
) -> list[WorkflowExecution]:
    """The runs of ``executions`` whose history differs from what ``held`` records (see the
    module doc), in the order listed; describes run ``gate`` at a time."""

    async def differs(execution: WorkflowExecution) -> bool:
        known = held.get(execution.run_id)
        if known is None:
            return True
        if not _is_open(execution):
            return known.status == RUNNING or known.history_length != execution.history_length
        async with gate:
            length = await _current_length(client, execution)
        return length is None or length != known.history_length

    verdicts = await asyncio.gather(*(differs(execution) for execution in executions))
    return [execution for execution, stale in zip(executions, verdicts, strict=True) if stale]
