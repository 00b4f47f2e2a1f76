"""Before each LLM call: the run's and its tenant's budgets, then the model's shared capacity;
after it: settle the reservation, count the tenant's spend, pass on the provider's signals.

The shared state lives in the capacity store (``aiorch.runtime.capacity``, Redis); the rules of
this module decide what the LLM activity does with it:

- a call whose worst case (prompt estimate + reply limit, priced with ``LLM_PRICE_TABLE``)
  would cross the run's ceiling or its tenant's budget for today is not made
  (``over_budget``), unless an operator approved crossing it for this run;
- a call is made once its reservation is granted; a short wait (``INLINE_WAIT``) is waited
  here, a longer one goes back to the workflow, which waits in ``await_capacity`` on a timer
  (no activity slot held, no attempt spent) and asks again;
- if the store cannot be reached, calls go ahead without the shared limit and the tenant's
  daily budget (the run's own ceiling still holds; the provider's 429s still go to
  ``retry_llm``): a cache outage must not stop the pipeline. It is logged and counted
  (``aiorch_capacity_store_errors``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from temporalio import activity

from activities.pricing import estimate_cost
from aiorch.runtime.capacity import CapacityStore, CapacityStoreError, ProviderSignal, scope_name
from aiorch.runtime.config import PriceTable, RateLimits
from workflows.payloads import LlmCallInput

log = logging.getLogger(__name__)

# A wait this short is waited inside the activity: cheaper than a timer and a second activity.
INLINE_WAIT = timedelta(seconds=1)
METRIC_STORE_ERRORS = "aiorch_capacity_store_errors"
METRIC_CAPACITY_WAITS = "aiorch_capacity_waits"
METRIC_SPEND = "aiorch_spend_usd"
# Characters per token of the prompt estimate: an upper bound for English and code with the
# common BPE tokenizers (the store learns the real ratio from every settlement).
CHARS_PER_TOKEN = 3.0
TOKENS_PER_MESSAGE = 4


def estimate_prompt_tokens(messages: Sequence[Any]) -> int:
    """A generous estimate of a chat prompt's tokens, without the provider's tokenizer."""
    total = 0
    for message in messages:
        content = message.get("content", "") if isinstance(message, dict) else ""
        total += TOKENS_PER_MESSAGE + math.ceil(len(str(content)) / CHARS_PER_TOKEN)
    return total


@dataclass(frozen=True)
class Admission:
    """What the gate decided for one call: ``go`` (with the hold to settle, if any),
    ``wait`` (for ``wait``), or ``over_budget`` (``budget`` says which and why)."""

    kind: str
    hold: str | None = None
    scope: str | None = None
    limits: tuple[int, int] = (0, 0)
    wait: timedelta | None = None
    budget: str | None = None


@dataclass(frozen=True)
class Settlement:
    """What one call came to, for settling it: the tokens it ``used``, whether the provider
    was ``called`` (reached), its rate-limit ``signal``, and its cost (None: unpriced)."""

    used: int
    called: bool
    signal: ProviderSignal
    cost_usd: float | None


class CallGate:
    """Budgets and shared capacity around the LLM activity's calls (see the module docstring)."""

    def __init__(
        self,
        store: CapacityStore | None,
        *,
        base_url: str,
        rate_limits: RateLimits,
        prices: PriceTable,
        tenant_budget: Callable[[str], float | None],
        max_output_tokens: int,
        inline_wait: timedelta = INLINE_WAIT,
    ) -> None:
        self._store = store
        self._base_url = base_url
        self._limits = rate_limits
        self._prices = prices
        self._tenant_budget = tenant_budget
        self._max_output_tokens = max_output_tokens
        self._inline_wait = inline_wait

    @property
    def max_output_tokens(self) -> int:
        """The reply limit every call is sent with (``max_tokens``)."""
        return self._max_output_tokens

    async def admit(self, call: LlmCallInput, messages: Sequence[Any]) -> Admission:
        """Decide whether ``call`` may be made now (see the module docstring)."""
        prompt = estimate_prompt_tokens(messages)
        over = await self._over_budget(call, prompt)
        if over is not None:
            return Admission("over_budget", budget=over)
        limit = self._limits.get(call.model)
        if self._store is None or limit is None:
            return Admission("go")
        scope = scope_name(self._base_url, call.model)
        limits = (limit.tpm or 0, limit.rpm or 0)
        tokens = prompt + self._max_output_tokens
        hold = f"{call.workflow_id}:{call.attempt}:{uuid.uuid4().hex[:8]}"
        waited = timedelta(0)
        while True:
            try:
                grant = await self._store.reserve(
                    scope, limits, hold_id=hold, member=call.workflow_id, tokens=tokens
                )
            except CapacityStoreError as err:
                self._store_down(err)
                return Admission("go")
            if grant.granted:
                return Admission("go", hold=hold, scope=scope, limits=limits)
            if waited + grant.wait > self._inline_wait:
                _count(METRIC_CAPACITY_WAITS, "Calls sent back to wait in await_capacity", call)
                return Admission("wait", wait=grant.wait)
            waited += grant.wait
            if activity.in_activity():
                activity.heartbeat(f"waiting {grant.wait.total_seconds():.2f}s for capacity")
            await asyncio.sleep(grant.wait.total_seconds())

    async def settle(self, admission: Admission, call: LlmCallInput, done: Settlement) -> None:
        """After the call: give back what the reservation did not use, pass on the provider's
        signal, and add the call's cost to the tenant's spend for today."""
        if self._store is None:
            return
        try:
            if admission.hold is not None and admission.scope is not None:
                await self._store.settle(
                    admission.scope,
                    admission.limits,
                    hold_id=admission.hold,
                    used=done.used,
                    called=done.called,
                )
            limit = self._limits.get(call.model)
            if limit is not None and not done.signal.empty:
                await self._store.feedback(
                    scope_name(self._base_url, call.model),
                    (limit.tpm or 0, limit.rpm or 0),
                    done.signal,
                )
            if done.cost_usd:
                await self._store.add_spend(call.tenant, today(), done.cost_usd)
        except CapacityStoreError as err:
            self._store_down(err)

    async def keep_alive(self, admission: Admission) -> None:
        """Renew the call's hold every third of a lease until cancelled (the call ended)."""
        if self._store is None or admission.hold is None or admission.scope is None:
            return
        every = self._store.lease.total_seconds() / 3
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(CapacityStoreError):
                await self._store.renew(admission.scope, admission.limits, hold_id=admission.hold)

    async def _over_budget(self, call: LlmCallInput, prompt_tokens: int) -> str | None:
        if call.budget_approved:
            return None
        worst = estimate_cost(self._prices, call.model, prompt_tokens, self._max_output_tokens)
        if worst is None:
            return None  # an unpriced model has no cost to hold against a budget
        if call.budget_usd is not None and call.spent_usd + worst > call.budget_usd:
            return (
                f"run budget: spent ${call.spent_usd:.4f} of ${call.budget_usd:.4f}; "
                f"the next call may cost up to ${worst:.4f}"
            )
        budget = self._tenant_budget(call.tenant)
        if budget is None or self._store is None:
            return None
        try:
            spent = await self._store.spend(call.tenant, today())
        except CapacityStoreError as err:
            self._store_down(err)
            return None
        if spent + worst > budget:
            return (
                f"tenant {call.tenant!r} daily budget: spent ${spent:.4f} of ${budget:.4f} "
                f"today; the next call may cost up to ${worst:.4f}"
            )
        return None

    def _store_down(self, err: CapacityStoreError) -> None:
        log.warning("%s; calling without the shared limit and tenant budgets", err)
        if activity.in_activity():
            activity.metric_meter().create_counter(
                METRIC_STORE_ERRORS, "Capacity store operations that failed (calls went ahead)"
            ).add(1)


def today() -> date:
    """The UTC day spend is counted in."""
    return datetime.now(UTC).date()


def _count(name: str, description: str, call: LlmCallInput) -> None:
    if activity.in_activity():
        activity.metric_meter().create_counter(name, description).add(1, {"model": call.model})


def record_spend(tenant: str, cost_usd: float, known_tenants: frozenset[str]) -> None:
    """Count a call's cost for its tenant (the label is ``other`` for a tenant without a
    budget of its own: tenants come from requests, and labels must stay few)."""
    label = tenant if tenant in known_tenants else "other"
    activity.metric_meter().create_histogram_float(
        METRIC_SPEND, "Cost of each LLM call by tenant (sum = spend), from LLM_PRICE_TABLE"
    ).record(cost_usd, {"tenant": label})
