"""The batch lane's submission and collection in the fast tier: ``submit_batch`` and
``collect_batch`` in Temporal's activity environment against the LLM simulator's Files and
Batches API over real HTTP, the group's calls kept by the real `BatchStore` in the real store
(Valkey in memory, tests/support/valkey.py), queued through its ``enqueue`` as the lane queues
them (tests/activities/batch_lane.py; tests/activities/test_batch_enqueue.py runs the lane's
handoff on the time-skipping server, tests/e2e/test_batch_lane.py and
tests/e2e/test_batch_crash.py run it whole). The owner check is attacked in
tests/security/test_batch_lane_abuse.py.

Rounds 1 and 2 are run, and round 0 only with every call dropped, so no run is told anything:
there is no Temporal client here.

An expired batch's second round holds its unfinished calls only (one answered but not yet
delivered is not paid for twice); answered calls are priced at the batch rate; a submission
retried after its worker died finds the batch it created instead of creating another; calls
whose runs stopped waiting are not submitted."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import aiohttp
import pytest
import redis.asyncio as redis
from openai import AsyncOpenAI
from temporalio.exceptions import ApplicationError

from activities.batch_calls import item_name
from activities.llm_reply import call_cost
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStoreError
from aiorch_runtime.config import DEFAULT_PRICE_TABLE
from tests.activities.batch_lane import (
    ITEM_TTL,
    MODEL,
    Lane,
    answered_lines,
    asked,
    reserved,
    sim_batches,
    spend_gate,
)
from tests.activities.llm_calls import call
from workflows.payloads import BatchSubmitted


class RecordFails(BatchStore):
    """The real store, but its ``record_batch`` fails, as if the store (or the worker) died
    right after the provider created the batch."""

    async def record_batch(self, scope: str, group: int, round_: int, batch_id: str) -> None:
        raise CapacityStoreError("capacity store: ConnectionError: the worker died")


async def test_an_expired_batch_s_next_round_holds_only_its_unfinished_calls(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """A batch of three expires after answering one, whose run has not taken its answer yet:
    the next round submits the two unfinished calls only, its answers are collected, and the
    kept answer is handed over again; each call was answered exactly once. The group keeps
    its batches while a call is unfinished, and is forgotten once none is."""
    calls = asked(3)
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL))
    await lane.open_group(calls)
    await http.put("/_sim/batches", json={"completion_s": 0, "expire_after": 1})
    first = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    assert first.calls == 3
    assert first.batch_id == await lane.store.batch_of(lane.scope, lane.group, 1)
    collected = await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=first.batch_id)
    )
    assert (collected.answered, collected.unfinished) == (1, 2)
    assert await lane.store.batch_of(lane.scope, lane.group, 1) == first.batch_id
    kept = [item for item, result in (await lane.results(calls)).items() if result is not None]
    assert len(kept) == 1

    await http.put("/_sim/batches", json={"completion_s": 0})
    second = await lane.env().run(lane.activities.submit_batch, lane.round(2))
    assert second.calls == 2
    assert [b["request_counts"]["total"] for b in await sim_batches(http)] == [3, 2]
    last = await lane.env().run(
        lane.activities.collect_batch, lane.round(2, batch_id=second.batch_id, last=True)
    )
    assert (last.answered, last.failed, last.unfinished) == (3, 0, 0)
    for number in (1, 2):
        assert await lane.store.batch_of(lane.scope, lane.group, number) is None
    assert not (await lane.store.owner_of(lane.scope, lane.group))[0]
    assert sorted(await answered_lines(http)) == sorted(item_name(c) for c in calls)


async def test_a_batched_answer_is_priced_at_the_batch_rate(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """Each answered call of a batch costs the batch share of the model's price for the
    tokens it used, below what the same tokens cost in a synchronous call."""
    calls = asked(2)
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL))
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id, last=True)
    )
    results = await lane.results(calls)
    for result in results.values():
        assert result is not None
        assert (result.outcome, result.lane) == ("answered", "batch")
        batch_price = call_cost(DEFAULT_PRICE_TABLE, MODEL, result.usage, "batch")
        sync_price = call_cost(DEFAULT_PRICE_TABLE, MODEL, result.usage, "sync")
        assert batch_price is not None and sync_price is not None
        assert result.cost_usd == pytest.approx(batch_price)
        assert 0 < batch_price < sync_price


async def test_a_retried_submission_finds_its_batch_instead_of_creating_another(
    openai_client: AsyncOpenAI,
    http: aiohttp.ClientSession,
    valkey_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The provider created the batch, but the attempt died before recording it, and another
    group's batch was created since: the next attempt looks past that one, finds its own by
    its submission key, records it, creates none, and logs that it found it again."""
    dying = Lane(openai_client, RecordFails(valkey_client, item_ttl=ITEM_TTL))
    await dying.open_group(asked(2))
    with pytest.raises(ApplicationError) as died:
        await dying.env(attempt=1).run(dying.activities.submit_batch, dying.round(1))
    assert not died.value.non_retryable
    [created] = await sim_batches(http)
    assert await dying.store.batch_of(dying.scope, dying.group, 1) is None
    other = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL))
    await other.open_group([call("Another group's question", lane="batch")])
    await other.env().run(other.activities.submit_batch, other.round(1))
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL), dying.group)
    with caplog.at_level(logging.INFO, logger="activities.batch"):
        retried = await lane.env(attempt=2).run(lane.activities.submit_batch, lane.round(1))
    assert retried.batch_id == created["id"]
    assert retried.batch_id == await lane.store.batch_of(lane.scope, lane.group, 1)
    assert len(await sim_batches(http)) == 2
    key = f"{lane.scope}:{lane.group}:r1"
    assert [r.getMessage() for r in caplog.records if r.name == "activities.batch"] == [
        f"batch {created['id']} of submission {key} found again; not submitted twice"
    ]


async def test_a_call_whose_run_stopped_waiting_is_not_submitted(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """A group's first round whose calls' runs stopped waiting for them (their deadlines
    passed) creates no batch: the calls are dropped from the store, their spend reservations
    given back, and counted dropped (their runs retry), in a group of one or of two."""
    capacity, gate = spend_gate(valkey_client, str(openai_client.base_url))
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL), gate=gate)
    for size in (1, 2):
        calls = asked(size, directive=f"of a group of {size}")
        names = [f"reservation-{size}-{number}" for number in range(size)]
        holds = await reserved(capacity, calls[0].tenant, *names)
        await lane.open_group(calls, queue=timedelta(0), holds=holds)
        submitted = await lane.env().run(lane.activities.submit_batch, lane.round(0))
        assert submitted == BatchSubmitted(dropped=size)
        assert await lane.store.calls(lane.scope, [item_name(c) for c in calls]) == []
        assert lane.counted() == {"dropped": size}
    assert await sim_batches(http) == []
    assert await capacity.spend_state(calls[0].tenant, holds[0].day) == (0.0, 0.0)


async def test_a_submission_heartbeats_what_it_is_doing(
    openai_client: AsyncOpenAI, valkey_client: redis.Redis
) -> None:
    """A submission heartbeats each line it writes of the batch's file, then while it
    uploads the file and while it creates the batch (what the Web UI shows of a slow
    submission), as often as the worker's heartbeat interval says."""
    lane = Lane(
        openai_client,
        BatchStore(valkey_client, item_ttl=ITEM_TTL),
        heartbeat_every=timedelta(0),
    )
    await lane.open_group(asked(2))
    details: list[object] = []
    env = lane.env()
    env.on_heartbeat = lambda *beat: details.extend(beat)
    await env.run(lane.activities.submit_batch, lane.round(1))
    assert list(dict.fromkeys(details)) == [
        "writing line 0 of 2",
        "writing line 1 of 2",
        "uploading the batch's file",
        "creating the batch",
    ]


async def test_a_batch_s_file_holds_one_chat_request_a_line_named_by_its_call(
    openai_client: AsyncOpenAI, valkey_client: redis.Redis
) -> None:
    """The file a submission uploads holds, a line each, its calls' Chat Completions requests
    as the provider's batch API takes them (POST to /v1/chat/completions, named by the call's
    custom_id, the model, prompt and run's pipeline's prompt cache key in the body), each
    line ended by a newline; the batch is made of that file for the chat endpoint within
    the 24-hour window."""
    store = BatchStore(valkey_client, item_ttl=ITEM_TTL)
    lane = Lane(openai_client, store, cache_scope="pipeline")
    calls = asked(2)
    await lane.open_group(calls, pipeline="llm")
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    batch = await openai_client.batches.retrieve(str(submitted.batch_id))
    assert (batch.endpoint, batch.completion_window) == ("/v1/chat/completions", "24h")
    uploaded = await openai_client.files.retrieve(batch.input_file_id)
    assert uploaded.purpose == "batch"
    assert uploaded.filename == f"{lane.scope.replace(':', '-')}-{lane.group}-r1.jsonl"
    text = (await openai_client.files.content(batch.input_file_id)).text
    assert text.endswith("\n") and not text.endswith("\n\n")
    lines = {line["custom_id"]: line for line in map(json.loads, text.splitlines())}
    assert sorted(lines) == sorted(item_name(c) for c in calls)
    for made in calls:
        line = lines[item_name(made)]
        assert (line["method"], line["url"]) == ("POST", "/v1/chat/completions")
        assert line["body"]["model"] == MODEL
        assert line["body"]["prompt_cache_key"] == "aiorch:llm"
        assert line["body"]["messages"][-1]["content"].endswith(made.user_prompt)
