"""The capacity store's connection pool in the fast tier, against a Redis stand-in over the
wire (tests/support/redis_wire.py; the real store: tests/e2e/test_capacity_store.py): a
worker's store shares STORE_CONNECTIONS connections, and a burst larger than that waits for
one instead of failing or opening more."""

from __future__ import annotations

import asyncio

from aiorch.runtime.capacity import STORE_CONNECTIONS, CapacityStore
from aiorch.runtime.config import Settings
from tests.support.redis_wire import redis_wire


async def test_a_burst_waits_for_the_pool_s_connections_and_uses_them_all() -> None:
    """Three times STORE_CONNECTIONS operations at once through a worker's store
    (``from_settings``): every one is answered, none refused with "Too many connections", and
    the server sees exactly STORE_CONNECTIONS connections open at most."""
    async with redis_wire() as wire:
        store = CapacityStore.from_settings(Settings(capacity_store_url=wire.url))
        assert store is not None
        try:
            burst = STORE_CONNECTIONS * 3
            answers = await asyncio.gather(*(store.redis.get(f"k{n}") for n in range(burst)))
        finally:
            await store.close()
        assert answers == [None] * burst
        assert wire.peak == STORE_CONNECTIONS
        assert sum(command[0] == b"GET" for command in wire.commands) == burst
