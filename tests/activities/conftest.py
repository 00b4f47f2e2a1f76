"""Activity layer fixtures: the capacity store (Valkey, in memory, ``tests.support.valkey``) for
the tests of what the store really does, one server per test module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
import redis.asyncio as redis

from tests.support.valkey import capacity_store_url


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The module's capacity store: its URL."""
    yield from capacity_store_url(tmp_path_factory)


@pytest_asyncio.fixture
async def valkey_client(valkey: str) -> AsyncIterator[redis.Redis]:
    """A client of the module's capacity store, emptied first."""
    client = redis.Redis.from_url(valkey)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()
