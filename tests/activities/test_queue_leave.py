"""A place leaving a model's queue (a call spilled over to the batch lane), against a real
capacity store (Valkey, ``tests.support.valkey``): the places behind it are told shorter
waits at once, leaving is idempotent, the queue keeps its order, a tenant's next call takes
the place its last one left, and a gate whose store is out of reach still lets the spill go."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities.capacity import CallGate
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_keys, scope_name
from aiorch_runtime.config import DEFAULT_PRICE_TABLE, RateLimit
from tests.activities.llm_calls import call
from tests.support.capacity_store import unreachable_store

BASE_URL = "http://127.0.0.1:1/v1"
SCOPE = scope_name(BASE_URL, "sim-large")
# 100 tokens a second: a 100-token call's turn is a second after the one ahead of it.
LIMITS = (6000, 0)
WEIGHTS = {"acme": 3.0, "beta": 1.0}


async def queued(
    store: CapacityStore, member: str, tokens: int = 100, *, scope: str = SCOPE
) -> timedelta:
    """Ask for ``tokens`` as ``member`` (its tenant the name's start, ``acme-1``: acme) once
    ``scope``'s bucket is empty: the wait told, its place kept."""
    tenant = member.split("-")[0]
    grant = await store.reserve(
        scope,
        LIMITS,
        hold_id=f"h-{member}",
        member=member,
        tokens=tokens,
        tenant=tenant,
        weight=WEIGHTS[tenant],
    )
    assert not grant.granted, f"{member} was granted: the bucket was not drained"
    return grant.wait


async def drained(store: CapacityStore, scope: str = SCOPE) -> None:
    """Empty ``scope``'s token bucket (a settlement of a minute's tokens without a hold)."""
    await store.settle(scope, LIMITS, hold_id="none", used=LIMITS[0], called=True)


async def test_a_call_behind_a_place_that_leaves_is_told_a_shorter_wait_at_once(
    store: CapacityStore,
) -> None:
    """Two models with the same queue, acme's ``spilled`` (100 tokens, turn in 1 s) ahead of
    ``behind`` (turn in 2 s): where ``spilled`` leaves, ``behind`` asking again is told about
    1 s and a newcomer about 2 s; where it stays, 2 s and 3 s."""
    stays = scope_name(BASE_URL, "sim-small")
    for scope in (SCOPE, stays):
        await drained(store, scope)
        await queued(store, "acme-spilled", scope=scope)
        told = await queued(store, "acme-behind", scope=scope)
        assert told == pytest.approx(timedelta(seconds=2), abs=timedelta(seconds=0.25))
    assert await store.leave(SCOPE, LIMITS, member="acme-spilled", weight=3.0)
    second = timedelta(seconds=1)
    assert await queued(store, "acme-behind") == pytest.approx(second, abs=0.25 * second)
    assert await queued(store, "beta-new") == pytest.approx(2 * second, abs=0.25 * second)
    assert await queued(store, "acme-behind", scope=stays) == pytest.approx(
        2 * second, abs=0.25 * second
    )
    assert await queued(store, "beta-new", scope=stays) == pytest.approx(
        3 * second, abs=0.25 * second
    )


async def test_leaving_twice_or_without_a_place_is_harmless(store: CapacityStore) -> None:
    """A place leaves once: leaving again, leaving a place never queued, one granted (its hold
    stays) or one that lapsed (its run never came back) changes nothing and says so; a weight
    of 0 never reaches the script."""
    grant = await store.reserve(SCOPE, LIMITS, hold_id="h-granted", member="acme-g", tokens=100)
    assert grant.granted
    await drained(store)
    await queued(store, "acme-0")
    await queued(store, "acme-1")
    assert await store.leave(SCOPE, LIMITS, member="acme-0", weight=3.0)
    before = await store.redis.hgetall(scope_keys(SCOPE)[6])
    for member in ("acme-0", "acme-never", "acme-g"):
        assert not await store.leave(SCOPE, LIMITS, member=member, weight=3.0)
    assert await store.queued(SCOPE, LIMITS) == ["acme-1"]
    assert await store.redis.hgetall(scope_keys(SCOPE)[6]) == before
    assert "h-granted" in await store.held(SCOPE)
    with pytest.raises(ValueError, match="weight"):
        await store.leave(SCOPE, LIMITS, member="acme-1", weight=0.0)
    short = CapacityStore(store.redis, lease=timedelta(milliseconds=200))
    lapsing = await short.reserve(SCOPE, LIMITS, hold_id="h-l", member="lapsed", tokens=100)
    assert not lapsing.granted
    await asyncio.sleep(1.0)
    assert not await short.leave(SCOPE, LIMITS, member="lapsed", weight=1.0)


async def test_the_queue_keeps_its_order_and_the_tenant_takes_its_last_place_again(
    store: CapacityStore,
) -> None:
    """acme (weight 3, 100-token calls) and beta (weight 1) queued interleaved; acme's second
    call leaving keeps every other place in its order, acme's later calls and beta's alike;
    acme's last call leaving lets acme's next call take its place, ahead of beta's call that
    was queued after it (not behind, as a place that only lapsed would leave it)."""
    await drained(store)
    for n in range(4):
        await queued(store, f"acme-{n}")
    await queued(store, "beta-0", tokens=150)
    await queued(store, "acme-4")
    await queued(store, "acme-5")
    await queued(store, "beta-1", tokens=70)
    order = await store.queued(SCOPE, LIMITS)
    assert order == [*(f"acme-{n}" for n in range(4)), "beta-0", "acme-4", "acme-5", "beta-1"]
    assert await store.leave(SCOPE, LIMITS, member="acme-1", weight=3.0)
    order.remove("acme-1")
    assert await store.queued(SCOPE, LIMITS) == order
    assert await store.leave(SCOPE, LIMITS, member="acme-5", weight=3.0)
    await queued(store, "acme-6")
    assert await store.queued(SCOPE, LIMITS) == [*order[:-2], "acme-6", "beta-1"]


async def test_a_spill_goes_ahead_while_the_store_is_out_of_reach() -> None:
    """A spilled call's gate, its store out of reach, still lets the call go to the batch lane
    (its place lapses as an abandoned one does)."""
    store = unreachable_store(timedelta(seconds=60))
    gate = CallGate(
        store,
        base_url=BASE_URL,
        rate_limits={"sim-large": RateLimit(tpm=LIMITS[0])},
        prices=DEFAULT_PRICE_TABLE,
        tenant_budget=lambda _: None,
        max_output_tokens=10,
    )
    spilled = call("spill", workflow_id="acme-s", tenant="acme", lane="batch", spilled=True)
    messages = [{"role": "user", "content": "spill"}]
    try:
        admission = await ActivityEnvironment().run(gate.admit, spilled, messages)
    finally:
        await store.close()
    assert (admission.kind, admission.hold) == ("go", None)
