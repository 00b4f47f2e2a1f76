"""What the capacity gate (``activities.capacity``) counts, per model and tenant: waits sent back
to the workflow, store errors, each tenant's tokens through a rate-limited model (its share
used), how long its calls were queued for one (docs/capacity.md#fair-share) and its calls that
spilled over to the batch lane instead (docs/capacity.md#spill-over-to-the-batch-lane).

Recorded on the activity's metric meter, so outside an activity (a test driving the gate
directly) nothing is recorded. Tenants come from requests and labels must stay few: a tenant
the operator's settings do not name is labelled ``other`` (`tenant_label`).
"""

from __future__ import annotations

from collections.abc import Set
from datetime import timedelta
from typing import Final

from temporalio import activity

from workflows.payloads import DEFAULT_TENANT, LlmCallInput

METRIC_STORE_ERRORS: Final = "aiorch_capacity_store_errors"
METRIC_CAPACITY_WAITS: Final = "aiorch_capacity_waits"
METRIC_TENANT_TOKENS: Final = "aiorch_capacity_tenant_tokens"
METRIC_QUEUE_WAIT: Final = "aiorch_capacity_queue_wait"
METRIC_SPILL_OVERS: Final = "aiorch_capacity_spill_overs"


def tenant_label(tenant: str, named: Set[str]) -> str:
    """``tenant`` as a metric label: itself when the operator's settings name it (or it is
    the runs' without one), else ``other``."""
    return tenant if tenant in named or tenant == DEFAULT_TENANT else "other"


def count_wait(call: LlmCallInput) -> None:
    """A call was sent back to wait in ``await_capacity``."""
    if activity.in_activity():
        activity.metric_meter().create_counter(
            METRIC_CAPACITY_WAITS, "Calls sent back to wait in await_capacity"
        ).add(1, {"model": call.model})


def count_store_error() -> None:
    """A capacity store operation failed."""
    if activity.in_activity():
        activity.metric_meter().create_counter(
            METRIC_STORE_ERRORS, "Capacity store operations that failed"
        ).add(1)


def record_queue_wait(call: LlmCallInput, queued_for: timedelta, named: Set[str]) -> None:
    """A call was granted after ``queued_for`` in its model's queue (over every time its run
    came back)."""
    if activity.in_activity():
        labels = {"model": call.model, "tenant": tenant_label(call.tenant, named)}
        activity.metric_meter().create_histogram_float(
            METRIC_QUEUE_WAIT, "How long calls were queued for a rate-limited model", "s"
        ).record(queued_for.total_seconds(), labels)


def count_tenant_tokens(call: LlmCallInput, used: int, named: Set[str]) -> None:
    """A call through a rate-limited model used ``used`` tokens of its tenant's share."""
    if activity.in_activity() and used > 0:
        labels = {"model": call.model, "tenant": tenant_label(call.tenant, named)}
        activity.metric_meter().create_counter(
            METRIC_TENANT_TOKENS, "Tokens each tenant's calls used of rate-limited models"
        ).add(used, labels)


def count_spill_over(call: LlmCallInput, named: Set[str]) -> None:
    """A call spilled over to the batch lane instead of queueing for its model."""
    if activity.in_activity():
        labels = {"model": call.model, "tenant": tenant_label(call.tenant, named)}
        activity.metric_meter().create_counter(
            METRIC_SPILL_OVERS, "Calls that took the batch lane instead of queueing (spill-over)"
        ).add(1, labels)
