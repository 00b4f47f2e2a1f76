"""Stuck runs: the open runs that have sat in one state too long, and bulk actions on them.

Everything is read from visibility (`aiorch.ops.visibility`), so no worker is needed to look.
The bulk actions are the ones an operator reaches for after an incident like "1,200 runs stuck
waiting for review":

- ``timeout``: the ``expire_review`` signal ends the current review wait as its timeout would
  (``await_review`` -> ``escalate``, ``escalate`` -> ``dead_letter``);
- ``dead-letter``: the ``dead_letter`` signal times out every review wait at once, so the run
  dead-letters through its normal ``escalate`` path and sends its dead-letter message;
- ``cancel``: Temporal cancellation; the run compensates and ends ``cancelled``.

The two signals act only on runs in a review state (the workflow ignores them elsewhere), so
runs in other states are skipped, and reported as such.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops import pipelines, visibility
from workflows import contract
from workflows.payloads import OperatorRequest


class StuckAction(StrEnum):
    """What to do with the stuck runs found."""

    NONE = "none"
    TIMEOUT = "timeout"
    CANCEL = "cancel"
    DEAD_LETTER = "dead-letter"


def action_states(action: StuckAction) -> frozenset[str] | None:
    """The states ``action`` can act on (any pipeline's, pipeline files' too); None = any."""
    if action in (StuckAction.TIMEOUT, StuckAction.DEAD_LETTER):
        return pipelines.review_states()
    return None if action == StuckAction.CANCEL else frozenset()


def stuck_query(cutoff: datetime, state: str | None = None) -> str:
    """Open runs that entered their current state before ``cutoff`` (or never left idle)."""
    return visibility.runs_query(
        visibility.OPEN,
        visibility.since_before(cutoff),
        visibility.state_is(state) if state is not None else "",
    )


@dataclass(frozen=True)
class StuckRun:
    """An open run and how long it has been in its state."""

    workflow_id: str
    state: str | None
    since: datetime

    def age(self, now: datetime) -> timedelta:
        return now - self.since


def stuck_run(execution: WorkflowExecution) -> StuckRun:
    return StuckRun(
        workflow_id=execution.id,
        state=visibility.state_of(execution),
        since=visibility.since_of(execution),
    )


async def find_stuck(
    client: Client,
    cutoff: datetime,
    *,
    state: str | None = None,
    limit: int | None = None,
) -> list[StuckRun]:
    """Open runs that entered their state before ``cutoff``, oldest first."""
    runs = [
        stuck_run(execution)
        async for execution in client.list_workflows(stuck_query(cutoff, state), limit=limit)
    ]
    return sorted(runs, key=lambda run: run.since)


def applies(action: StuckAction, run: StuckRun) -> bool:
    """Whether ``action`` can act on ``run`` in its current state."""
    states = action_states(action)
    return states is None or run.state in states


@dataclass
class ActionReport:
    """What a bulk action did, run by run."""

    action: StuckAction
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


async def apply_action(
    client: Client,
    runs: Sequence[StuckRun],
    action: StuckAction,
    *,
    operator: str = "starter.py stuck",
    reason: str | None = None,
    on_progress: Callable[[StuckRun], None] | None = None,
    concurrency: int = 20,
) -> ActionReport:
    """Apply ``action`` to every run it applies to, ``concurrency`` at a time.

    Runs are addressed by workflow id (their latest run). A run that closed meanwhile lands in
    ``failed`` with the server's reason; the others are unaffected.
    """
    report = ActionReport(action)
    gate = asyncio.Semaphore(concurrency)
    payload = OperatorRequest(operator=operator, reason=reason)

    async def one(run: StuckRun) -> None:
        async with gate:
            try:
                if not applies(action, run) or action is StuckAction.NONE:
                    report.skipped.append(run.workflow_id)
                    return
                handle = client.get_workflow_handle(run.workflow_id)
                if action is StuckAction.CANCEL:
                    await handle.cancel()
                else:
                    signal = (
                        contract.SIGNAL_EXPIRE_REVIEW
                        if action is StuckAction.TIMEOUT
                        else contract.SIGNAL_DEAD_LETTER
                    )
                    await handle.signal(signal, payload)
                report.done.append(run.workflow_id)
            except RPCError as error:
                gone = error.status == RPCStatusCode.NOT_FOUND
                report.failed[run.workflow_id] = "run is closed" if gone else error.message
            finally:
                if on_progress is not None:
                    on_progress(run)

    await asyncio.gather(*(one(run) for run in runs))
    return report
