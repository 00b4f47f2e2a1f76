"""Reading a run's event history in tests: what the server recorded, not what the run reports."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from workflows import errors


def activity_types(history: Any) -> list[str]:
    """The activity types the server scheduled for a run (``WorkflowHistory``), in order; local
    activities are markers, so they are not among them."""
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def scheduled_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """``activity_types`` of the run's history as the server holds it now."""
    return activity_types(await handle.fetch_history())


async def refused_at_once(
    failure: WorkflowFailureError, handle: WorkflowHandle[Any, Any], *, local_activities: int = 0
) -> str:
    """The message of the run's ``failure``, checked to be a non-retryable InvalidRequest that
    ended the run without a failed workflow task or a scheduled activity, and with exactly
    ``local_activities`` local ones (a start of a type no pipeline written in Python has asks
    the worker's pipeline folder once)."""
    cause = failure.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert (cause.type, cause.non_retryable) == (errors.INVALID_REQUEST, True)
    history = [event.event_type for event in (await handle.fetch_history()).events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in history
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in history
    assert history.count(EventType.EVENT_TYPE_MARKER_RECORDED) == local_activities
    assert history[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    return cause.message


def timer_summaries(history: Any, converter: DataConverter) -> list[str | None]:
    """The summary each timer the run started shows in the Web UI (None: it has none), in
    order, decoded with the client's ``converter``."""
    return [
        converter.payload_converter.from_payload(event.user_metadata.summary, str)
        if event.user_metadata.HasField("summary")
        else None
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
