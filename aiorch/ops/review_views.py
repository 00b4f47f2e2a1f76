"""What a reviewer reads of one run, wherever they read it (the inbox's run page, ``aiorch
review show``): the run's own answer to the ``review_view`` query (built by its pipeline), the
feedback given in earlier rounds, and until when it waits.

Only a run of a pipeline this worker runs, on its task queue, is asked: a look-alike decides
what its queries answer (`read_run`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops import pipelines
from aiorch.ops.retries import retrying
from workflows import contract
from workflows.engine.graph import Event
from workflows.payloads import HistoryEntry, ReviewView


class RunUnreadable(Exception):
    """The run cannot be read or decoded here (the message says why, no content)."""


class NoSuchRun(Exception):
    """No run of a pipeline this worker runs holds that workflow id (or none at all)."""


def is_escalation(state: str) -> bool:
    """Whether waiting in ``state`` is a review's escalation (its second chance, from which
    the run is dead-lettered), not its first wait (a state a REVIEW_TIMEOUT leaves).

    Read from the pipelines as they are now, at the call: a module of the CLI imports this one,
    and a broken pipeline file must not stop every command at its import."""
    return not any(
        t.source == state and t.event == Event.REVIEW_TIMEOUT
        for graph in pipelines.graphs()
        for t in graph.transitions
    )


@dataclass(frozen=True)
class RunView:
    """One run in full, as a reviewer reads it."""

    workflow_id: str
    run_id: str
    view: ReviewView
    feedback: list[HistoryEntry] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Whether the run waits for a reviewer now."""
        return self.view.waiting

    @property
    def deadline(self) -> datetime | None:
        return self.view.deadline

    @property
    def escalated(self) -> bool:
        """Whether the wait is a review's escalation (from there it is dead-lettered)."""
        return is_escalation(self.view.state)


def time_left(deadline: datetime | None, now: datetime) -> str:
    """``deadline`` as a short human duration from ``now`` ("3 h 5 min", "overdue")."""
    if deadline is None:
        return "unknown"
    seconds = int((deadline - now).total_seconds())
    if seconds <= 0:
        return "due now"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def earlier_feedback(history: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """The reedit decisions that came with feedback, oldest first."""
    return [entry for entry in history if entry.event == Event.REEDIT and entry.feedback]


async def query_view(client: Client, workflow_id: str, run_id: str) -> ReviewView:
    """The run's answer to the ``review_view`` query (one billed action).

    Raises:
        RunUnreadable: its answer cannot be decoded here.
        temporalio.service.RPCError: Temporal refused or is unreachable.
    """
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        found: ReviewView = await retrying(
            lambda: handle.query(contract.QUERY_REVIEW_VIEW, result_type=ReviewView)
        )
    except RPCError:
        raise
    except Exception as err:  # the codec's and the converter's own errors
        raise RunUnreadable(
            f"the run cannot be read ({type(err).__name__}); does this reader have the "
            "worker's PAYLOAD_KEYS?"
        ) from None
    return found


async def read_run(client: Client, workflow_id: str) -> RunView:
    """The latest run under ``workflow_id`` in full, asked afresh.

    Raises:
        NoSuchRun: no run holds the id, or it is no run of a pipeline on this worker's task
            queue (a look-alike, never asked).
        RunUnreadable: its answer cannot be decoded here.
        temporalio.service.RPCError: Temporal is unreachable.
    """
    try:
        description = await retrying(client.get_workflow_handle(workflow_id).describe)
    except RPCError as err:
        if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise NoSuchRun(workflow_id) from None
        raise
    if (
        description.task_queue != pipelines.task_queue()
        or pipelines.of_type(description.workflow_type) is None
    ):
        raise NoSuchRun(workflow_id)
    view = await query_view(client, workflow_id, description.run_id)
    return RunView(
        workflow_id=workflow_id,
        run_id=description.run_id,
        view=view,
        feedback=earlier_feedback(view.history),
    )
