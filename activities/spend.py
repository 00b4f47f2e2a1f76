"""A model call's spend: the reservation of its tenant's budget it settles (``SpendHold``),
how long a batched call holds it, the key a call is settled once by, the UTC day spend is
counted in, and the spend metric."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from temporalio import activity

from activities.capacity_metrics import tenant_label
from workflows import contract
from workflows.payloads import LlmCallInput

METRIC_SPEND = "aiorch_spend_usd"


@dataclass(frozen=True)
class SpendHold:
    """A reservation of a tenant's budget for one call, to settle with its cost."""

    tenant: str
    day: date
    reservation: str


# A batched call's spend reservation is held from its admission until its batch answers: its
# wait in the group and the submission, then up to LLM_BATCH_WAIT_S.
BATCH_QUEUE_ALLOWANCE = timedelta(hours=2)


def batch_lease(call: LlmCallInput) -> timedelta:
    """How long a batched call's spend reservation is held before it is charged in full."""
    return timedelta(seconds=call.batch_wait_s) + BATCH_QUEUE_ALLOWANCE


def call_key(call: LlmCallInput) -> str:
    """Stable per (run chain, state, attempt): what the provider dedupes a re-sent call by
    (``Idempotency-Key``), what its spend is settled once by, and the name of a batched
    call."""
    run = f"{call.workflow_id}/{call.chain_id}" if call.chain_id else call.workflow_id
    return f"{run}:{contract.ACTIVITY_INVOKE_LLM}:{call.attempt}"


def today() -> date:
    """The UTC day spend is counted in."""
    return datetime.now(UTC).date()


def record_spend(tenant: str, cost_usd: float, known_tenants: frozenset[str]) -> None:
    """Count a call's cost for its tenant (the label is ``other`` for a tenant without a
    budget of its own: tenants come from requests, and labels must stay few)."""
    activity.metric_meter().create_histogram_float(
        METRIC_SPEND, "Cost of each LLM call by tenant (sum = spend), from LLM_PRICE_TABLE"
    ).record(cost_usd, {"tenant": tenant_label(tenant, known_tenants)})
