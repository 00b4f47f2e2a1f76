"""The capacity store: LLM rate limits and tenant spend that every worker shares, in Redis.

Why Redis (docs/capacity.md has the measurements): each operation is one round trip to a
server platform teams already run, about a millisecond, and it adds no billable Temporal action
to a run; the state is small and fine to lose (buckets refill within a minute). Each operation
is one Lua script, so a reservation is atomic across workers without locks.

Per scope (an endpoint and a model) the store keeps two token buckets, requests and tokens,
each holding at most one minute's limit and refilling continuously at the per-minute rate, in
the form providers enforce. Around them:

- **holds**: a granted reservation is a hold of the tokens it was granted (prompt estimate +
  reply limit) with a lease. The caller settles it with the tokens really used, giving the
  difference back; while its call runs it renews the lease. A holder that dies stops renewing,
  and the next operation on the scope gives the hold back once the lease ran out: a dead
  worker leaks capacity for at most one lease.
- **the queue**: a caller refused for lack of capacity joins a FIFO queue with the tokens it
  is expected to use (its reservation times the scope's observed ratio of used to reserved).
  Its wait is the time the buckets need to cover everyone ahead and itself, so 300 runs
  refused at once come back one after the other instead of all at the next second. Newcomers
  are granted only what the queue does not need; a queued caller whose turn came is granted
  whenever the buckets cover its own reservation. An entry not back within its wait plus a
  lease (its run was cancelled) leaves the queue.
- **provider signals**: the remaining and limit headers a provider sends cap the buckets and
  their rate (min of the configured and the reported limit); a 429 empties them and pauses the
  scope for its Retry-After. Every worker sees it at its next reservation.

Time is Redis's own clock (``TIME`` inside the scripts), so workers' clocks never disagree.
Spend per tenant and day is a float counter per key (kept 40 days), and a set of the day's
tenants.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, Final

import redis.asyncio as redis
from redis.exceptions import RedisError

from aiorch.runtime.config import Settings

KEY_PREFIX: Final = "aiorch"
SPEND_TTL = timedelta(days=40)
# A caller refused capacity never waits less than this (one timer per wait: no busy polling).
MIN_WAIT = timedelta(milliseconds=50)


class CapacityStoreError(Exception):
    """The capacity store could not be reached or answered an error."""


@dataclass(frozen=True)
class Grant:
    """The answer to a reservation: granted now, or wait ``wait`` and ask again."""

    granted: bool
    wait: timedelta
    tokens_left: float
    requests_left: float


@dataclass(frozen=True)
class ProviderSignal:
    """What a provider's answer says about its limits (any part may be missing)."""

    remaining_tokens: int | None = None
    remaining_requests: int | None = None
    limit_tokens: int | None = None
    limit_requests: int | None = None
    retry_after: timedelta | None = None

    @property
    def empty(self) -> bool:
        """True when the answer carried no rate-limit information."""
        return all(value is None for value in vars(self).values())


# KEYS: bucket, holds (id -> tokens), hold expiries, queue (member -> enqueued), queue demand
# (member -> expected tokens), queue expiries. Shared prologue: refill the buckets at the
# effective rate (min of configured and provider-reported limits; 0 = not limited), give back
# expired holds and drop expired queue entries.
_PROLOGUE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tpm_c, rpm_c = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tok', 'req', 'ts', 'pause', 'ratio', 'ptpm', 'prpm')
local function eff(conf, prov)
  prov = tonumber(prov)
  if conf == 0 then return 0 end
  if prov and prov > 0 and prov < conf then return prov end
  return conf
end
local tpm, rpm = eff(tpm_c, b[6]), eff(rpm_c, b[7])
local tok = tonumber(b[1]) or tpm
local req = tonumber(b[2]) or rpm
local ts = tonumber(b[3]) or now
local pause = tonumber(b[4]) or 0
local ratio = tonumber(b[5]) or 1
local elapsed = math.max(0, now - ts)
tok = math.min(tpm, tok + elapsed * tpm / 60000)
req = math.min(rpm, req + elapsed * rpm / 60000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  local held = tonumber(redis.call('HGET', KEYS[2], id)) or 0
  tok = math.min(tpm, tok + held)
  req = math.min(rpm, req + 1)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)) do
  redis.call('ZREM', KEYS[4], m)
  redis.call('HDEL', KEYS[5], m)
  redis.call('ZREM', KEYS[6], m)
end
local function save()
  redis.call('HSET', KEYS[1], 'tok', tostring(tok), 'req', tostring(req), 'ts', now,
    'pause', pause, 'ratio', tostring(ratio))
  redis.call('PEXPIRE', KEYS[1], 3600000)
end
"""

# ARGV: tpm, rpm, lease_ms, hold id, queue member, tokens to reserve, min wait ms.
# Returns {granted (0/1), wait ms, tokens left, requests left}.
_RESERVE = (
    _PROLOGUE
    + """
local lease, id, member = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local need, min_wait = tonumber(ARGV[6]), tonumber(ARGV[7])
local score = redis.call('ZSCORE', KEYS[4], member)
local ahead
if score then
  ahead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. score)
else
  ahead = redis.call('ZRANGE', KEYS[4], 0, -1)
end
local demand = 0
for _, m in ipairs(ahead) do demand = demand + (tonumber(redis.call('HGET', KEYS[5], m)) or 0) end
local count = #ahead
local tok_ok, req_ok
if score then
  tok_ok = tok >= need
  req_ok = req >= 1
else
  tok_ok = tok - demand >= need
  req_ok = req - count >= 1
end
if now >= pause and (tpm == 0 or tok_ok) and (rpm == 0 or req_ok) then
  if tpm > 0 then tok = tok - need end
  if rpm > 0 then req = req - 1 end
  redis.call('HSET', KEYS[2], id, need)
  redis.call('ZADD', KEYS[3], now + lease, id)
  redis.call('PEXPIRE', KEYS[2], 3600000)
  redis.call('PEXPIRE', KEYS[3], 3600000)
  if score then
    redis.call('ZREM', KEYS[4], member)
    redis.call('HDEL', KEYS[5], member)
    redis.call('ZREM', KEYS[6], member)
  end
  save()
  return {1, 0, tostring(tok), tostring(req)}
end
local wait = math.max(min_wait, pause - now)
if tpm > 0 then wait = math.max(wait, (demand + need - tok) * 60000 / tpm) end
if rpm > 0 then wait = math.max(wait, (count + 1 - req) * 60000 / rpm) end
wait = math.ceil(wait)
if not score then
  redis.call('ZADD', KEYS[4], now, member)
  redis.call('HSET', KEYS[5], member, tostring(need * ratio))
end
redis.call('ZADD', KEYS[6], now + wait + lease, member)
for i = 4, 6 do redis.call('PEXPIRE', KEYS[i], 3600000) end
save()
return {0, wait, tostring(tok), tostring(req)}
"""
)

# ARGV: tpm, rpm, hold id, tokens used, whether a call reached the provider (0/1).
_SETTLE = (
    _PROLOGUE
    + """
local id, used, called = ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1'
local held = tonumber(redis.call('HGET', KEYS[2], id))
if held then
  if tpm > 0 then tok = math.min(tpm, tok + held - used) end
  if rpm > 0 and not called then req = math.min(rpm, req + 1) end
  if called and used > 0 and held > 0 then
    ratio = 0.8 * ratio + 0.2 * math.min(1, used / held)
  end
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
elseif tpm > 0 then
  tok = tok - used
end
save()
return 1
"""
)

# ARGV: tpm, rpm, hold id, lease ms. Returns 1 when the hold was still there.
_RENEW = (
    _PROLOGUE
    + """
local id, lease = ARGV[3], tonumber(ARGV[4])
save()
if redis.call('ZSCORE', KEYS[3], id) then
  redis.call('ZADD', KEYS[3], now + lease, id)
  return 1
end
return 0
"""
)

# ARGV: tpm, rpm. Returns {tokens, requests} after refilling and giving back expired holds.
_LEVELS = (
    _PROLOGUE
    + """
save()
return {tostring(tok), tostring(req)}
"""
)

# ARGV: tpm, rpm, remaining tokens, remaining requests, limit tokens, limit requests,
# retry-after ms (each -1 when absent).
_FEEDBACK = (
    _PROLOGUE
    + """
local rt, rr, lt, lr, ra = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6]), tonumber(ARGV[7])
if lt > 0 then redis.call('HSET', KEYS[1], 'ptpm', lt); tpm = eff(tpm_c, lt) end
if lr > 0 then redis.call('HSET', KEYS[1], 'prpm', lr); rpm = eff(rpm_c, lr) end
if rt >= 0 then tok = math.min(tok, rt) end
if rr >= 0 then req = math.min(req, rr) end
if ra >= 0 then
  tok = math.min(tok, 0)
  req = math.min(req, 0)
  pause = math.max(pause, now + ra)
end
save()
return 1
"""
)


def scope_name(base_url: str, model: str) -> str:
    """The store's name for a model at an endpoint: the same on every worker configured alike,
    different for the same model name at two providers."""
    endpoint = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:12]
    return f"{endpoint}:{model}"


def _scope_keys(scope: str) -> list[str]:
    # One hash tag, so every key of a scope lives in one Redis Cluster slot.
    base = f"{KEY_PREFIX}:cap:{{{scope}}}"
    return [f"{base}:b", f"{base}:h", f"{base}:hx", f"{base}:q", f"{base}:qd", f"{base}:qx"]


def spend_key(tenant: str, day: date) -> str:
    """The key of a tenant's spend on a (UTC) day."""
    return f"{KEY_PREFIX}:spend:{day.isoformat()}:{tenant}"


def tenants_key(day: date) -> str:
    """The key of the set of tenants that spent on a (UTC) day."""
    return f"{KEY_PREFIX}:spend:{day.isoformat()}:tenants"


class CapacityStore:
    """Reservations, settlements, provider signals and spend, each one round trip to Redis.

    Every method raises `CapacityStoreError` when Redis cannot be reached or refuses; callers
    decide what an outage means (the LLM activity calls without the shared limit, see
    docs/capacity.md).
    """

    def __init__(self, client: redis.Redis, *, lease: timedelta) -> None:
        self._redis = client
        self._lease_ms = int(lease.total_seconds() * 1000)
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._renew = client.register_script(_RENEW)
        self._feedback = client.register_script(_FEEDBACK)
        self._levels = client.register_script(_LEVELS)

    @classmethod
    def from_settings(cls, settings: Settings) -> CapacityStore | None:
        """The store at ``CAPACITY_STORE_URL``, or None when it is not configured."""
        if settings.capacity_store_url is None:
            return None
        client = redis.Redis.from_url(
            settings.capacity_store_url.get_secret_value(),
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            health_check_interval=30,
        )
        return cls(client, lease=timedelta(seconds=settings.capacity_lease_s))

    @property
    def lease(self) -> timedelta:
        """How long a hold outlives its last renewal."""
        return timedelta(milliseconds=self._lease_ms)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()

    async def ping(self) -> None:
        """Check the store answers.

        Raises:
            CapacityStoreError: it does not.
        """
        await self._call(self._redis.ping())

    async def reserve(
        self,
        scope: str,
        limits: tuple[int, int],
        *,
        hold_id: str,
        member: str,
        tokens: int,
        lease: timedelta | None = None,
    ) -> Grant:
        """Reserve one request and ``tokens`` tokens in ``scope``, limited to ``limits``
        ``(tpm, rpm)`` (0 = that dimension is not limited). Granted: a hold ``hold_id``;
        refused: ``member`` queued (or kept in its place) and told how long to wait."""
        tpm, rpm = limits
        lease_ms = int(lease.total_seconds() * 1000) if lease else self._lease_ms
        args: list[str | int] = [tpm, rpm, lease_ms, hold_id, member, tokens, _ms(MIN_WAIT)]
        reply = await self._call(self._reserve(keys=_scope_keys(scope), args=args))
        granted, wait_ms, tokens_left, requests_left = reply
        return Grant(
            granted=bool(int(granted)),
            wait=timedelta(milliseconds=int(wait_ms)),
            tokens_left=float(tokens_left),
            requests_left=float(requests_left),
        )

    async def settle(
        self, scope: str, limits: tuple[int, int], *, hold_id: str, used: int, called: bool
    ) -> None:
        """End hold ``hold_id`` with the tokens really used (0 when no call was answered);
        ``called`` says whether the request reached the provider (it then keeps counting)."""
        args: list[str | int] = [*limits, hold_id, used, int(called)]
        await self._call(self._settle(keys=_scope_keys(scope), args=args))

    async def renew(self, scope: str, limits: tuple[int, int], *, hold_id: str) -> bool:
        """Extend hold ``hold_id`` by a lease; False when it had already expired."""
        args: list[str | int] = [*limits, hold_id, self._lease_ms]
        return bool(await self._call(self._renew(keys=_scope_keys(scope), args=args)))

    async def feedback(self, scope: str, limits: tuple[int, int], signal: ProviderSignal) -> None:
        """Apply what a provider said about its limits to the scope, for every worker."""
        if signal.empty:
            return
        retry_ms = _ms(signal.retry_after) if signal.retry_after is not None else -1

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
        await self._call(self._feedback(keys=_scope_keys(scope), args=args))

    async def add_spend(self, tenant: str, day: date, usd: float) -> float:
        """Add ``usd`` to ``tenant``'s spend on ``day``; returns the day's total."""
        key = spend_key(tenant, day)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incrbyfloat(key, usd)
            pipe.expire(key, SPEND_TTL)
            pipe.sadd(tenants_key(day), tenant)
            pipe.expire(tenants_key(day), SPEND_TTL)
            total, *_ = await self._call(pipe.execute())
        return float(total)

    async def spend(self, tenant: str, day: date) -> float:
        """``tenant``'s spend on ``day`` in USD (0 when none)."""
        value = await self._call(self._redis.get(spend_key(tenant, day)))
        return float(value) if value is not None else 0.0

    async def spend_by_tenant(self, day: date) -> dict[str, float]:
        """Every tenant's spend on ``day``, by name."""
        members = await self._call(self._redis.smembers(tenants_key(day)))
        names = sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)
        if not names:
            return {}
        values = await self._call(self._redis.mget([spend_key(n, day) for n in names]))
        return {n: float(v) if v is not None else 0.0 for n, v in zip(names, values, strict=True)}

    async def levels(self, scope: str, limits: tuple[int, int]) -> tuple[float, float]:
        """The tokens and requests ``scope`` has now (expired holds given back first)."""
        args: list[int] = [*limits]
        tokens, requests = await self._call(self._levels(keys=_scope_keys(scope), args=args))
        return float(tokens), float(requests)

    async def scope_state(self, scope: str) -> Mapping[str, float]:
        """The raw bucket of ``scope`` (tokens, requests, ...), for tests and diagnostics."""
        raw = await self._call(self._redis.hgetall(_scope_keys(scope)[0]))
        return {_text(k): float(v) for k, v in raw.items()}

    async def held(self, scope: str) -> dict[str, float]:
        """The holds of ``scope`` (id -> tokens), for tests and diagnostics."""
        raw = await self._call(self._redis.hgetall(_scope_keys(scope)[1]))
        return {_text(k): float(v) for k, v in raw.items()}

    async def _call(self, pending: Any) -> Any:
        try:
            return await pending
        except (RedisError, OSError) as err:
            raise CapacityStoreError(f"capacity store: {type(err).__name__}: {err}") from None


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
