"""Tenants' spend in the capacity store, per tenant and UTC day (kept 40 days): what was spent,
and the reservations of calls in flight.

A call reserves its worst-case cost first, atomically against the tenant's budget (spent +
reserved + worst case), and settles with its real cost, once per call: the settlement names the
call (a digest of its idempotency key), and a call settled before adds nothing (a batch
collected twice, an activity run again; the keys are kept ``SETTLED_CALLS_TTL``). A reservation
whose call never settles (its worker died) is charged in full once its lease ran out, and a late
settlement corrects that charge. Each operation is one script
(``aiorch_runtime.capacity_spend_scripts``); the store's rate limits build on this
(``aiorch_runtime.capacity.CapacityStore``).
"""

from __future__ import annotations

import hashlib
from datetime import date, timedelta
from typing import Any, Final

import redis.asyncio as redis

from aiorch_runtime import capacity_spend_scripts as scripts
from aiorch_runtime.capacity_answers import BudgetAnswer, BudgetVerdict, SpendSettled
from aiorch_runtime.capacity_connection import (
    StoreConnection,
    decoded,
    milliseconds,
    whole_seconds,
)
from aiorch_runtime.capacity_keys import spend_keys, tenants_key

SPEND_TTL = timedelta(days=40)
# How long a settled call is remembered: longer than any call waits for its answer (a batched
# call, LLM_BATCH_WAIT_S at most 14 days).
SETTLED_CALLS_TTL = timedelta(days=15)

_BUDGET_VERDICTS: Final[dict[int, BudgetVerdict]] = {1: "reserved", 0: "over", 2: "held"}


class TenantSpend(StoreConnection):
    """Spend reservations and settlements, each one round trip to Redis (see the module
    docstring); every method raises `CapacityStoreError` when Redis cannot be reached."""

    def __init__(self, client: redis.Redis, *, lease: timedelta) -> None:
        super().__init__(client, lease=lease)
        self._reserve_spend = client.register_script(scripts.RESERVE_SPEND)
        self._settle_spend = client.register_script(scripts.SETTLE_SPEND)
        self._renew_spend = client.register_script(scripts.RENEW_SPEND)
        self._spend = client.register_script(scripts.SPEND)

    async def reserve_spend(
        self,
        tenant: str,
        day: date,
        *,
        budget_usd: float,
        worst_usd: float,
        reservation: str,
        lease: timedelta | None = None,
    ) -> BudgetAnswer:
        """Reserve ``worst_usd`` of ``tenant``'s budget for ``day`` as ``reservation``, if what
        was spent and what calls in flight reserved leave room for it within ``budget_usd``;
        held for ``lease`` (default: the store's) unless renewed."""
        args: list[str | int] = [
            whole_seconds(SPEND_TTL),
            repr(budget_usd),
            repr(worst_usd),
            reservation,
            milliseconds(lease) if lease is not None else self._lease_ms,
        ]
        verdict, spent, reserved = await self._indexed(
            tenant, day, self._reserve_spend, spend_keys(tenant, day), args
        )
        return BudgetAnswer(_BUDGET_VERDICTS[int(verdict)], float(spent), float(reserved))

    async def settle_spend(
        self,
        tenant: str,
        day: date,
        usd: float,
        *,
        reservation: str | None = None,
        call: str | None = None,
    ) -> float:
        """Add a call's cost ``usd`` to ``tenant``'s spend on ``day``, ending its
        ``reservation`` (None: it had none); returns the day's total. ``call``: see
        `settle_call`."""
        settled = await self.settle_call(tenant, day, usd, reservation=reservation, call=call)
        return settled.total

    async def settle_call(
        self,
        tenant: str,
        day: date,
        usd: float,
        *,
        reservation: str | None = None,
        call: str | None = None,
    ) -> SpendSettled:
        """`settle_spend`, once per ``call`` (its idempotency key): a call settled before adds
        nothing and only gives its reservation back (``counted`` False)."""
        key = hashlib.sha256(call.encode()).hexdigest()[:32] if call else ""
        args: list[str | int] = [
            whole_seconds(SPEND_TTL),
            reservation or "",
            repr(usd),
            key,
            whole_seconds(SETTLED_CALLS_TTL),
        ]
        total, counted = await self._indexed(
            tenant, day, self._settle_spend, spend_keys(tenant, day), args
        )
        return SpendSettled(float(total), bool(int(counted)))

    async def renew_spend(self, tenant: str, day: date, *, reservation: str) -> bool:
        """Extend a spend reservation by a lease; False when it had already expired."""
        args: list[str | int] = [whole_seconds(SPEND_TTL), reservation, self._lease_ms]
        keys = spend_keys(tenant, day)
        return bool(await self._call(self._renew_spend(keys=keys, args=args)))

    async def spend(self, tenant: str, day: date) -> float:
        """``tenant``'s spend on ``day`` in USD (0 when none), expired reservations charged."""
        return (await self.spend_state(tenant, day))[0]

    async def spend_state(self, tenant: str, day: date) -> tuple[float, float]:
        """``tenant``'s spend on ``day`` and what its calls in flight reserve, in USD."""
        args: list[str | int] = [whole_seconds(SPEND_TTL)]
        keys = spend_keys(tenant, day)
        spent, reserved = await self._call(self._spend(keys=keys, args=args))
        return float(spent), float(reserved)

    async def spend_by_tenant(self, day: date) -> dict[str, float]:
        """Every tenant's spend on ``day``, by name."""
        members = await self._call(self._redis.smembers(tenants_key(day)))
        names = sorted(decoded(m) for m in members)
        return {name: await self.spend(name, day) for name in names}

    async def _indexed(
        self, tenant: str, day: date, script: Any, keys: list[str], args: list[str | int]
    ) -> Any:
        """Run a spend script and list ``tenant`` among the day's tenants, in one round trip
        (a pipeline, not a transaction: the list has a hash slot of its own)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            await script(keys=keys, args=args, client=pipe)
            pipe.sadd(tenants_key(day), tenant)
            pipe.expire(tenants_key(day), SPEND_TTL)
            reply, *_ = await self._call(pipe.execute())
        return reply
