"""The capacity store: LLM rate limits and tenant spend that every worker shares, in Redis.

Why Redis (docs/capacity.md has the measurements): each operation is one round trip to a
server platform teams already run, about a millisecond, and it adds no billable Temporal action
to a run; the state is small (buckets refill within a minute). Each operation is one Lua script
(``aiorch_runtime.capacity_scripts``), so a reservation is atomic across workers without locks.

Per scope (an endpoint and a model) the store keeps two token buckets, requests and tokens,
each holding at most one minute's limit and refilling continuously at the per-minute rate, in
the form providers enforce. Around them:

- **holds**: a granted reservation is a hold of the tokens it was granted (prompt estimate +
  reply limit) with a lease. The caller settles it with the tokens really used, giving the
  difference back; while its call runs it renews the lease. A holder that dies stops renewing,
  and the next operation on the scope gives the hold back once the lease ran out: a dead
  worker leaks capacity for at most one lease. A reservation larger than the token bucket is
  answered "never" (it could only be granted by a bucket it does not fit in).
- **the queue**: a caller refused for lack of capacity joins the queue with the tokens it is
  expected to use (its reservation times the scope's observed ratio of used to reserved, and
  at most one bucket), in weighted fair order over tokens: a tenant's members are first come,
  first served among themselves (the more urgent first), and tenants share the tokens in
  proportion to their weights while they have calls queued; an idle tenant's share goes to
  the others (the script ``RESERVE`` says how). With one tenant the queue is FIFO. A caller's
  turn is when the buckets will cover everyone ahead and itself, so 300 runs refused at once
  come back one after the other instead of all at the next second. Newcomers are granted only
  what the queue does not need; a queued caller whose turn came is granted whenever the
  buckets cover its own reservation. A caller is told to come back at its turn or after two
  leases, whichever is sooner (then it is told the rest of its wait), and its place lasts one
  lease past that: the entry of a run cancelled or terminated while it waited leaves the queue
  within three leases, whatever its wait. A caller whose call went elsewhere (spilled over to
  the batch lane) takes its place out at once (`CapacityStore.leave`).
- **provider signals**: the remaining and limit headers a provider sends cap the buckets and
  their rate (min of the configured and the reported limit); a 429 empties them and pauses the
  scope for its Retry-After. Every worker sees it at its next reservation.

Spend, per tenant and UTC day, is the store's other half (``aiorch_runtime.capacity_spend``,
which `CapacityStore` extends), on the same connection (``aiorch_runtime.capacity_connection``).

Keys (``aiorch_runtime.capacity_keys``): a tenant's day and a scope each have a Redis Cluster
hash slot of their own, and no tenant name can spell another key. Time is Redis's own clock
(``TIME`` inside the scripts), so workers' clocks never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

import redis.asyncio as redis

from aiorch_runtime import capacity_scripts as scripts
from aiorch_runtime.capacity_answers import Grant, ProviderSignal
from aiorch_runtime.capacity_connection import (
    CapacityStoreError,
    decoded,
    milliseconds,
    whole_seconds,
)
from aiorch_runtime.capacity_keys import scope_keys, usage_key
from aiorch_runtime.capacity_spend import SPEND_TTL, TenantSpend
from aiorch_runtime.config import Settings
from workflows.payloads import DEFAULT_PRIORITY, DEFAULT_TENANT, TENANT_PATTERN

__all__ = ["DEFAULT_PRIORITY", "CapacityStore", "CapacityStoreError", "ProviderSignal"]

# A worker runs hundreds of activities at once, each a round trip or two to the store: they share
# this many connections, and a caller finding none free waits up to STORE_CONNECTION_WAIT for one
# (redis-py's default pool refuses it at once: "Too many connections").
STORE_CONNECTIONS: Final = 100
STORE_CONNECTION_WAIT = timedelta(seconds=10)
# A caller refused capacity never waits less than this (one timer per wait: no busy polling).
MIN_WAIT = timedelta(milliseconds=50)
# A queued caller comes back at least this many leases apart, so its place can expire soon
# after it stops coming (its run was cancelled or terminated).
CHECK_IN_LEASES: Final = 2


class CapacityStore(TenantSpend):
    """Reservations, settlements, provider signals and spend, each one round trip to Redis.

    Every method raises `CapacityStoreError` when Redis cannot be reached or refuses; callers
    decide what an outage means (the LLM activity calls without the shared limit, but never
    without a tenant's budget: see docs/capacity.md).
    """

    def __init__(self, client: redis.Redis, *, lease: timedelta) -> None:
        super().__init__(client, lease=lease)
        self._reserve = client.register_script(scripts.RESERVE)
        self._settle = client.register_script(scripts.SETTLE)
        self._renew = client.register_script(scripts.RENEW)
        self._feedback = client.register_script(scripts.FEEDBACK)
        self._levels = client.register_script(scripts.LEVELS)
        self._leave = client.register_script(scripts.LEAVE)

    @classmethod
    def from_settings(cls, settings: Settings) -> CapacityStore | None:
        """The store at ``CAPACITY_STORE_URL``, or None when it is not configured."""
        if settings.capacity_store_url is None:
            return None
        pool = redis.BlockingConnectionPool.from_url(
            settings.capacity_store_url.get_secret_value(),
            max_connections=STORE_CONNECTIONS,
            timeout=STORE_CONNECTION_WAIT.total_seconds(),
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            health_check_interval=30,
        )
        return cls(redis.Redis.from_pool(pool), lease=timedelta(seconds=settings.capacity_lease_s))

    async def reserve(
        self,
        scope: str,
        limits: tuple[int, int],
        *,
        hold_id: str,
        member: str,
        tokens: int,
        lease: timedelta | None = None,
        tenant: str = DEFAULT_TENANT,
        weight: float = 1.0,
        priority: int = DEFAULT_PRIORITY,
    ) -> Grant:
        """Reserve one request and ``tokens`` tokens in ``scope``, limited to ``limits``
        ``(tpm, rpm)`` (0 = that dimension is not limited). Granted: a hold ``hold_id``;
        refused: ``member`` queued (or kept in its place) in ``tenant``'s fair share (its
        ``weight``; ``priority`` 1 is served first within it) and told how long to wait;
        never: ``tokens`` is more than the token bucket holds (nothing queued).

        Raises:
            ValueError: ``tenant`` is not a tenant name, ``weight`` is not more than 0, or
                ``priority`` is not 1 to 5.
        """
        if not re.fullmatch(TENANT_PATTERN, tenant) or not weight > 0 or not 1 <= priority <= 5:
            raise ValueError(
                f"a reservation needs a tenant name, a weight over 0 and a priority of 1 to 5; "
                f"got {tenant[:70]!r}, weight {weight}, priority {priority}"
            )
        tpm, rpm = limits
        lease_ms = milliseconds(lease) if lease else self._lease_ms
        args: list[str | int] = [
            tpm,
            rpm,
            lease_ms,
            hold_id,
            member,
            tokens,
            milliseconds(MIN_WAIT),
            CHECK_IN_LEASES * lease_ms,
            tenant,
            repr(float(weight)),
            priority,
        ]
        reply = await self._call(self._reserve(keys=scope_keys(scope), args=args))
        verdict, wait_ms, tokens_left, requests_left, queued_ms = reply
        never = int(verdict) < 0
        return Grant(
            granted=int(verdict) > 0,
            wait=timedelta(0) if never else timedelta(milliseconds=int(wait_ms)),
            tokens_left=float(tokens_left),
            requests_left=float(requests_left),
            never=never,
            token_limit=int(wait_ms) if never else 0,
            queued_for=timedelta(milliseconds=int(queued_ms)),
        )

    async def settle(
        self,
        scope: str,
        limits: tuple[int, int],
        *,
        hold_id: str,
        used: int,
        called: bool,
        tenant: str = DEFAULT_TENANT,
        day: date | None = None,
    ) -> None:
        """End hold ``hold_id`` with the tokens really used (0 when no call was answered);
        ``called`` says whether the request reached the provider (it then keeps counting).
        The tokens count towards ``tenant``'s use of the scope on ``day`` (`usage`)."""
        keys = [*scope_keys(scope), usage_key(scope, day or datetime.now(UTC).date())]
        args: list[str | int] = [
            *limits,
            hold_id,
            used,
            int(called),
            tenant,
            whole_seconds(SPEND_TTL),
        ]
        await self._call(self._settle(keys=keys, args=args))

    async def usage(self, scope: str, day: date) -> dict[str, int]:
        """The tokens each tenant's settled calls used in ``scope`` on ``day``, by name."""
        raw = await self._call(self._redis.hgetall(usage_key(scope, day)))
        return {decoded(k): int(v) for k, v in raw.items()}

    async def renew(self, scope: str, limits: tuple[int, int], *, hold_id: str) -> bool:
        """Extend hold ``hold_id`` by a lease; False when it had already expired."""
        args: list[str | int] = [*limits, hold_id, self._lease_ms]
        return bool(await self._call(self._renew(keys=scope_keys(scope), args=args)))

    async def leave(
        self, scope: str, limits: tuple[int, int], *, member: str, weight: float = 1.0
    ) -> bool:
        """Take ``member``'s place out of ``scope``'s queue (its call went elsewhere): the
        places behind it are told their turns that much sooner, and its tenant (of ``weight``)
        queues on as if it had not joined (the script ``LEAVE`` says how far). False when it
        held no place (never queued, granted, lapsed or gone already).

        Raises:
            ValueError: ``weight`` is not more than 0.
        """
        if not weight > 0:
            raise ValueError(f"a tenant's weight must be over 0; got {weight}")
        args: list[str | int] = [*limits, member, repr(float(weight))]
        return bool(await self._call(self._leave(keys=scope_keys(scope), args=args)))

    async def feedback(self, scope: str, limits: tuple[int, int], signal: ProviderSignal) -> None:
        """Apply what a provider said about its limits to the scope, for every worker."""
        if signal.empty:
            return
        retry_ms = milliseconds(signal.retry_after) if signal.retry_after is not None else -1

        def value(number: int | None) -> int:
            return -1 if number is None else number

        args: list[int] = [
            *limits,
            value(signal.remaining_tokens),
            value(signal.remaining_requests),
            value(signal.limit_tokens),
            value(signal.limit_requests),
            retry_ms,
        ]
        await self._call(self._feedback(keys=scope_keys(scope), args=args))

    async def levels(self, scope: str, limits: tuple[int, int]) -> tuple[float, float]:
        """The tokens and requests ``scope`` has now (expired holds given back first)."""
        tokens, requests, *_ = await self._levels_reply(scope, limits)
        return float(tokens), float(requests)

    async def queued(self, scope: str, limits: tuple[int, int]) -> list[str]:
        """The members queued for ``scope``, first first (expired places dropped first)."""
        _, _, *members = await self._levels_reply(scope, limits)
        return [decoded(member) for member in members]

    async def scope_state(self, scope: str) -> Mapping[str, float]:
        """The raw bucket of ``scope`` (tokens, requests, ...), for tests and diagnostics."""
        raw = await self._call(self._redis.hgetall(scope_keys(scope)[0]))
        return {decoded(k): float(v) for k, v in raw.items()}

    async def held(self, scope: str) -> dict[str, float]:
        """The holds of ``scope`` (id -> tokens), for tests and diagnostics."""
        raw = await self._call(self._redis.hgetall(scope_keys(scope)[1]))
        return {decoded(k): float(v) for k, v in raw.items()}

    async def _levels_reply(self, scope: str, limits: tuple[int, int]) -> list[Any]:
        args: list[int] = [*limits]
        reply: list[Any] = await self._call(self._levels(keys=scope_keys(scope), args=args))
        return reply
