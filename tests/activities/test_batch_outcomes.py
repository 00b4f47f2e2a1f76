"""What the batch lane hands each call's run, in the fast tier: ``collect_batch``,
``poll_batch`` and ``await_batch`` in Temporal's activity environment, against the LLM
simulator's batches over real HTTP and the real store (Valkey in memory), the group's calls
queued as the lane queues them (tests/activities/batch_lane.py).

A line the provider refused goes back as the failure its status means, a call a batch never
made waits for the next round (or fails in the last), an answer is kept in the result cache
under its call's digest, a run takes its call's outcome once and only its own, and every call
is counted in the batch calls metric by its outcome."""

from __future__ import annotations

from datetime import timedelta

import aiohttp
import pytest
import redis.asyncio as redis
from openai import AsyncOpenAI
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.exceptions import ApplicationError

from activities.batch_calls import item_name
from activities.spend import today
from aiorch.devstack.processes import free_port
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.genai import METRIC_OPERATION_DURATION, GenAiTelemetry
from aiorch_runtime.result_cache import ResultCache, cache_key
from tests.activities.batch_lane import ITEM_TTL, MODEL, Lane, asked, reserved, spend_gate
from tests.activities.llm_calls import call
from workflows import errors
from workflows.engine.observability import METRIC_LLM_COST, METRIC_LLM_TOKENS
from workflows.payloads import AwaitBatchInput, BatchPolled, CallFailure, LlmCallResult


@pytest.fixture
def lane(openai_client: AsyncOpenAI, valkey_client: redis.Redis) -> Lane:
    return Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL))


async def test_refused_lines_go_back_as_the_failures_their_status_means(
    lane: Lane, http: aiohttp.ClientSession
) -> None:
    """A batch whose three lines the provider refused (a 400, a 503 and a 429 for a spent
    quota, in its error file only): the poll counts three failed of three; each run is handed
    its call's failure in that batch, with the status and the provider's message: the 400
    permanent (the run fails), the 503 retryable (the run retries), and the 429 read by its
    error code as a spent quota, permanent; all are counted failed, and the group is done."""
    calls = [
        *asked(1, directive="[sim:status=400]"),
        *asked(1, directive="[sim:status=503]"),
        *asked(1, directive="[sim:status=429:code=insufficient_quota]"),
    ]
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    assert submitted.batch_id is not None
    polled = await lane.env().run(lane.activities.poll_batch, submitted.batch_id)
    assert polled == BatchPolled(status="completed", done=True, completed=0, failed=3, total=3)
    collected = await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id)
    )
    assert (collected.answered, collected.failed, collected.unfinished) == (0, 3, 0)
    results = await lane.results(calls)
    refused, busy, spent = (results[item_name(c)] for c in calls)
    assert refused is not None and busy is not None and spent is not None
    for result in (refused, busy, spent):
        assert (result.model, result.outcome, result.lane) == (MODEL, "failed", "batch")
        assert result.batch_id == submitted.batch_id
    assert refused.failure is not None and busy.failure is not None and spent.failure is not None
    assert (refused.failure.type, refused.failure.permanent) == (errors.LLM_PERMANENT, True)
    assert refused.failure.error == (
        "LlmPermanent: HTTP 400 from the LLM: Simulated HTTP 400 (invalid_request_error)"
    )
    assert (busy.failure.type, busy.failure.permanent) == (errors.LLM_RETRYABLE, False)
    assert (
        busy.failure.error
        == "LlmRetryable: HTTP 503 from the LLM: Simulated HTTP 503 (server_error)"
    )
    assert (spent.failure.type, spent.failure.permanent) == (errors.LLM_QUOTA_EXHAUSTED, True)
    assert spent.failure.error == (
        "LlmQuotaExhausted: HTTP 429 from the LLM: Simulated HTTP 429 (insufficient_quota)"
    )
    assert lane.counted() == {"submitted": 3, "failed": 3}
    assert await lane.store.batch_of(lane.scope, lane.group, 1) is None


async def test_the_last_round_fails_the_calls_its_expired_batch_never_made(
    lane: Lane, http: aiohttp.ClientSession
) -> None:
    """The last round's batch expires after answering one of two calls: the answered call is
    handed its answer, the other a retryable failure that names the batch and how it ended
    (its run retries); one is counted answered, one unfinished, and nothing is left for a
    round after it."""
    calls = asked(2)
    await lane.open_group(calls)
    await http.put("/_sim/batches", json={"completion_s": 0, "expire_after": 1})
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(2))
    batch_id = submitted.batch_id
    assert batch_id is not None
    polled = await lane.env().run(lane.activities.poll_batch, batch_id)
    assert polled == BatchPolled(status="expired", done=True, completed=1, failed=0, total=2)
    collected = await lane.env().run(
        lane.activities.collect_batch, lane.round(2, batch_id=batch_id, last=True)
    )
    assert (collected.answered, collected.failed, collected.unfinished) == (1, 1, 0)
    outcomes = sorted((await lane.results(calls)).values(), key=lambda r: r.outcome if r else "")
    answered, unmade = outcomes
    assert answered is not None and answered.outcome == "answered"
    assert unmade == LlmCallResult(
        model=MODEL,
        outcome="failed",
        lane="batch",
        batch_id=batch_id,
        failure=CallFailure(
            error=f"LlmRetryable: batch {batch_id} ended expired before this call was made",
            type=errors.LLM_RETRYABLE,
        ),
    )
    assert lane.counted() == {"submitted": 2, "answered": 1, "unfinished": 1}


async def test_a_cancelled_batch_s_calls_wait_for_the_next_round(
    lane: Lane, http: aiohttp.ClientSession, openai_client: AsyncOpenAI
) -> None:
    """A batch cancelled before it made any call has no line for either: both calls are left
    unfinished for the next round (no run is handed a failure), and none is counted."""
    calls = asked(2)
    await lane.open_group(calls)
    await http.put("/_sim/batches", json={"completion_s": 60})
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    assert submitted.batch_id is not None
    polled = await lane.env().run(lane.activities.poll_batch, submitted.batch_id)
    assert (polled.status, polled.done) == ("in_progress", False)
    await openai_client.batches.cancel(submitted.batch_id)
    lane.counted()
    collected = await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id)
    )
    assert (collected.answered, collected.failed, collected.unfinished) == (0, 0, 2)
    assert list((await lane.results(calls)).values()) == [None, None]
    assert lane.counted() == {}


async def test_a_batched_answer_is_kept_in_the_result_cache(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """With the result cache on, each answered call is kept under its tenant and the digest
    its run queued it with, as the answer its run was handed."""
    cache = ResultCache(valkey_client, ttl=timedelta(minutes=5))
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL), results=cache)
    calls = asked(2)
    await lane.open_group(calls, cache="digest-")
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    await lane.env().run(lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id))
    results = await lane.results(calls)
    for number, asked_call in enumerate(calls):
        kept = await cache.get(asked_call.tenant, f"digest-{number}")
        assert kept is not None and kept == results[item_name(asked_call)]
    assert lane.counted() == {"submitted": 2, "answered": 2}


async def test_a_call_queued_without_a_digest_is_not_kept(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """A call whose run did not ask for the result cache (queued with no digest) is answered
    but not kept, though the worker has a cache."""
    cache = ResultCache(valkey_client, ttl=timedelta(minutes=5))
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL), results=cache)
    calls = asked(1)
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    collected = await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id)
    )
    assert collected.answered == 1
    prefix = cache_key(calls[0].tenant, "")
    assert [key async for key in valkey_client.scan_iter(f"{prefix}*")] == []


async def test_a_run_takes_its_batched_answer_once(lane: Lane, http: aiohttp.ClientSession) -> None:
    """A run's await_batch after the collection is handed the answer kept for its call, which
    the store then forgets: asked again, the call is unknown, a retryable failure that names
    the batch (the run retries)."""
    calls = asked(1)
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    batch_id = submitted.batch_id
    assert batch_id is not None
    await lane.env().run(lane.activities.collect_batch, lane.round(1, batch_id=batch_id))
    [kept] = (await lane.results(calls)).values()
    waiting = AwaitBatchInput(item=item_name(calls[0]), model=MODEL, batch_id=batch_id)
    taken = await lane.env(workflow_id="run-0").run(lane.activities.await_batch, waiting)
    assert taken == kept and taken.outcome == "answered"
    assert await lane.store.calls(lane.scope, [waiting.item]) == []
    again = await lane.env(workflow_id="run-0").run(lane.activities.await_batch, waiting)
    assert again == LlmCallResult(
        model=MODEL,
        outcome="failed",
        lane="batch",
        batch_id=batch_id,
        failure=CallFailure(
            error=f"LlmRetryable: the capacity store no longer knows this call of batch {batch_id}",
            type=errors.LLM_RETRYABLE,
        ),
    )


async def test_another_run_cannot_take_a_batched_answer(
    lane: Lane, http: aiohttp.ClientSession
) -> None:
    """A run waiting for a call another run made is refused for good (``UnknownCaller``,
    naming the call), and the answer stays for the run that made it."""
    calls = asked(1)
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    assert submitted.batch_id is not None
    await lane.env().run(lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id))
    item = item_name(calls[0])
    waiting = AwaitBatchInput(item=item, model=MODEL, batch_id=submitted.batch_id)
    with pytest.raises(ApplicationError) as refused:
        await lane.env(workflow_id="run-7").run(lane.activities.await_batch, waiting)
    assert (refused.value.type, refused.value.non_retryable) == (errors.UNKNOWN_CALLER, True)
    assert f"batched call {item} was made by another run" in str(refused.value)
    taken = await lane.env(workflow_id="run-0").run(lane.activities.await_batch, waiting)
    assert taken.outcome == "answered"


async def test_a_store_out_of_reach_makes_a_waiting_run_retry(openai_client: AsyncOpenAI) -> None:
    """With the store out of reach, a run's await_batch fails retryably and says the batch
    lane's store cannot be reached."""
    unreachable = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        lane = Lane(openai_client, BatchStore(unreachable, item_ttl=ITEM_TTL))
        waiting = AwaitBatchInput(item="call-1", model=MODEL, batch_id="batch_1")
        with pytest.raises(ApplicationError) as failed:
            await lane.env(workflow_id="run-0").run(lane.activities.await_batch, waiting)
    finally:
        await unreachable.aclose()
    assert (failed.value.type, failed.value.non_retryable) == (errors.LLM_RETRYABLE, False)
    assert "the batch lane's store cannot be reached" in str(failed.value)


async def test_polling_a_batch_the_provider_does_not_know_fails_for_good(
    lane: Lane, http: aiohttp.ClientSession
) -> None:
    """A poll of a batch id the provider does not know (404) is a permanent failure."""
    with pytest.raises(ApplicationError) as refused:
        await lane.env().run(lane.activities.poll_batch, "batch_unknown")
    assert (refused.value.type, refused.value.non_retryable) == (errors.LLM_PERMANENT, True)


async def test_a_poll_tells_a_batch_s_status_and_its_counts(
    lane: Lane, http: aiohttp.ClientSession
) -> None:
    """A batch that ended is polled as done, with its calls, its answered and its refused
    ones counted apart; a batch still running as not done, with none of its calls made."""
    await http.put("/_sim/batches", json={"completion_s": 0})
    await lane.open_group([*asked(2), call("Batched question [sim:status=400]", lane="batch")])
    ended = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    assert ended.batch_id is not None
    polled = await lane.env().run(lane.activities.poll_batch, ended.batch_id)
    assert polled == BatchPolled(status="completed", done=True, completed=2, failed=1, total=3)
    await http.put("/_sim/batches", json={"completion_s": 3600})
    await lane.open_group([call("A question still in its batch", lane="batch")])
    running = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    assert running.batch_id is not None
    polled = await lane.env().run(lane.activities.poll_batch, running.batch_id)
    assert polled == BatchPolled(status="in_progress", done=False, completed=0, failed=0, total=1)


async def test_an_answered_call_is_traced_and_counted_once_in_the_batch_lane(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """An answered call's chat span names its model, temperature and batch, with no duration
    measured (the span is not the call); its tokens and its batch-rate cost are counted under
    the batch lane and the model, as its run's result says."""
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry = GenAiTelemetry(
        str(openai_client.base_url),
        meter_provider=MeterProvider(metric_readers=[reader]),
        tracer_provider=tracer,
    )
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL), telemetry=telemetry)
    calls = [call("A traced question", lane="batch", temperature=0.7)]
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    lane.counted()
    await lane.env().run(lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id))
    [result] = (await lane.results(calls)).values()
    assert result is not None and result.cost_usd
    [span] = spans.get_finished_spans()
    assert span.name == f"chat {MODEL}"
    assert span.attributes is not None
    assert span.attributes["gen_ai.operation.name"] == "chat"
    assert span.attributes["gen_ai.request.model"] == MODEL
    assert span.attributes["gen_ai.request.temperature"] == 0.7
    assert span.attributes["aiorch.batch_id"] == submitted.batch_id
    data = reader.get_metrics_data()
    measured = {
        metric.name
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert METRIC_OPERATION_DURATION not in measured
    updates = list(lane.metrics.retrieve_updates())
    tokens = [u for u in updates if u.metric.name == METRIC_LLM_TOKENS]
    assert {(u.attributes["kind"], u.value) for u in tokens} >= {
        ("prompt", result.usage.prompt_tokens),
        ("completion", result.usage.completion_tokens),
    }
    costs = [u for u in updates if u.metric.name == METRIC_LLM_COST]
    assert [u.value for u in costs] == [pytest.approx(result.cost_usd)]
    for update in (*tokens, *costs):
        assert (update.attributes["model"], update.attributes["lane"]) == (MODEL, "batch")


async def test_a_refused_answer_fails_back_and_marks_its_span(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """An answer the model refused (200, with a refusal and no content) goes back to its run
    as the refusal a synchronous call fails with, in its batch; its span carries the error
    type, and the call is counted failed, not answered."""
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = GenAiTelemetry(str(openai_client.base_url), tracer_provider=tracer)
    lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL), telemetry=telemetry)
    calls = asked(1, directive="[sim:refusal]")
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    lane.counted()
    collected = await lane.env().run(
        lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id)
    )
    assert (collected.answered, collected.failed) == (0, 1)
    [result] = (await lane.results(calls)).values()
    assert result is not None and result.failure is not None
    assert (result.model, result.outcome, result.lane) == (MODEL, "failed", "batch")
    assert result.batch_id == submitted.batch_id
    assert result.failure.type == errors.LLM_REFUSED
    assert result.failure.error.startswith(f"{errors.LLM_REFUSED}: ")
    [span] = spans.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["error.type"] == errors.LLM_REFUSED
    assert lane.counted() == {"failed": 1}


async def test_each_call_s_reservation_is_settled_with_what_it_cost(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """Calls of a last round, each with a spend reservation: two whose batch answers one and
    expires (one answered, one never made), then two of another group, one answered and one
    refused. Once collected, the tenant has spent the answered calls' costs alone and nothing
    stays reserved."""
    store, gate = spend_gate(valkey_client, str(openai_client.base_url))
    expiring = asked(2)
    refusing = [call("Answered", lane="batch"), call("Refused [sim:status=400]", lane="batch")]
    tenant, day = expiring[0].tenant, today()
    costs = []
    for number, (calls, expire_after) in enumerate(((expiring, 1), (refusing, None))):
        lane = Lane(openai_client, BatchStore(valkey_client, item_ttl=ITEM_TTL), gate=gate)
        holds = await reserved(store, tenant, f"reservation-{number}-0", f"reservation-{number}-1")
        await lane.open_group(calls, holds=holds)
        await http.put("/_sim/batches", json={"completion_s": 0, "expire_after": expire_after})
        submitted = await lane.env().run(lane.activities.submit_batch, lane.round(2))
        batch = lane.round(2, batch_id=submitted.batch_id, last=True)
        collected = await lane.env().run(lane.activities.collect_batch, batch)
        assert (collected.answered, collected.failed, collected.unfinished) == (1, 1, 0)
        costs += [r.cost_usd for r in (await lane.results(calls)).values() if r and r.cost_usd]
    assert len(costs) == 2
    assert await store.spend_state(tenant, day) == pytest.approx((sum(costs), 0.0))


async def test_a_collection_heartbeats_which_file_it_is_reading(
    openai_client: AsyncOpenAI, http: aiohttp.ClientSession, valkey_client: redis.Redis
) -> None:
    """While it waits for the provider's output and error files, a collection heartbeats
    which file it is reading (what the Web UI shows of a slow collection), then which of its
    calls it is handing back, as often as the worker's heartbeat interval says."""
    lane = Lane(
        openai_client,
        BatchStore(valkey_client, item_ttl=ITEM_TTL),
        heartbeat_every=timedelta(0),
    )
    calls = [*asked(1), *asked(1, directive="[sim:status=400]")]
    await lane.open_group(calls)
    submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
    found = await openai_client.batches.retrieve(str(submitted.batch_id))
    details: list[object] = []
    env = lane.env()
    env.on_heartbeat = lambda *beat: details.extend(beat)
    await env.run(lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id))
    read = {detail for detail in details if str(detail).startswith("reading ")}
    assert read == {f"reading {found.output_file_id}", f"reading {found.error_file_id}"}
    collecting = [detail for detail in details if str(detail).startswith("collecting ")]
    assert collecting == ["collecting call 0 of 2", "collecting call 1 of 2"]
