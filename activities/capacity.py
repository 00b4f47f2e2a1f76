"""Before each LLM call: the run's and its tenant's budgets, then the model's shared capacity;
after it: settle the reservations, count the tenant's spend, pass on the provider's signals.

The shared state lives in the capacity store (``aiorch_runtime.capacity``, Redis); the rules of
this module decide what the LLM activity does with it (a prompt's tokens are counted by
``activities.prompt_tokens``, a call's spend reservation and settlement key are
``activities.spend``'s):

- a call whose reservation (prompt estimate + reply limit) is more than the model's tokens per
  minute can never be admitted: it fails for good (``LlmPromptTooLarge``) instead of queueing;
- a call reserves its worst case (the prompt's token bound + reply limit, priced with
  ``LLM_PRICE_TABLE``) against the run's ceiling and, atomically in the store, against its
  tenant's budget for today, and settles with what it cost. A call that would cross a budget
  is not made (``over_budget``), unless an operator approved crossing it for this run; one
  that only the reservations of calls in flight keep out waits (``wait``) and asks again;
- with tenant budgets on, a tenant without one is refused (``unbudgeted_tenant``; runs are
  refused at plan time, this catches runs planned before);
- a call is made once its capacity reservation is granted; a short wait (``INLINE_WAIT``) is
  waited here, a longer one goes back to the workflow, which waits in ``await_capacity`` on a
  timer (no activity slot held, no attempt spent) and asks again;
- if the store cannot be reached, calls go ahead without the shared rate limit (a cache
  outage must not stop the pipeline; the provider's 429s still go to ``retry_llm``), but never
  without a tenant's budget: a budgeted call then fails with the retryable
  ``BudgetStoreUnavailable``. Both are logged and counted (``aiorch_capacity_store_errors``);
- a call queued for a model waits in its tenant's fair share (``TENANT_WEIGHTS``), its run's
  priority first within it; what each tenant used and waited is counted
  (``activities.capacity_metrics``);
- a call through the provider's batch API (the batch lane) takes no capacity (providers limit
  batches apart) and holds its spend reservation until its batch answers (``batch_lease``); a
  spilled one gives back its place in the model's queue;
- a call's cost is settled once: the settlement names the call by its idempotency key, and a
  call settled before adds nothing (``Settlement.counted``), so its metrics are recorded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.budget_rules import over_run_budget, unbudgeted_tenant
from activities.capacity_metrics import (
    METRIC_CAPACITY_WAITS,
    METRIC_STORE_ERRORS,
    count_spill_over,
    count_store_error,
    count_tenant_tokens,
    count_wait,
    record_queue_wait,
)
from activities.pricing import estimate_cost
from activities.prompt_tokens import prompt_tokens
from activities.spend import SpendHold, batch_lease, call_key, today
from aiorch_runtime.capacity import (
    DEFAULT_PRIORITY,
    CapacityStore,
    CapacityStoreError,
    ProviderSignal,
)
from aiorch_runtime.capacity_keys import scope_name
from aiorch_runtime.config import PriceTable, RateLimits
from workflows import errors
from workflows.payloads import TENANT_PATTERN, LlmCallInput

__all__ = [
    "METRIC_CAPACITY_WAITS",
    "METRIC_STORE_ERRORS",
    "CallAdmission",
    "CallGate",
    "Settlement",
    "unbudgeted_tenant",
]

log = logging.getLogger(__name__)

# A wait this short is waited inside the activity: cheaper than a timer and a second activity.
INLINE_WAIT = timedelta(seconds=1)
# How long a call kept out only by the reservations of calls in flight waits before asking
# again (jittered by half either way, so the waiting runs do not come back together).
HELD_BUDGET_WAIT = timedelta(seconds=2)


@dataclass(frozen=True)
class CallAdmission:
    """What the gate decided for one call: ``go`` (with the capacity hold and the spend
    reservation to settle, if any), ``wait`` (for ``wait``), or ``over_budget`` (``budget``
    says which and why)."""

    kind: str
    hold: str | None = None
    scope: str | None = None
    limits: tuple[int, int] = (0, 0)
    wait: timedelta | None = None
    budget: str | None = None
    spend: SpendHold | None = None


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
        tenant_budgets_on: bool = False,
        tenant_weight: Callable[[str], float] = lambda _: 1.0,
        named_tenants: frozenset[str] = frozenset(),
        inline_wait: timedelta = INLINE_WAIT,
    ) -> None:
        self._store = store
        self._base_url = base_url
        self._limits = rate_limits
        self._prices = prices
        self._tenant_budget = tenant_budget
        self._tenant_weight = tenant_weight
        self._named = named_tenants
        self._budgets_on = tenant_budgets_on
        self._max_output_tokens = max_output_tokens
        self._inline_wait = inline_wait

    @property
    def max_output_tokens(self) -> int:
        """The reply limit every call is sent with (``max_tokens``)."""
        return self._max_output_tokens

    async def admit(self, call: LlmCallInput, messages: Sequence[Any]) -> CallAdmission:
        """Decide whether ``call`` may be made now (see the module docstring).

        Raises:
            ApplicationError: ``LlmPromptTooLarge`` (permanent) when the call can never fit
                the model's tokens per minute; ``BudgetStoreUnavailable`` (retryable) when its
                tenant's budget cannot be checked; ``InvalidRequest`` (permanent) for a tenant
                that is not a tenant name.
        """
        if not re.fullmatch(TENANT_PATTERN, call.tenant):
            raise ApplicationError(
                "the call's tenant is not a tenant name",
                type=errors.INVALID_REQUEST,
                non_retryable=True,
            )
        tokens = prompt_tokens(messages)
        need = tokens.estimate + self._max_output_tokens
        limit = self._limits.get(call.model)
        # A batched call takes no capacity: providers limit batches apart.
        tpm = limit.tpm if limit is not None and call.lane != "batch" else None
        if tpm is not None and need > tpm:
            raise self._too_large(call, tokens.estimate, tpm, "LLM_RATE_LIMITS")
        spend: SpendHold | None = None
        if not call.budget_approved:
            worst = estimate_cost(
                self._prices, call.model, tokens.bound, self._max_output_tokens, lane=call.lane
            )
            refused = over_run_budget(call, worst)
            if refused is not None:
                return CallAdmission("over_budget", budget=refused)
            reserved = await self._reserve_spend(call, worst)
            if isinstance(reserved, CallAdmission):
                return reserved
            spend = reserved
        if call.lane == "batch":
            if call.spilled:
                await self._spill_over(call)
            return CallAdmission("go", spend=spend)
        granted = False
        try:
            admission = await self._reserve_capacity(call, need, tokens.estimate)
            granted = admission.kind == "go"
        finally:
            if spend is not None and not granted:
                await self.release(spend)
        return replace(admission, spend=spend)

    async def settle(self, admission: CallAdmission, call: LlmCallInput, done: Settlement) -> bool:
        """After the call: give back what the reservations did not use, pass on the provider's
        signal, and add the call's cost to the tenant's spend for today, once per call (its
        idempotency key, ``call_key``). Returns whether the cost was counted now: False when
        the call had been settled before (its metrics were recorded then); True without a
        store, or when the store could not be reached (the metrics are then the only
        record)."""
        if self._store is None:
            return True
        try:
            if admission.hold is not None and admission.scope is not None:
                await self._store.settle(
                    admission.scope,
                    admission.limits,
                    hold_id=admission.hold,
                    used=done.used,
                    called=done.called,
                    tenant=call.tenant,
                    day=today(),
                )
                count_tenant_tokens(call, done.used, self._named)
            limit = self._limits.get(call.model)
            if limit is not None and not done.signal.empty:
                await self._store.feedback(
                    scope_name(self._base_url, call.model),
                    (limit.tpm or 0, limit.rpm or 0),
                    done.signal,
                )
        except CapacityStoreError as err:
            self._store_error(err, "the shared limit may lag until the hold's lease runs out")
        return await self.settle_spend(admission.spend, call, done.cost_usd)

    async def settle_spend(
        self, hold: SpendHold | None, call: LlmCallInput, cost_usd: float | None
    ) -> bool:
        """Settle a call's spend reservation ``hold`` (None: it had none) with its cost, once
        per call (its idempotency key); whether the cost was counted now (see `settle`)."""
        if self._store is None or (hold is None and not cost_usd):
            return True
        try:
            if hold is None:
                settled = await self._store.settle_call(
                    call.tenant, today(), cost_usd or 0.0, call=call_key(call)
                )
            else:
                settled = await self._store.settle_call(
                    hold.tenant,
                    hold.day,
                    cost_usd or 0.0,
                    reservation=hold.reservation,
                    call=call_key(call),
                )
        except CapacityStoreError as err:
            # A reservation left unsettled is charged in full when its lease runs out: the
            # budget errs on the side of having spent.
            self._store_error(err, "the call's cost is not recorded (a reservation is charged)")
            return True
        return settled.counted

    async def keep_alive(self, admission: CallAdmission) -> None:
        """Renew the call's capacity hold and spend reservation every third of a lease until
        cancelled (the call ended)."""
        store = self._store
        if store is None or (admission.hold is None and admission.spend is None):
            return
        every = store.lease.total_seconds() / 3
        renewals = asyncio.current_task()
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(CapacityStoreError):
                if admission.hold is not None and admission.scope is not None:
                    await store.renew(admission.scope, admission.limits, hold_id=admission.hold)
                if admission.spend is not None:
                    hold = admission.spend
                    await store.renew_spend(hold.tenant, hold.day, reservation=hold.reservation)
            if renewals is not None and renewals.cancelling():
                # The call ended during a renewal, and the store's client reported the cancel
                # as its own error (a timed-out command): renewing on would keep the holds
                # alive, and this task running, for good.
                raise asyncio.CancelledError

    async def _reserve_spend(
        self, call: LlmCallInput, worst: float | None
    ) -> SpendHold | CallAdmission | None:
        """Reserve the call's worst case of its tenant's budget for today: the hold to settle,
        None when there is no budget to hold it against, or the admission that refuses it."""
        budget = self._tenant_budget(call.tenant)
        refused = unbudgeted_tenant(call.tenant, budget, self._budgets_on)
        if refused is not None:
            return CallAdmission("over_budget", budget=refused)
        if budget is None or worst is None or self._store is None:
            return None  # an unpriced model has no cost to hold against a budget
        hold = SpendHold(call.tenant, today(), _reservation_id(call))
        try:
            answer = await self._store.reserve_spend(
                hold.tenant,
                hold.day,
                budget_usd=budget,
                worst_usd=worst,
                reservation=hold.reservation,
                lease=batch_lease(call) if call.lane == "batch" else None,
            )
        except CapacityStoreError as err:
            self._store_error(err, f"no call for tenant {call.tenant!r} until it answers")
            raise ApplicationError(
                f"tenant {call.tenant!r}'s daily budget cannot be checked ({err}): no call is "
                "made unmetered; it will be retried",
                type=errors.BUDGET_STORE_UNAVAILABLE,
            ) from None
        if answer.verdict == "over":
            return CallAdmission(
                "over_budget",
                budget=(
                    f"tenant {call.tenant!r} daily budget: spent ${answer.spent:.4f} of "
                    f"${budget:.4f} today; the next call may cost up to ${worst:.4f}"
                ),
            )
        if answer.verdict == "held":
            count_wait(call)
            return CallAdmission("wait", wait=HELD_BUDGET_WAIT * random.uniform(0.5, 1.5))
        return hold

    async def _reserve_capacity(
        self, call: LlmCallInput, need: int, estimate: int
    ) -> CallAdmission:
        limit = self._limits.get(call.model)
        if self._store is None or limit is None:
            return CallAdmission("go")
        scope = scope_name(self._base_url, call.model)
        limits = (limit.tpm or 0, limit.rpm or 0)
        hold = _reservation_id(call)
        waited = timedelta(0)
        while True:
            try:
                grant = await self._store.reserve(
                    scope,
                    limits,
                    hold_id=hold,
                    member=call.workflow_id,
                    tokens=need,
                    tenant=call.tenant,
                    weight=self._tenant_weight(call.tenant),
                    priority=call.priority or DEFAULT_PRIORITY,
                )
            except CapacityStoreError as err:
                self._store_error(err, "calling without the shared limit")
                return CallAdmission("go")
            if grant.never:
                raise self._too_large(
                    call, estimate, grant.token_limit, "the provider's x-ratelimit-limit-tokens"
                )
            if grant.granted:
                if grant.queued_for:
                    record_queue_wait(call, grant.queued_for, self._named)
                return CallAdmission("go", hold=hold, scope=scope, limits=limits)
            if waited + grant.wait > self._inline_wait:
                count_wait(call)
                return CallAdmission("wait", wait=grant.wait)
            waited += grant.wait
            if activity.in_activity():
                activity.heartbeat(f"waiting {grant.wait.total_seconds():.2f}s for capacity")
            await asyncio.sleep(grant.wait.total_seconds())

    async def _spill_over(self, call: LlmCallInput) -> None:
        """Count a spilled call and give its queue place back now, rather than let it lapse."""
        count_spill_over(call, self._named)
        limit = self._limits.get(call.model)
        if self._store is not None and limit is not None:
            limits, weight = (limit.tpm or 0, limit.rpm or 0), self._tenant_weight(call.tenant)
            scope = scope_name(self._base_url, call.model)
            try:
                await self._store.leave(scope, limits, member=call.workflow_id, weight=weight)
            except CapacityStoreError as err:
                self._store_error(err, "its queue place lapses within three leases")

    async def release(self, hold: SpendHold) -> None:
        """Give back a spend reservation whose call is not made now."""
        assert self._store is not None
        try:
            await self._store.settle_spend(hold.tenant, hold.day, 0.0, reservation=hold.reservation)
        except CapacityStoreError as err:
            self._store_error(err, "the reservation is charged when its lease runs out")

    def _too_large(
        self, call: LlmCallInput, estimate: int, limit: int, source: str
    ) -> ApplicationError:
        need = estimate + self._max_output_tokens
        return ApplicationError(
            f"the prompt is estimated at {estimate} tokens; with the reply limit of "
            f"{self._max_output_tokens} (LLM_MAX_OUTPUT_TOKENS) the call needs {need}, more than "
            f"the {limit} tokens per minute {call.model} allows ({source}): it can never be made",
            type=errors.LLM_PROMPT_TOO_LARGE,
            non_retryable=True,
        )

    def _store_error(self, err: CapacityStoreError, consequence: str) -> None:
        log.warning("%s; %s", err, consequence)
        count_store_error()


def _reservation_id(call: LlmCallInput) -> str:
    return f"{call.workflow_id}:{call.attempt}:{uuid.uuid4().hex[:8]}"
