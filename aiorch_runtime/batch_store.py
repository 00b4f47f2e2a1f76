"""The batch lane's calls, kept in the capacity store's Redis between a run's ``invoke_llm`` and
its answer (docs/cost.md).

Per scope (an endpoint and a model), under one Redis Cluster hash tag (``aiorch:batch:{SCOPE}``):

- ``seq``: the number of the last group opened; ``open``: the group calls join now (``group``,
  ``count``, ``started``: whether its ``LlmBatch`` workflow is known to run);
- ``q``: every queued call by its group (a sorted set); ``g``: each group's times, its owner
  token (a random value its ``LlmBatch`` workflow carries in its memo: the mark of the run the
  lane started) and, per round, the provider's batch id, recorded the moment the batch exists;
- ``i:ITEM``: one call: its input (``LlmCallInput``), the task token of the ``invoke_llm`` that
  waits for its submission, the pipeline and the run (workflow id) that made it, its spend
  reservation and result cache digest, the time its run stops waiting for the submission, and
  once answered its result and the task token of the ``await_batch`` that waits for it (only
  that run's ``await_batch`` may wait for it).

A call joins the open group (opening one when there is none) in one script; the call that fills a
group closes it, and so does its submission, so every call is in exactly one group and a group's
calls are fixed once it is claimed. Times are Redis's own (``TIME``). Calls live
``item_ttl``; a group's index entries go once its last round is collected.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

import redis.asyncio as redis
from redis.exceptions import RedisError

from aiorch_runtime.capacity import CapacityStoreError
from aiorch_runtime.capacity_keys import KEY_PREFIX

# KEYS: seq, open, q, g, item. ARGV: item, call, token, pipeline, spend, cache digest, group size,
# ms the call may wait for its submission, item ttl s, the owner token a group opened now gets,
# the workflow id of the run that made the call.
# Returns {group, started (0/1), full (0/1), already queued (0/1), the group's owner token or ''}.
ENQUEUE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('HSET', KEYS[5], 'token', ARGV[3])
  local queued = tonumber(redis.call('HGET', KEYS[5], 'group'))
  return {queued, 1, 0, 1, redis.call('HGET', KEYS[4], queued .. ':owner') or ''}
end
local group = tonumber(redis.call('HGET', KEYS[2], 'group'))
local count = tonumber(redis.call('HGET', KEYS[2], 'count')) or 0
local started = tonumber(redis.call('HGET', KEYS[2], 'started')) or 0
if not group then
  group = redis.call('INCR', KEYS[1])
  count, started = 0, 0
  redis.call('HSET', KEYS[4], group .. ':opened', now, group .. ':owner', ARGV[10])
end
count = count + 1
redis.call('ZADD', KEYS[3], group, ARGV[1])
redis.call('HSET', KEYS[5], 'call', ARGV[2], 'token', ARGV[3], 'pipeline', ARGV[4],
  'spend', ARGV[5], 'cache', ARGV[6], 'group', group, 'deadline', now + tonumber(ARGV[8]),
  'run', ARGV[11])
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[9]))
local full = 0
if count >= tonumber(ARGV[7]) then
  full = 1
  redis.call('DEL', KEYS[2])
else
  redis.call('HSET', KEYS[2], 'group', group, 'count', count, 'started', started)
end
return {group, started, full, 0, redis.call('HGET', KEYS[4], group .. ':owner') or ''}
"""

# KEYS: open. ARGV: group. The group's workflow runs: later calls need not start it.
MARK_STARTED: Final = """
if tonumber(redis.call('HGET', KEYS[1], 'group')) == tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'started', 1)
end
return 1
"""

# KEYS: open, q, item. ARGV: item, group. A call that could not be queued after all.
WITHDRAW: Final = """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
if tonumber(redis.call('HGET', KEYS[1], 'group')) == tonumber(ARGV[2]) then
  redis.call('HINCRBY', KEYS[1], 'count', -1)
end
return 1
"""

# KEYS: open, q, g. ARGV: group. Closes the group (no call joins it any more). Returns {now ms,
# its calls...}.
CLAIM: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(redis.call('HGET', KEYS[1], 'group')) == tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
end
redis.call('HSETNX', KEYS[3], ARGV[1] .. ':closed', now)
local reply = {now}
for _, item in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[1], ARGV[1])) do
  table.insert(reply, item)
end
return reply
"""

# KEYS: item. ARGV: result, item ttl s. Returns {1 stored (0: the call is no longer known), the
# await_batch task token or ''}.
ANSWER: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, ''} end
redis.call('HSET', KEYS[1], 'result', ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return {1, redis.call('HGET', KEYS[1], 'await') or ''}
"""

# KEYS: item. ARGV: await_batch task token, the waiting run's workflow id. Returns {-1} (no such
# call), {-2} (the call is another run's), {0} (waiting: the token is kept for the answer) or
# {1, result}.
AWAIT: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local run = redis.call('HGET', KEYS[1], 'run')
if run and run ~= '' and run ~= ARGV[2] then return {-2} end
local result = redis.call('HGET', KEYS[1], 'result')
if result then return {1, result} end
redis.call('HSET', KEYS[1], 'await', ARGV[1])
return {0}
"""

_FIELDS: Final = ("call", "token", "pipeline", "spend", "cache", "deadline", "result")


@dataclass(frozen=True)
class Enqueued:
    """Where a call went: its ``group``, whether that group's workflow is known to run
    (``started``), whether this call filled it (``full``), whether the call was queued before
    (``again``: the same attempt enqueued twice), and the group's ``owner`` token (what its
    workflow carries in its memo; '' for a group opened before groups had one)."""

    group: int
    started: bool
    full: bool
    again: bool
    owner: str = ""


@dataclass(frozen=True)
class QueuedCall:
    """One queued call as the store keeps it (see the module docstring)."""

    item: str
    call: str
    token: bytes
    pipeline: str
    spend: str
    cache: str
    deadline_ms: int
    result: str | None


Awaited = tuple[Literal["unknown", "another_run", "waiting", "answered"], str | None]


def scope_keys(scope: str) -> dict[str, str]:
    """The keys of a scope's batch lane: ``seq``, ``open``, ``q``, ``g``, and the prefix of its
    calls' keys (``i``); one hash tag, so one Redis Cluster slot."""
    base = f"{KEY_PREFIX}:batch:{{{scope}}}"
    return {name: f"{base}:{name}" for name in ("seq", "open", "q", "g", "i")}


class BatchStore:
    """The batch lane's groups and calls (see the module docstring). Every method raises
    `CapacityStoreError` when Redis cannot be reached or refuses."""

    def __init__(self, client: redis.Redis, *, item_ttl: timedelta) -> None:
        self._redis = client
        self._ttl = int(item_ttl.total_seconds())
        self._enqueue = client.register_script(ENQUEUE)
        self._mark_started = client.register_script(MARK_STARTED)
        self._withdraw = client.register_script(WITHDRAW)
        self._claim = client.register_script(CLAIM)
        self._answer = client.register_script(ANSWER)
        self._await = client.register_script(AWAIT)

    async def enqueue(
        self,
        scope: str,
        item: str,
        *,
        call: str,
        token: bytes,
        pipeline: str,
        spend: str,
        cache: str,
        size: int,
        queue: timedelta,
        owner: str,
        run: str,
    ) -> Enqueued:
        """Queue call ``item`` in ``scope``'s open group (groups hold ``size`` calls); it waits
        at most ``queue`` for its submission; a group it opens gets ``owner`` as its token. ``run``:
        the workflow id of the run that made the call, the only one its answer goes to."""
        keys = scope_keys(scope)
        args: list[Any] = [
            item,
            call,
            token,
            pipeline,
            spend,
            cache,
            size,
            int(queue.total_seconds() * 1000),
            self._ttl,
            owner,
            run,
        ]
        group, started, full, again, token = await self._run(
            self._enqueue(keys=self._keys(keys, item), args=args)
        )
        return Enqueued(
            int(group), bool(int(started)), bool(int(full)), bool(int(again)), _text(token)
        )

    async def owner_of(self, scope: str, group: int) -> tuple[bool, str]:
        """Whether ``group`` was ever opened, and its owner token ('' if none was kept)."""
        opened, owner = await self._run(
            self._redis.hmget(scope_keys(scope)["g"], [f"{group}:opened", f"{group}:owner"])
        )
        return opened is not None, _text(owner) if owner is not None else ""

    async def mark_started(self, scope: str, group: int) -> None:
        """Note that ``group``'s workflow runs, so later calls need not start it."""
        await self._run(self._mark_started(keys=[scope_keys(scope)["open"]], args=[group]))

    async def withdraw(self, scope: str, group: int, item: str) -> None:
        """Take call ``item`` out of ``group`` (it could not be queued after all)."""
        keys = scope_keys(scope)
        await self._run(
            self._withdraw(
                keys=[keys["open"], keys["q"], self._item(keys, item)], args=[item, group]
            )
        )

    async def claim(self, scope: str, group: int) -> tuple[int, list[str]]:
        """Close ``group`` and list its calls; with Redis's time now, in milliseconds."""
        keys = scope_keys(scope)
        now, *items = await self._run(
            self._claim(keys=[keys["open"], keys["q"], keys["g"]], args=[group])
        )
        return int(now), [_text(item) for item in items]

    async def calls(self, scope: str, items: list[str]) -> list[QueuedCall]:
        """The calls ``items`` as kept (those no longer known are left out)."""
        keys = scope_keys(scope)
        async with self._redis.pipeline(transaction=False) as pipe:
            for item in items:
                pipe.hmget(self._item(keys, item), list(_FIELDS))
            rows = await self._run(pipe.execute())
        found = []
        for item, row in zip(items, rows, strict=True):
            call, token, pipeline, spend, cache, deadline, result = row
            if call is None:
                continue
            found.append(
                QueuedCall(
                    item=item,
                    call=_text(call),
                    token=bytes(token or b""),
                    pipeline=_text(pipeline or b""),
                    spend=_text(spend or b""),
                    cache=_text(cache or b""),
                    deadline_ms=int(deadline or 0),
                    result=_text(result) if result is not None else None,
                )
            )
        return found

    async def drop(self, scope: str, items: list[str]) -> None:
        """Forget calls whose runs stopped waiting for them."""
        if not items:
            return
        keys = scope_keys(scope)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zrem(keys["q"], *items)
            pipe.delete(*(self._item(keys, item) for item in items))
            await self._run(pipe.execute())

    async def batch_of(self, scope: str, group: int, round_: int) -> str | None:
        """The provider's batch id recorded for ``group``'s round ``round_``, if any."""
        value = await self._run(self._redis.hget(scope_keys(scope)["g"], f"{group}:r{round_}"))
        return _text(value) if value is not None else None

    async def record_batch(self, scope: str, group: int, round_: int, batch_id: str) -> None:
        """Record ``batch_id`` as ``group``'s round ``round_``."""
        await self._run(self._redis.hset(scope_keys(scope)["g"], f"{group}:r{round_}", batch_id))

    async def answer(self, scope: str, item: str, result: str) -> tuple[bool, bytes | None]:
        """Keep call ``item``'s ``result``: whether the call is still known, and the task token
        of the ``await_batch`` waiting for it (None: none waits yet)."""
        keys = scope_keys(scope)
        stored, token = await self._run(
            self._answer(keys=[self._item(keys, item)], args=[result, self._ttl])
        )
        return bool(int(stored)), (bytes(token) if token else None)

    async def awaiting(self, scope: str, item: str, token: bytes, run: str) -> Awaited:
        """Call ``item``'s result if it has one, else keep ``token`` for its answer; neither
        when the call is not run ``run``'s (a workflow id)."""
        keys = scope_keys(scope)
        reply = await self._run(self._await(keys=[self._item(keys, item)], args=[token, run]))
        verdict = int(reply[0])
        if verdict == -2:
            return "another_run", None
        if verdict < 0:
            return "unknown", None
        if verdict == 0:
            return "waiting", None
        return "answered", _text(reply[1])

    async def delivered(self, scope: str, item: str) -> None:
        """Forget call ``item``: its run has its answer."""
        await self._run(self._redis.delete(self._item(scope_keys(scope), item)))

    async def finish(self, scope: str, group: int, rounds: int) -> None:
        """Drop ``group``'s index entries, its ``rounds`` batch ids included (its calls keep
        their answers until delivered)."""
        keys = scope_keys(scope)
        fields = ["opened", "closed", "owner", *(f"r{number}" for number in range(rounds))]
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(keys["q"], group, group)
            pipe.hdel(keys["g"], *(f"{group}:{field}" for field in fields))
            await self._run(pipe.execute())

    @staticmethod
    def _item(keys: dict[str, str], item: str) -> str:
        return f"{keys['i']}:{item}"

    def _keys(self, keys: dict[str, str], item: str) -> list[str]:
        return [keys["seq"], keys["open"], keys["q"], keys["g"], self._item(keys, item)]

    async def _run(self, pending: Any) -> Any:
        try:
            return await pending
        except (RedisError, OSError) as err:
            raise CapacityStoreError(f"capacity store: {type(err).__name__}: {err}") from None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
