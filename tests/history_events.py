"""Reading a run's event history in tests: what the server recorded, not what the run reports."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle


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
