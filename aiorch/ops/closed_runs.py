"""A closed run's status as Temporal has it.

The ``status`` query also answers for a closed run: Temporal replays the run to answer it, and
the run says what its own state held. A run that closed where its state never got to an end
(its input refused or its pipeline file broken when it started, terminated, timed out, or
failed in a workflow task) would say ``idle, Pending, 0%`` while Temporal, the Web UI and
``result`` say Failed. `as_closed` puts the end Temporal recorded, and its message, in place;
`end_state` does the same for a state read from visibility (``list``).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from aiorch.ops.retries import retrying
from workflows.engine.graph import CANCELLED, END_INFOS, FAILED, TERMINAL_STATES
from workflows.payloads import RunStatus

# The run's end state for each way Temporal closes a run the run's own state did not end.
ENDS = MappingProxyType(
    {
        WorkflowExecutionStatus.FAILED: FAILED,
        WorkflowExecutionStatus.TERMINATED: FAILED,
        WorkflowExecutionStatus.TIMED_OUT: FAILED,
        WorkflowExecutionStatus.CANCELED: CANCELLED,
    }
)


def end_state(state: str | None, status: WorkflowExecutionStatus | None) -> str | None:
    """The run's state as its reads should show it: ``state`` (what the run published or
    answered), unless Temporal closed the run before that reached an end state, then the end
    of `ENDS` for how it closed."""
    if state in TERMINAL_STATES or status is None:
        return state
    return ENDS.get(status, state)


def close_reason(error: WorkflowFailureError) -> str:
    """One line for why a run closed: its error's type (for an application error) and message,
    as ``result`` says it."""
    cause: Any = error.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(error)


async def as_closed(client: Client, workflow_id: str, status: RunStatus) -> RunStatus:
    """``status`` (the run's query answer), with the end Temporal recorded when the run closed
    short of an end state: its state, status, progress, and the close's reason as
    ``last_error``.

    Raises:
        temporalio.service.RPCError: no such run, or the server is unreachable.
    """
    if status.state in TERMINAL_STATES:
        return status
    handle = client.get_workflow_handle(workflow_id)
    described = await retrying(handle.describe)
    end = end_state(status.state, described.status)
    if end is None or end == status.state:
        return status
    try:
        await retrying(handle.result)
    except WorkflowFailureError as error:
        reason: str | None = close_reason(error)
    else:
        reason = None
    info = END_INFOS[end]
    return status.model_copy(
        update={
            "state": end,
            "status": info.status.value,
            "progress": info.progress,
            "last_error": reason or status.last_error,
        }
    )
