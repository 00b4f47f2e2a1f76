"""Tenants' fair share of a model's queue, in tokens, against a real capacity store (Valkey,
``tests.support.valkey``): weighted shares while tenants are busy, an idle tenant's share
going to the others, first come first served within a tenant, the more urgent first within
its share, and a large call of a light tenant served in bounded time."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import date, timedelta

import pytest
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from activities.capacity import CallGate, Settlement
from activities.capacity_metrics import (
    METRIC_QUEUE_WAIT,
    METRIC_SPILL_OVERS,
    METRIC_TENANT_TOKENS,
)
from activities.prompt_tokens import prompt_tokens
from activities.spend import today
from aiorch.cli.budgets import spend_report
from aiorch_runtime.capacity import CapacityStore, ProviderSignal
from aiorch_runtime.capacity_keys import scope_keys, scope_name
from aiorch_runtime.config import DEFAULT_PRICE_TABLE, RateLimit, Settings
from tests.activities.llm_calls import call

BASE_URL = "http://127.0.0.1:1/v1"
SCOPE = scope_name(BASE_URL, "sim-large")
WEIGHTS = {"acme": 3.0, "beta": 1.0}


async def drained(store: CapacityStore, limits: tuple[int, int]) -> None:
    """Empty the token bucket (a settlement of a minute's tokens without a hold)."""
    await store.settle(SCOPE, limits, hold_id="none", used=limits[0], called=True)


async def join(
    store: CapacityStore,
    limits: tuple[int, int],
    tenant: str,
    member: str,
    tokens: int = 100,
    priority: int = 3,
    weight: float | None = None,
) -> timedelta:
    """Ask for ``tokens`` as ``member`` of ``tenant`` (refused: queued); the wait told."""
    grant = await store.reserve(
        SCOPE,
        limits,
        hold_id=f"h-{member}",
        member=member,
        tokens=tokens,
        tenant=tenant,
        weight=weight or WEIGHTS[tenant],
        priority=priority,
    )
    assert not grant.granted, f"{member} was granted: the bucket was not drained"
    return grant.wait


def weighted_gate(store: CapacityStore, tpm: int) -> CallGate:
    """A worker's gate for ``sim-large`` at ``tpm`` with the tenants' weights, acme named in
    the metrics, no budgets, and no waiting inside the activity."""
    return CallGate(
        store,
        base_url=BASE_URL,
        rate_limits={"sim-large": RateLimit(tpm=tpm)},
        prices=DEFAULT_PRICE_TABLE,
        tenant_budget=lambda _: None,
        max_output_tokens=10,
        tenant_weight=lambda tenant: WEIGHTS.get(tenant, 1.0),
        named_tenants=frozenset({"acme"}),
        inline_wait=timedelta(0),
    )


def tenant_of(member: str) -> str:
    return member.split("-")[0]


async def test_two_busy_tenants_are_ordered_by_their_weights(store: CapacityStore) -> None:
    """acme (weight 3) queues 30 calls, then beta (weight 1) 10 of the same size: in the
    queue's order every four places hold three of acme's and one of beta's (beta is not
    served after all 30 of acme's), and each tenant's calls keep their own arrival order."""
    limits = (6000, 0)
    await drained(store, limits)
    for n in range(30):
        await join(store, limits, "acme", f"acme-{n:02}")
    for n in range(10):
        await join(store, limits, "beta", f"beta-{n:02}")
    order = await store.queued(SCOPE, limits)
    assert len(order) == 40
    for end in range(4, 41, 4):
        betas = sum(tenant_of(m) == "beta" for m in order[:end])
        assert abs(betas - end // 4) <= 1, (end, order[:end])
    for tenant in WEIGHTS:
        own = [m for m in order if tenant_of(m) == tenant]
        assert own == sorted(own)


async def test_busy_tenants_get_their_weighted_share_of_granted_tokens(
    store: CapacityStore,
) -> None:
    """Both tenants keep eight calls queued for 6 s against 1,000 tokens a second (100 each),
    coming back when told: acme (weight 3) gets 75% of the tokens granted, beta 25%, within
    six points."""
    limits = (60000, 0)
    await drained(store, limits)
    granted: Counter[str] = Counter()
    deadline = time.monotonic() + 6.0

    async def caller(tenant: str, lane: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            member = f"{tenant}-{lane}-{n}"
            grant = await store.reserve(
                SCOPE,
                limits,
                hold_id=member,
                member=member,
                tokens=100,
                tenant=tenant,
                weight=WEIGHTS[tenant],
            )
            if not grant.granted:
                await asyncio.sleep(grant.wait.total_seconds())
                continue
            if time.monotonic() < deadline:
                granted[tenant] += 100
            await store.settle(SCOPE, limits, hold_id=member, used=100, called=True)
            n += 1

    await asyncio.gather(*(caller(t, lane) for t in WEIGHTS for lane in range(8)))
    total = sum(granted.values())
    assert total >= 4000, granted
    assert granted["acme"] / total == pytest.approx(0.75, abs=0.06), granted


async def test_an_idle_tenants_share_goes_to_the_busy_one_without_credit(
    store: CapacityStore,
) -> None:
    """With beta (weight 1) idle, acme alone is granted the whole limit (about 1,000 tokens a
    second for 3 s); beta then arriving gets its share from then on, not the time it was
    idle: its calls are interleaved one in four with acme's, not all put first."""
    limits = (60000, 0)
    await drained(store, limits)
    granted = 0
    started = time.monotonic()
    deadline = started + 3.0

    async def caller(lane: int) -> None:
        nonlocal granted
        n = 0
        while time.monotonic() < deadline:
            member = f"acme-{lane}-{n}"
            grant = await store.reserve(
                SCOPE, limits, hold_id=member, member=member, tokens=100, tenant="acme", weight=3
            )
            if not grant.granted:
                await asyncio.sleep(grant.wait.total_seconds())
                continue
            if time.monotonic() < deadline:
                granted += 100
            await store.settle(SCOPE, limits, hold_id=member, used=100, called=True)
            n += 1

    await asyncio.gather(*(caller(lane) for lane in range(8)))
    assert granted >= 0.85 * 1000 * (deadline - started)
    # acme floods the queue again; beta comes back after being idle.
    for n in range(12):
        await join(store, limits, "acme", f"acme-x-{n:02}")
    for n in range(4):
        await join(store, limits, "beta", f"beta-{n}")
    order = await store.queued(SCOPE, limits)
    first_betas = [i for i, m in enumerate(order) if tenant_of(m) == "beta"]
    assert first_betas[-1] >= 12, order


async def test_priority_orders_a_tenants_calls_within_its_share(store: CapacityStore) -> None:
    """An urgent call (priority 1) of acme goes ahead of acme's calls queued before it, but
    not ahead of beta's: it takes the place of acme's first call, so beta keeps its places."""
    limits = (6000, 0)
    await drained(store, limits)
    for n in range(6):
        await join(store, limits, "acme", f"acme-{n}")
    for n in range(2):
        await join(store, limits, "beta", f"beta-{n}")
    before = await store.queued(SCOPE, limits)
    await join(store, limits, "acme", "acme-urgent", priority=1)
    await join(store, limits, "acme", "acme-next", priority=2)
    after = await store.queued(SCOPE, limits)
    acme = [m for m in after if tenant_of(m) == "acme"]
    assert acme[:2] == ["acme-urgent", "acme-next"]
    assert acme[2:] == [f"acme-{n}" for n in range(6)]
    assert after.index("acme-urgent") == before.index("acme-0")
    for beta in ("beta-0", "beta-1"):
        assert after.index(beta) <= before.index(beta) + 2


async def test_a_big_call_of_a_light_tenant_is_not_starved(store: CapacityStore) -> None:
    """beta (weight 1) queues one 1,200-token call while acme (weight 3) keeps queueing
    100-token calls: acme's calls after about 36 more go behind it (its place is fixed by its
    virtual finish, not pushed back by every newcomer)."""
    limits = (6000, 0)
    await drained(store, limits)
    await join(store, limits, "acme", "acme-000")
    await join(store, limits, "beta", "beta-big", tokens=1200)
    for n in range(1, 60):
        await join(store, limits, "acme", f"acme-{n:03}")
    order = await store.queued(SCOPE, limits)
    place = order.index("beta-big")
    assert 30 <= place <= 40, order
    assert all(tenant_of(m) == "acme" for m in order[place + 1 :])


async def test_a_call_joining_ahead_pushes_back_the_turns_already_told(
    store: CapacityStore,
) -> None:
    """acme's two queued calls were told their turns (1 s and 2 s at 100 tokens a second); a
    call of gamma (weight 6), which the fair order puts ahead of both, pushes each turn back by
    its own demand (1 s), so acme's first call, asking again, is told about 2 s, not 1 s."""
    limits = (6000, 0)
    await drained(store, limits)
    first = await join(store, limits, "acme", "acme-0")
    await join(store, limits, "acme", "acme-1")
    assert first == pytest.approx(timedelta(seconds=1), abs=timedelta(seconds=0.2))
    ahead = await join(store, limits, "gamma", "gamma-0", weight=6.0)
    assert ahead == pytest.approx(timedelta(seconds=1), abs=timedelta(seconds=0.2))
    again = await join(store, limits, "acme", "acme-0")
    assert again == pytest.approx(timedelta(seconds=2), abs=timedelta(seconds=0.25))


async def test_a_tenant_name_weight_or_priority_out_of_range_is_refused(
    store: CapacityStore,
) -> None:
    """A tenant that is not a tenant name, a weight of 0 or a priority of 6 never reaches a
    script (they would spell the queue's fields wrong)."""
    for tenant, weight, priority in (("bad tenant", 1.0, 3), ("acme", 0.0, 3), ("acme", 1.0, 6)):
        with pytest.raises(ValueError, match="weight"):
            await store.reserve(
                SCOPE,
                (6000, 0),
                hold_id="h",
                member="m",
                tokens=1,
                tenant=tenant,
                weight=weight,
                priority=priority,
            )
    assert await store.queued(SCOPE, (6000, 0)) == []


async def test_the_gate_queues_calls_in_their_tenants_share_and_counts_them(
    store: CapacityStore,
) -> None:
    """Through the LLM activity's gate (TENANT_WEIGHTS acme=3): calls of acme and beta refused
    at once are queued each in its own tenant's share, three of acme's to one of beta's, beta's
    urgent call (priority 1) first among beta's but not before acme's turns; granted when its
    turn comes, that call's time in the queue and its tokens are recorded under its tenant's
    label (``other``: no setting names beta, and labels must stay few), and its settlement
    counts its tokens as beta's use of the model today in the store."""
    messages = [{"role": "user", "content": "Summarise the quarterly report."}]
    need = prompt_tokens(messages).estimate + 10
    limits = (need * 600, 0)
    gate = weighted_gate(store, limits[0])
    buffer = MetricBuffer(1000)
    environment = ActivityEnvironment()
    environment.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    calls = [call("report", workflow_id=f"acme-{n}", tenant="acme") for n in range(6)]
    calls.append(call("report", workflow_id="beta-0", tenant="beta"))
    urgent = call("report", workflow_id="beta-urgent", tenant="beta", priority=1)
    calls.append(urgent)
    await drained(store, limits)
    for each in calls:
        assert (await environment.run(gate.admit, each, messages)).kind == "wait"
    # Each call is queued in its own tenant's share: the store's order is the shares', not
    # one queue by priority (which would put beta's urgent call before all of acme's).
    assert await store.queued(SCOPE, limits) == [
        *("acme-0", "acme-1", "acme-2"),
        "beta-urgent",
        *("acme-3", "acme-4"),
        "beta-0",
        "acme-5",
    ]
    admission = await environment.run(gate.admit, urgent, messages)
    while admission.kind == "wait":
        assert admission.wait is not None
        await asyncio.sleep(admission.wait.total_seconds())
        admission = await environment.run(gate.admit, urgent, messages)
    assert admission.kind == "go"
    done = Settlement(used=need - 3, called=True, signal=ProviderSignal(), cost_usd=None)
    await environment.run(gate.settle, admission, urgent, done)
    updates = buffer.retrieve_updates()
    waits = [u for u in updates if u.metric.name == METRIC_QUEUE_WAIT]
    assert [u.attributes["tenant"] for u in waits] == ["other"]
    assert 0 < float(waits[0].value) < 2
    tokens = [u for u in updates if u.metric.name == METRIC_TENANT_TOKENS]
    assert [(u.attributes["tenant"], u.value) for u in tokens] == [("other", need - 3)]
    assert (await store.usage(SCOPE, today()))["beta"] == need - 3


async def test_spend_shows_each_tenants_weight_share_due_and_share_used(
    store: CapacityStore, valkey: str
) -> None:
    """``aiorch spend``'s report: acme (weight 3) used 6,000 tokens of the rate-limited model
    and beta (weight 1) 2,000, so each used the share its weight is due (75% and 25%); globex
    spent without using a rate-limited model (no tokens, no share); a day without any use
    shows no shares at all."""
    settings = Settings(
        capacity_store_url=valkey,
        llm_rate_limits={"sim-large": RateLimit(tpm=60000)},
        tenant_weights="acme=3",
        tenant_budgets_usd={"acme": 5.0},
    )
    scope = scope_name(settings.openai_base_url, "sim-large")
    day = today()
    for tenant, used in (("acme", 4000), ("beta", 2000), ("acme", 2000)):
        await store.settle(scope, (60000, 0), hold_id="x", used=used, called=True, tenant=tenant)
    await store.settle_call("globex", day, 0.25, call="c1")
    rows = {row["tenant"]: row for row in await spend_report(store, settings, day, None)}
    assert set(rows) == {"acme", "beta", "globex"}
    assert (rows["acme"]["weight"], rows["acme"]["weighted_share"]) == (3.0, 0.75)
    assert (rows["acme"]["tokens"], rows["acme"]["token_share"]) == (6000, 0.75)
    assert (rows["beta"]["weighted_share"], rows["beta"]["token_share"]) == (0.25, 0.25)
    assert (rows["globex"]["tokens"], rows["globex"]["token_share"]) == (0, 0.0)
    assert rows["globex"]["spent_usd"] == 0.25
    only = await spend_report(store, settings, day, "beta")
    assert [(row["tenant"], row["token_share"]) for row in only] == [("beta", 0.25)]
    earlier = await spend_report(store, settings, date(2026, 1, 1), None)
    assert earlier == []


async def test_a_tenant_with_nothing_queued_leaves_nothing_behind(store: CapacityStore) -> None:
    """Once a tenant's last queued call is granted, the store keeps nothing of that tenant in
    the queue's keys: runs naming a new tenant each cannot grow them without end."""
    limits = (60000, 0)
    await drained(store, limits)
    for n in range(3):
        await join(store, limits, "once", f"once-{n}", weight=1.0)
    tags = scope_keys(SCOPE)[8]
    assert await store.redis.hlen(tags) == 2
    for n in range(3):
        grant = await store.reserve(
            SCOPE, limits, hold_id=f"h{n}", member=f"once-{n}", tokens=100, tenant="once"
        )
        while not grant.granted:
            await asyncio.sleep(grant.wait.total_seconds())
            grant = await store.reserve(
                SCOPE, limits, hold_id=f"h{n}", member=f"once-{n}", tokens=100, tenant="once"
            )
    assert await store.queued(SCOPE, limits) == []
    assert await store.redis.hlen(tags) == 0


async def test_a_spilled_call_takes_no_capacity_and_is_counted_under_its_tenant(
    store: CapacityStore,
) -> None:
    """A call that spilled over to the batch lane goes at once though its model has no tokens
    left (batches take no capacity) and is counted as a spill-over under its tenant's label
    (acme: named by the settings; beta: ``other``); a call batched from the start goes as well
    and is no spill-over."""
    messages = [{"role": "user", "content": "Summarise the quarterly report."}]
    limits = (6000, 0)
    gate = weighted_gate(store, limits[0])
    buffer = MetricBuffer(1000)
    environment = ActivityEnvironment()
    environment.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    await drained(store, limits)
    batched = [
        call("spill", workflow_id="acme-s", tenant="acme", lane="batch", spilled=True),
        call("spill", workflow_id="beta-s", tenant="beta", lane="batch", spilled=True),
        call("batched", workflow_id="acme-b", tenant="acme", lane="batch"),
    ]
    for each in batched:
        admission = await environment.run(gate.admit, each, messages)
        assert (admission.kind, admission.hold) == ("go", None)
    assert await store.queued(SCOPE, limits) == []
    spills = [u for u in buffer.retrieve_updates() if u.metric.name == METRIC_SPILL_OVERS]
    assert [(u.attributes["tenant"], u.attributes["model"], u.value) for u in spills] == [
        ("acme", "sim-large", 1),
        ("other", "sim-large", 1),
    ]
