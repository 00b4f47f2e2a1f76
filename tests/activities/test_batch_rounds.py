"""The batch lane's submission and collection in the fast tier: ``submit_batch`` and
``collect_batch`` in Temporal's activity environment against the LLM simulator's Files and
Batches API over real HTTP. The group's calls are kept by `GroupInMemory`, the store's part
these activities read and write (the real store runs Lua in Redis: tests/e2e/test_batch_lane.py
and tests/e2e/test_batch_crash.py run it whole); no run waits for an answer here, so no run is
told one.

An expired batch's second round holds its unfinished calls only (one answered but not yet
delivered is not paid for twice); answered calls are priced at the batch rate; a submission
retried after its worker died finds the batch it created instead of creating another."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

import aiohttp
import pytest
import pytest_asyncio
import redis.asyncio as redis
from openai import AsyncOpenAI
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.batch import BatchActivities, item_name
from activities.batch_groups import group_workflow_id
from activities.llm import LlmActivities, call_cost
from activities.prompt import InputLoader
from aiorch.devstack.llm_simulator import running_simulator
from aiorch.runtime.batch_store import BatchStore, QueuedCall
from aiorch.runtime.capacity import CapacityStoreError, scope_name
from aiorch.runtime.config import DEFAULT_PRICE_TABLE
from tests.activities.llm_calls import call
from workflows.payloads import BatchRound, LlmCallResult

MODEL = "sim-large"
GROUP = 7
FAR = 2**62  # a run that waits for its submission as long as it takes


class GroupInMemory(BatchStore):
    """One group's calls as the store keeps them, in memory: what each call is, its result
    once answered, and the batch of each round; ``fail_records`` record_batch calls fail as
    if the store (or the worker) died right after the provider created the batch."""

    def __init__(self, calls: list[QueuedCall]) -> None:
        super().__init__(redis.Redis(), item_ttl=timedelta(days=1))  # never connects
        self.items = {queued.item: queued for queued in calls}
        self.rounds: dict[int, str] = {}
        self.fail_records = 0

    async def claim(self, scope: str, group: int) -> tuple[int, list[str]]:
        return 0, list(self.items)

    async def calls(self, scope: str, items: list[str]) -> list[QueuedCall]:
        return [self.items[item] for item in items if item in self.items]

    async def drop(self, scope: str, items: list[str]) -> None:
        for item in items:
            self.items.pop(item, None)

    async def owner_of(self, scope: str, group: int) -> tuple[bool, str]:
        return True, ""  # opened, by a lane that kept no owner token: the group's id alone

    async def batch_of(self, scope: str, group: int, round_: int) -> str | None:
        return self.rounds.get(round_)

    async def record_batch(self, scope: str, group: int, round_: int, batch_id: str) -> None:
        if self.fail_records:
            self.fail_records -= 1
            raise CapacityStoreError("capacity store: ConnectionError: the worker died")
        self.rounds[round_] = batch_id

    async def answer(self, scope: str, item: str, result: str) -> tuple[bool, bytes | None]:
        if item not in self.items:
            return False, None
        self.items[item] = dataclasses.replace(self.items[item], result=result)
        return True, None  # no run's await_batch waits yet: the answer is kept

    async def finish(self, scope: str, group: int, rounds: int) -> None:
        self.rounds.clear()

    def result(self, item: str) -> LlmCallResult:
        kept = self.items[item].result
        assert kept is not None, f"{item} has no result"
        return LlmCallResult.model_validate_json(kept)


@pytest_asyncio.fixture(scope="module")
async def sim_url() -> AsyncIterator[str]:
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
    async with AsyncOpenAI(
        base_url=f"{sim_url}/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        yield client


def queued(n: int) -> list[QueuedCall]:
    """A group of ``n`` batch-lane calls, none answered yet."""
    found = []
    for number in range(n):
        asked = call(f"Batched question {number}", lane="batch")
        found.append(
            QueuedCall(
                item=item_name(asked),
                call=asked.model_dump_json(),
                token=b"",
                pipeline="",
                spend="",
                cache="",
                deadline_ms=FAR,
                result=None,
            )
        )
    return found


class Lane:
    """``submit_batch`` and ``collect_batch`` of one group, as its workflow runs them."""

    def __init__(self, client: AsyncOpenAI, store: GroupInMemory) -> None:
        llm = LlmActivities(client, InputLoader(), timeout_s=10, prices=DEFAULT_PRICE_TABLE)
        self.activities = BatchActivities(
            llm,
            client,
            cast(Client, None),  # tells waiting runs their outcomes: none waits here
            store,
            base_url=str(client.base_url),
            prices=DEFAULT_PRICE_TABLE,
        )
        self.scope = scope_name(str(client.base_url), MODEL)

    def env(self, attempt: int = 1) -> ActivityEnvironment:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            env.info, workflow_id=group_workflow_id(self.scope, GROUP), attempt=attempt
        )
        return env

    def round(self, number: int, **fields: Any) -> BatchRound:
        return BatchRound(scope=self.scope, model=MODEL, group=GROUP, round=number, **fields)


async def sim_batches(http: aiohttp.ClientSession) -> list[dict[str, Any]]:
    async with http.get("/_sim/batches") as got:
        batches: list[dict[str, Any]] = (await got.json())["batches"]
    return batches


async def answered_lines(http: aiohttp.ClientSession) -> list[str]:
    """The custom ids of the batch lines the simulator answered, in order."""
    async with http.get("/_sim/requests") as got:
        return [entry["custom_id"] for entry in await got.json() if entry["custom_id"]]


async def test_an_expired_batch_s_next_round_holds_only_its_unfinished_calls(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    """A batch of three expires after answering one, whose run has not taken its answer yet:
    the next round submits the two unfinished calls only, its answers are collected, and the
    kept answer is handed over again; each call was answered exactly once."""
    calls = queued(3)
    store = GroupInMemory(calls)
    lane = Lane(openai_client, store)
    await http.put("/_sim/batches", json={"completion_s": 0, "expire_after": 1})
    first = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    assert (first.calls, first.batch_id) == (3, store.rounds[1])
    collected = await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=first.batch_id)
    )
    assert (collected.answered, collected.unfinished) == (1, 2)
    kept = [c.item for c in store.items.values() if c.result is not None]
    assert len(kept) == 1

    await http.put("/_sim/batches", json={"completion_s": 0})
    second = await lane.env().run(lane.activities.submit_batch, lane.round(2))
    assert second.calls == 2
    assert [b["request_counts"]["total"] for b in await sim_batches(http)] == [3, 2]
    last = await lane.env().run(
        lane.activities.collect_batch, lane.round(2, batch_id=second.batch_id, last=True)
    )
    assert (last.answered, last.failed, last.unfinished) == (3, 0, 0)
    assert sorted(await answered_lines(http)) == sorted(c.item for c in calls)


async def test_a_batched_answer_is_priced_at_the_batch_rate(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    """Each answered call of a batch costs the batch share of the model's price for the
    tokens it used, below what the same tokens cost in a synchronous call."""
    calls = queued(2)
    store = GroupInMemory(calls)
    lane = Lane(openai_client, store)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id, last=True)
    )
    for queued_call in calls:
        result = store.result(queued_call.item)
        assert (result.outcome, result.lane) == ("answered", "batch")
        batch_price = call_cost(DEFAULT_PRICE_TABLE, MODEL, result.usage, "batch")
        sync_price = call_cost(DEFAULT_PRICE_TABLE, MODEL, result.usage, "sync")
        assert batch_price is not None and sync_price is not None
        assert result.cost_usd == pytest.approx(batch_price)
        assert 0 < batch_price < sync_price


async def test_a_retried_submission_finds_its_batch_instead_of_creating_another(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    """The provider created the batch, but the attempt died before recording it: the next
    attempt finds that batch by its submission key, records it, and creates none."""
    store = GroupInMemory(queued(2))
    store.fail_records = 1
    lane = Lane(openai_client, store)
    with pytest.raises(ApplicationError) as died:
        await lane.env(attempt=1).run(lane.activities.submit_batch, lane.round(1))
    assert not died.value.non_retryable
    [created] = await sim_batches(http)
    retried = await lane.env(attempt=2).run(lane.activities.submit_batch, lane.round(1))
    assert retried.batch_id == created["id"] == store.rounds[1]
    assert len(await sim_batches(http)) == 1
