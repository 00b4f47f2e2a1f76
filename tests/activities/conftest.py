"""Activity layer fixtures: the capacity store (Valkey, in memory, ``tests.support.valkey``) for
the tests of what the store really does (``store``: our store on it), and the LLM simulator
over HTTP, one server of each per test module (a module that needs another simulator defines its
own ``sim_url``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import aiohttp
import pytest
import pytest_asyncio
import redis.asyncio as redis
from openai import AsyncOpenAI

from aiorch.devstack.llm_simulator import running_simulator
from aiorch_runtime.capacity import CapacityStore
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


@pytest_asyncio.fixture
async def store(valkey: str) -> AsyncIterator[CapacityStore]:
    """Our capacity store on the module's Valkey, emptied first, with a one-minute lease: queue
    places and holds outlive every test."""
    client = redis.Redis.from_url(valkey)
    await client.flushdb()
    capacity = CapacityStore(client, lease=timedelta(seconds=60))
    try:
        yield capacity
    finally:
        await capacity.close()


@pytest_asyncio.fixture(scope="module")
async def sim_url() -> AsyncIterator[str]:
    """The module's LLM simulator: its URL."""
    async with running_simulator() as url:
        yield url


@pytest_asyncio.fixture
async def http(sim_url: str) -> AsyncIterator[aiohttp.ClientSession]:
    """The simulator's control endpoints, its batches and request log cleared; batches are
    done at once."""
    async with aiohttp.ClientSession(base_url=sim_url) as session:
        await session.delete("/_sim/requests")
        await session.delete("/_sim/batches")
        await session.put("/_sim/batches", json={"completion_s": 0})
        yield session


@pytest_asyncio.fixture
async def openai_client(sim_url: str) -> AsyncIterator[AsyncOpenAI]:
    """The real ``openai`` client on the simulator, without retries of its own."""
    async with AsyncOpenAI(
        base_url=f"{sim_url}/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        yield client
