"""The capacity store's connection to Redis, which its rate limits (``aiorch_runtime.capacity``)
and its tenants' spend (``aiorch_runtime.capacity_spend``) share: one client, one lease, and one
error for an outage, so callers decide what an outage means in one place."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import redis.asyncio as redis
from redis.exceptions import RedisError


class CapacityStoreError(Exception):
    """The capacity store could not be reached or answered an error."""


class StoreConnection:
    """A Redis client and the lease of what the store keeps for a caller (a hold, a spend
    reservation, a queue place); every operation raises `CapacityStoreError` when Redis cannot
    be reached or refuses."""

    def __init__(self, client: redis.Redis, *, lease: timedelta) -> None:
        self._redis = client
        self._lease_ms = milliseconds(lease)

    @property
    def redis(self) -> redis.Redis:
        """The connection pool, shared by the stores that keep their state next to this one
        (the batch lane's calls, the result cache)."""
        return self._redis

    @property
    def lease(self) -> timedelta:
        """How long a hold, a spend reservation or a queue place outlives its last renewal."""
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

    async def _call(self, pending: Any) -> Any:
        try:
            return await pending
        except (RedisError, OSError) as err:
            raise CapacityStoreError(f"capacity store: {type(err).__name__}: {err}") from None


def milliseconds(delta: timedelta) -> int:
    """``delta`` in whole milliseconds, as the scripts take durations."""
    return int(delta.total_seconds() * 1000)


def whole_seconds(delta: timedelta) -> int:
    """``delta`` in whole seconds, as the scripts take keys' times to live."""
    return int(delta.total_seconds())


def decoded(value: bytes | str) -> str:
    """A name Redis answered, as text."""
    return value.decode() if isinstance(value, bytes) else value
