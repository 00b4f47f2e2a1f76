"""The capacity store's connection pool in the fast tier, against the real store (Valkey in
memory, tests/support/valkey.py; the store's scripts: tests/e2e/test_capacity_store.py): a
worker's store shares STORE_CONNECTIONS connections, and a burst larger than that waits for
one instead of failing or opening more."""

from __future__ import annotations

import asyncio

import redis.asyncio as redis

from aiorch_runtime.capacity import STORE_CONNECTIONS, CapacityStore
from aiorch_runtime.config import Settings


async def test_a_burst_waits_for_the_pool_s_connections_and_uses_them_all(valkey: str) -> None:
    """Three times STORE_CONNECTIONS operations at once through a worker's store
    (``from_settings``): every one is answered, none refused with "Too many connections", and
    the server has seen exactly STORE_CONNECTIONS connections of the store's (a pool keeps
    the connections it opened)."""
    observer = redis.Redis.from_url(valkey)
    store = CapacityStore.from_settings(Settings(capacity_store_url=valkey))
    assert store is not None
    try:
        await observer.config_resetstat()
        burst = STORE_CONNECTIONS * 3
        answers = await asyncio.gather(*(store.redis.get(f"k{n}") for n in range(burst)))
        clients = await observer.info("clients")
        gets = (await observer.info("commandstats"))["cmdstat_get"]["calls"]
    finally:
        await store.close()
        await observer.aclose()
    assert answers == [None] * burst
    assert clients["connected_clients"] == STORE_CONNECTIONS + 1  # the observer's own
    assert gets == burst
