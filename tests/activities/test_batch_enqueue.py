"""How a run's call joins the batch lane, in the fast tier: `BatchLane.enqueue` in Temporal's
activity environment, the calls kept by the real `BatchStore` (Valkey in memory), the groups'
``LlmBatch`` workflows started on Temporal's time-skipping test server (no worker runs them:
what the lane starts and signals is read from their histories).

The call that opens a group starts its workflow with the lane's schedule and the group's owner
token, and the one that fills it signals it; the activity is then left to its group's
submission (it completes asynchronously). A call queued again is told its batch at once; a
spilled call's place in its model's queue is gone once its ``invoke_llm`` has queued it; a
group whose workflow id another run holds is closed and the call retried; a store out of reach
fails the call retryably."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import redis.asyncio as redis
from openai import AsyncOpenAI
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from activities.batch import BatchActivities, BatchLane, BatchSettings
from activities.batch_calls import batched, hold_text, item_name
from activities.batch_groups import OWNER_MEMO, group_workflow_id
from activities.capacity import CallGate
from activities.input_loader import InputLoader
from activities.llm import LlmActivities
from activities.spend import SpendHold, today
from aiorch.devstack.processes import free_port
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_keys, scope_name
from aiorch_runtime.config import DEFAULT_PRICE_TABLE, RateLimit
from tests.activities.batch_lane import ITEM_TTL, MODEL, Lane, asked, reserved, spend_gate
from tests.activities.llm_calls import call
from tests.support.batched_call import BatchedCall
from tests.support.time_skipping import time_skipping_server
from workflows import contract, errors
from workflows.batch.workflow import LlmBatch
from workflows.payloads import (
    AwaitBatchInput,
    BatchGroup,
    BatchSubmitted,
    LlmCallInput,
    LlmCallResult,
)

TIMEOUT = timedelta(minutes=10)
# Long enough for a loaded machine (the handoff takes a few seconds), short enough that a run
# that is never handed its answer fails the test before pytest's own timeout stops it.
HANDOFF_S = 20


@pytest_asyncio.fixture(scope="module")
async def temporal() -> AsyncIterator[Client]:
    async with time_skipping_server() as environment:
        yield environment.client


@dataclass
class Setup:
    """A lane of its own provider address (so its groups' workflow ids are new on the shared
    server), its store and its scope."""

    lane: BatchLane
    store: BatchStore
    scope: str
    settings: BatchSettings


@pytest.fixture
def setup(temporal: Client, valkey_client: redis.Redis) -> Setup:
    base_url = f"http://{uuid.uuid4().hex}.provider.test/v1"
    settings = BatchSettings(
        size=2,
        delay=timedelta(seconds=7),
        poll=timedelta(seconds=3),
        task_queue="batch-groups",
        base_url=base_url,
    )
    store = BatchStore(valkey_client, item_ttl=ITEM_TTL)
    return Setup(BatchLane(store, temporal, settings), store, scope_name(base_url, MODEL), settings)


def in_run(run: str, token: bytes) -> ActivityEnvironment:
    """The environment of run ``run``'s ``invoke_llm``, started now with ``TIMEOUT`` to run."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        workflow_id=run,
        task_token=token,
        started_time=datetime.now(UTC),
        start_to_close_timeout=TIMEOUT,
    )
    return env


async def left_waiting(lane: BatchLane, call: LlmCallInput, run: str) -> None:
    """Enqueue ``call`` for ``run`` and check that the activity was left to complete
    asynchronously (the SDK's signal for that is a BaseException that is no error)."""
    env = in_run(run, f"token-{run}".encode())
    try:
        await env.run(lane.enqueue, call, None, pipeline="llm", digest=f"digest-{run}")
    except Exception as err:
        raise AssertionError(f"enqueue failed: {err!r}") from err
    except BaseException:
        return
    raise AssertionError("enqueue returned: the call was not left waiting for its batch")


async def group_signals(
    temporal: Client, scope: str, group: int
) -> tuple[WorkflowHandle[Any, Any], list[str]]:
    """The group's workflow, and the signals it was sent so far."""
    handle = temporal.get_workflow_handle(group_workflow_id(scope, group))
    history = await handle.fetch_history()
    signalled = [
        event.workflow_execution_signaled_event_attributes.signal_name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    return handle, signalled


async def test_the_call_that_opens_a_group_starts_its_workflow(
    temporal: Client, setup: Setup
) -> None:
    """The first call of a group is kept with its run's task token, pipeline and cache digest,
    waiting until its activity's timeout less a margin; the group's workflow is started on the
    lane's task queue with the lane's delay and poll interval and the group's owner token in
    its memo, and not signalled (the group is not full)."""
    lane, store, scope = setup.lane, setup.store, setup.scope
    [call] = asked(1)
    before_ms = datetime.now(UTC).timestamp() * 1000
    await left_waiting(lane, call, "run-a")
    [queued] = await store.calls(scope, [item_name(call)])
    assert (queued.token, queued.pipeline, queued.cache, queued.spend) == (
        b"token-run-a",
        "llm",
        "digest-run-a",
        "",
    )
    assert LlmCallInput.model_validate_json(queued.call) == call
    waits_ms = (TIMEOUT - timedelta(seconds=30)).total_seconds() * 1000
    assert before_ms + waits_ms - 5000 < queued.deadline_ms <= before_ms + waits_ms + 5000
    handle, signalled = await group_signals(temporal, scope, 1)
    assert signalled == []
    described = await handle.describe()
    opened, owner = await store.owner_of(scope, 1)
    assert opened and owner
    assert await described.memo_value(OWNER_MEMO) == owner
    assert described.task_queue == setup.settings.task_queue
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [group] = await temporal.data_converter.decode(started.input.payloads, [BatchGroup])
    assert group == BatchGroup(scope=scope, model=MODEL, group=1, delay_s=7.0, poll_s=3.0)


async def test_the_call_that_fills_a_group_signals_its_workflow(
    temporal: Client, setup: Setup
) -> None:
    """The second call of a group of two signals its workflow that the group is full (it is
    submitted without waiting for its delay); both calls wait in the one group."""
    lane, store, scope = setup.lane, setup.store, setup.scope
    first, second = asked(2)
    await left_waiting(lane, first, "run-b")
    assert (await group_signals(temporal, scope, 1))[1] == []
    await left_waiting(lane, second, "run-c")
    _, signals = await group_signals(temporal, scope, 1)
    assert signals == [contract.SIGNAL_BATCH_FULL]
    assert len(await store.calls(scope, [item_name(first), item_name(second)])) == 2


async def test_a_call_that_opens_and_fills_a_group_starts_it_full_with_its_owner(
    temporal: Client, setup: Setup
) -> None:
    """In a lane of groups of one, the call that opens a group also fills it: the group's
    workflow is started with the group's owner token in its memo and told at once that the
    group is full."""
    lane = BatchLane(setup.store, temporal, dataclasses.replace(setup.settings, size=1))
    [call] = asked(1)
    await left_waiting(lane, call, "run-m")
    handle, signalled = await group_signals(temporal, setup.scope, 1)
    assert signalled == [contract.SIGNAL_BATCH_FULL]
    opened, owner = await setup.store.owner_of(setup.scope, 1)
    assert opened and owner
    assert await (await handle.describe()).memo_value(OWNER_MEMO) == owner


async def test_a_call_queued_again_is_told_its_batch_at_once(
    temporal: Client, setup: Setup
) -> None:
    """The same attempt enqueued again once its group's batch is known (its first activity
    timed out after the submission) is told that batch at once, as its submission would have
    told it."""
    lane, store, scope = setup.lane, setup.store, setup.scope
    [call] = asked(1)
    await left_waiting(lane, call, "run-d")
    await store.record_batch(scope, 1, 0, "batch_known")
    told: LlmCallResult = await in_run("run-d", b"token-again").run(
        lane.enqueue, call, None, pipeline="llm", digest=None
    )
    assert told == batched(call, item_name(call), "batch_known")
    assert told.batch_id == "batch_known" and told.batch_item == item_name(call)


async def test_a_spilled_calls_place_leaves_its_models_queue_with_its_batch_invoke_llm(
    setup: Setup, valkey_client: redis.Redis
) -> None:
    """Two runs' calls wait in their model's queue (its tokens spent), told so by the real
    ``invoke_llm``; the first spills over: its batch-lane ``invoke_llm`` queues it in a group
    and leaves nothing of it in the model queue's keys, and the second is first in the queue."""
    limits, scope = (6000, 0), setup.scope
    capacity = CapacityStore(valkey_client, lease=timedelta(minutes=5))
    gate = CallGate(
        capacity,
        base_url=setup.settings.base_url,
        rate_limits={MODEL: RateLimit(tpm=limits[0])},
        prices=DEFAULT_PRICE_TABLE,
        tenant_budget=lambda _: None,
        max_output_tokens=100,
        inline_wait=timedelta(0),
    )
    await capacity.settle(scope, limits, hold_id="none", used=limits[0], called=True)
    spilling, behind = (call(f"Question {n}", workflow_id=f"run-q{n}") for n in range(2))
    spilled = spilling.model_copy(update={"lane": "batch", "spilled": True})
    async with AsyncOpenAI(base_url=setup.settings.base_url, api_key="unused") as client:
        llm = LlmActivities(client, InputLoader(), timeout_s=10, gate=gate, batch=setup.lane)
        for each in (spilling, behind):
            waited = await in_run(each.workflow_id, b"").run(llm.invoke_llm, each)
            assert waited.outcome == "wait"
        try:
            await in_run(spilling.workflow_id, b"token-q0").run(llm.invoke_llm, spilled)
        except Exception as err:
            raise AssertionError(f"invoke_llm failed: {err!r}") from err
        except BaseException:
            pass  # left to complete asynchronously: queued for its batch
        else:
            raise AssertionError("invoke_llm returned: the call was not queued for a batch")
    [queued] = await setup.store.calls(scope, [item_name(spilled)])
    assert queued.token == b"token-q0"
    for key in scope_keys(scope)[3:8]:
        if await valkey_client.type(key) == b"zset":
            members = await valkey_client.zrange(key, 0, -1)
        else:
            members = await valkey_client.hkeys(key)
        assert spilling.workflow_id.encode() not in members, key
    assert await capacity.queued(scope, limits) == [behind.workflow_id]


async def test_a_group_held_by_another_run_is_closed_and_the_call_retried(
    temporal: Client, setup: Setup, valkey_client: redis.Redis
) -> None:
    """Someone started the next group's workflow id first (no owner token in its memo): the
    call fails retryably, saying the id is held and that the call goes into the next group;
    its spend reservation is given back, it is withdrawn and its group closed, so the next
    call opens a group of its own whose workflow the lane starts with its token."""
    store, scope = setup.store, setup.scope
    capacity, gate = spend_gate(valkey_client, setup.settings.base_url)
    lane = BatchLane(store, temporal, setup.settings, gate=gate)
    await temporal.start_workflow(
        contract.WORKFLOW_TYPE_LLM_BATCH,
        BatchGroup(scope=scope, model=MODEL, group=1, delay_s=0, poll_s=0),
        id=group_workflow_id(scope, 1),
        task_queue="someone-else",
    )
    first, second = asked(2)
    [hold] = await reserved(capacity, first.tenant, "reservation-e")
    assert await capacity.spend_state(hold.tenant, hold.day) == (0.0, 0.5)
    with pytest.raises(ApplicationError) as refused:
        await in_run("run-e", b"token-e").run(lane.enqueue, first, hold, pipeline="", digest=None)
    assert await capacity.spend_state(hold.tenant, hold.day) == (0.0, 0.0)
    assert (refused.value.type, refused.value.non_retryable) == (errors.LLM_RETRYABLE, False)
    assert refused.value.message == (
        "group 1's workflow id is held by a run the batch lane did not start; the call goes "
        "into the next group"
    )
    assert await store.calls(scope, [item_name(first)]) == []
    await left_waiting(lane, second, "run-f")
    handle, _ = await group_signals(temporal, scope, 2)
    _, owner = await store.owner_of(scope, 2)
    assert await (await handle.describe()).memo_value(OWNER_MEMO) == owner


async def test_a_group_whose_workflow_cannot_start_withdraws_the_call(
    temporal: Client, setup: Setup, valkey_client: redis.Redis
) -> None:
    """Temporal refuses to start the group's workflow (here: the lane names no task queue):
    the call fails retryably, saying the lane cannot start its group and why; it is
    withdrawn from the group and its spend reservation given back. A call with no
    reservation fails the same way."""
    store, scope = setup.store, setup.scope
    capacity, gate = spend_gate(valkey_client, setup.settings.base_url)
    settings = dataclasses.replace(setup.settings, task_queue="")
    lane = BatchLane(store, temporal, settings, gate=gate)
    [call] = asked(1)
    [hold] = await reserved(capacity, call.tenant, "reservation-h")
    with pytest.raises(ApplicationError) as refused:
        await in_run("run-h", b"token-h").run(lane.enqueue, call, hold, pipeline="", digest=None)
    assert (refused.value.type, refused.value.non_retryable) == (errors.LLM_RETRYABLE, False)
    assert refused.value.message.startswith("the batch lane cannot start group 1 (")
    assert refused.value.message.endswith("(Missing TaskQueue.)")
    assert await store.calls(scope, [item_name(call)]) == []
    assert await capacity.spend_state(hold.tenant, hold.day) == (0.0, 0.0)
    [unreserved] = asked(1, directive="with no reservation")
    with pytest.raises(ApplicationError) as again:
        await in_run("run-h2", b"token-h2").run(
            lane.enqueue, unreserved, None, pipeline="", digest=None
        )
    assert again.value.message.startswith("the batch lane cannot start group ")


async def test_a_queued_call_s_answer_goes_only_to_the_run_that_queued_it(
    temporal: Client, setup: Setup, openai_client: AsyncOpenAI
) -> None:
    """A call is queued as the call of the run whose invoke_llm queued it: another run's
    await_batch for it is refused for good, the run's own is left waiting for its answer."""
    [call] = asked(1)
    await left_waiting(setup.lane, call, "run-k")
    llm = LlmActivities(openai_client, InputLoader(), timeout_s=10)
    batches = BatchActivities(
        llm, openai_client, temporal, setup.store, base_url=setup.settings.base_url
    )
    waiting = AwaitBatchInput(item=item_name(call), model=MODEL, batch_id="batch_k")
    with pytest.raises(ApplicationError) as refused:
        await in_run("run-other", b"token-other").run(batches.await_batch, waiting)
    assert (refused.value.type, refused.value.non_retryable) == (errors.UNKNOWN_CALLER, True)
    try:
        await in_run("run-k", b"token-k-await").run(batches.await_batch, waiting)
    except Exception as err:
        raise AssertionError(f"await_batch failed: {err!r}") from err
    except BaseException:
        return
    raise AssertionError("await_batch returned before the call was answered")


async def test_a_call_without_a_timeout_waits_an_hour_for_its_submission(
    temporal: Client, setup: Setup
) -> None:
    """A call whose activity has no start-to-close timeout is kept until an hour after it
    started, less the lane's margin, with its spend reservation, and with no cache digest
    when its run asked for none."""
    [call] = asked(1)
    hold = SpendHold(call.tenant, today(), "reservation-i")
    env = in_run("run-i", b"token-i")
    env.info = dataclasses.replace(env.info, start_to_close_timeout=None)
    before_ms = datetime.now(UTC).timestamp() * 1000
    try:
        await env.run(setup.lane.enqueue, call, hold, pipeline="", digest=None)
    except Exception as err:
        raise AssertionError(f"enqueue failed: {err!r}") from err
    except BaseException:
        pass  # left waiting for its submission
    [queued] = await setup.store.calls(setup.scope, [item_name(call)])
    assert (queued.spend, queued.cache) == (hold_text(hold), "")
    waits_ms = (timedelta(hours=1) - timedelta(seconds=30)).total_seconds() * 1000
    assert before_ms + waits_ms - 5000 < queued.deadline_ms <= before_ms + waits_ms + 5000


async def test_a_store_out_of_reach_fails_the_call_for_a_retry(
    temporal: Client, setup: Setup, valkey_client: redis.Redis
) -> None:
    """With the batch store out of reach the call is not queued: it fails retryably, saying
    the batch lane cannot queue it, and its spend reservation is given back."""
    capacity, gate = spend_gate(valkey_client, setup.settings.base_url)
    unreachable = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        store = BatchStore(unreachable, item_ttl=ITEM_TTL)
        lane = BatchLane(store, temporal, setup.settings, gate=gate)
        [call] = asked(1)
        [hold] = await reserved(capacity, call.tenant, "reservation-g")
        with pytest.raises(ApplicationError) as failed:
            await in_run("run-g", b"token-g").run(lane.enqueue, call, hold, pipeline="", digest="")
    finally:
        await unreachable.aclose()
    assert (failed.value.type, failed.value.non_retryable) == (errors.LLM_RETRYABLE, False)
    assert failed.value.message.startswith("the batch lane cannot queue the call (")
    assert await capacity.spend_state(hold.tenant, hold.day) == (0.0, 0.0)


async def test_runs_are_told_their_batch_then_handed_its_answers(
    temporal: Client, valkey_client: redis.Redis, sim_url: str
) -> None:
    """Three runs' calls fill a group: the lane's own LlmBatch workflow submits them, the one
    whose document cannot be read now failed back to its run (its invoke_llm fails as a
    synchronous call's would) and the other two as one batch; each of their runs' invoke_llm
    is told that batch and its call's name, its await_batch then takes the call's answer from
    the batch, and the store forgets each call once its run has it."""
    async with (
        aiohttp.ClientSession(base_url=sim_url) as http,
        AsyncOpenAI(base_url=f"{sim_url}/v1", api_key="sim", max_retries=0, timeout=10) as client,
    ):
        await http.put("/_sim/batches", json={"completion_s": 0})
        task_queue = f"batched-{uuid.uuid4().hex}"
        settings = BatchSettings(
            size=3,
            delay=timedelta(minutes=10),
            poll=timedelta(seconds=1),
            task_queue=task_queue,
            base_url=str(client.base_url),
        )
        store = BatchStore(valkey_client, item_ttl=ITEM_TTL)
        lane = BatchLane(store, temporal, settings)
        llm = LlmActivities(client, InputLoader(), timeout_s=10, prices=DEFAULT_PRICE_TABLE)
        batches = BatchActivities(
            llm, client, temporal, store, base_url=settings.base_url, prices=DEFAULT_PRICE_TABLE
        )

        @activity.defn(name=contract.ACTIVITY_INVOKE_LLM)
        async def invoke_llm(call: LlmCallInput) -> LlmCallResult:
            return await lane.enqueue(call, None, pipeline="", digest=None)

        calls = asked(2)
        unreadable = call("Summarise it.", lane="batch", input_ref="/nowhere/gone.txt")
        async with Worker(
            temporal,
            task_queue=task_queue,
            workflows=[BatchedCall, LlmBatch],
            activities=[invoke_llm, *batches.activities],
        ):
            handles = [
                await temporal.start_workflow(
                    BatchedCall.run,
                    asked_call,
                    id=asked_call.workflow_id,
                    task_queue=task_queue,
                )
                for asked_call in (*calls, unreadable)
            ]
            *results, (refused, _) = [
                await asyncio.wait_for(h.result(), timeout=HANDOFF_S) for h in handles
            ]
    [batch] = {told.batch_id for told, _ in results}
    assert batch is not None
    for made, (told, outcome) in zip(calls, results, strict=True):
        assert told == batched(made, item_name(made), batch)
        assert (outcome.outcome, outcome.lane, outcome.batch_id) == ("answered", "batch", batch)
        assert outcome.content and outcome.content.startswith("Simulated answer")
    assert (refused.outcome, refused.lane, refused.batch_id) == ("failed", "batch", None)
    assert refused.failure is not None and refused.failure.permanent
    scope = scope_name(settings.base_url, MODEL)
    assert await store.calls(scope, [item_name(c) for c in (*calls, unreadable)]) == []


async def test_an_answer_a_run_no_longer_waits_for_is_kept_for_its_next_attempt(
    temporal: Client,
    valkey_client: redis.Redis,
    sim_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run's await_batch was left waiting for its call, but no longer waits when the answer
    comes (its activity timed out): the collection logs that await_batch no longer waits and
    keeps the answer, which the run's next await_batch takes."""
    async with (
        aiohttp.ClientSession(base_url=sim_url) as http,
        AsyncOpenAI(base_url=f"{sim_url}/v1", api_key="sim", max_retries=0, timeout=10) as client,
    ):
        await http.put("/_sim/batches", json={"completion_s": 0})
        lane = Lane(client, BatchStore(valkey_client, item_ttl=ITEM_TTL), temporal=temporal)
        calls = asked(1)
        await lane.open_group(calls)
        submitted = await lane.env().run(lane.activities.submit_batch, lane.round(1))
        assert submitted.batch_id is not None
        waiting = AwaitBatchInput(
            item=item_name(calls[0]), model=MODEL, batch_id=submitted.batch_id
        )
        try:
            await lane.env(workflow_id="run-0").run(lane.activities.await_batch, waiting)
        except Exception as err:
            raise AssertionError(f"await_batch failed: {err!r}") from err
        except BaseException:
            pass  # left waiting: its answer is not in yet
        else:
            raise AssertionError("await_batch answered before its batch was collected")
        with caplog.at_level(logging.INFO, logger="activities.batch"):
            await lane.env().run(
                lane.activities.collect_batch, lane.round(1, batch_id=submitted.batch_id)
            )
        taken = await lane.env(workflow_id="run-0").run(lane.activities.await_batch, waiting)
    assert taken.outcome == "answered"
    [logged] = [r.getMessage() for r in caplog.records if r.name == "activities.batch"]
    assert logged.startswith("await_batch no longer waits (")
    assert logged.endswith("): its outcome is left unused")


async def test_a_provider_without_a_batch_api_fails_each_call_back_for_good(
    temporal: Client, valkey_client: redis.Redis, sim_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A provider that refuses the batch's file for good (it serves no Files API: 404): no
    batch is made, each call is dropped from the store, its spend reservation given back
    and counted failed, and its run's waiting activity is handed the permanent failure (here
    the runs' activities no longer wait: the log says so, once a run)."""
    async with AsyncOpenAI(
        base_url=f"{sim_url}/no-batch-api/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        capacity, gate = spend_gate(valkey_client, str(client.base_url))
        lane = Lane(
            client, BatchStore(valkey_client, item_ttl=ITEM_TTL), gate=gate, temporal=temporal
        )
        calls = asked(2)
        holds = await reserved(capacity, calls[0].tenant, "reservation-j0", "reservation-j1")
        await lane.open_group(calls, holds=holds)
        with caplog.at_level(logging.INFO, logger="activities.batch"):
            submitted = await lane.env().run(lane.activities.submit_batch, lane.round(0))
    assert submitted == BatchSubmitted(dropped=0)
    assert await lane.store.calls(lane.scope, [item_name(c) for c in calls]) == []
    assert await lane.store.batch_of(lane.scope, lane.group, 0) is None
    assert await capacity.spend_state(calls[0].tenant, holds[0].day) == (0.0, 0.0)
    assert lane.counted() == {"failed": 2}
    logged = [r.getMessage() for r in caplog.records if r.name == "activities.batch"]
    assert len(logged) == 2
    assert all(line.startswith("invoke_llm no longer waits (") for line in logged)


async def test_a_run_is_told_its_call_was_refused_when_its_batch_cannot_be_made(
    temporal: Client, valkey_client: redis.Redis, sim_url: str
) -> None:
    """A run whose call the provider refused for good at submission (it serves no Files API:
    404) has its invoke_llm fail as a synchronous call refused for good fails: permanently,
    in the batch lane, with no batch named, saying what the provider answered."""
    async with AsyncOpenAI(
        base_url=f"{sim_url}/no-batch-api/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        task_queue = f"refused-{uuid.uuid4().hex}"
        settings = BatchSettings(
            size=1,
            delay=timedelta(minutes=10),
            poll=timedelta(seconds=1),
            task_queue=task_queue,
            base_url=str(client.base_url),
        )
        store = BatchStore(valkey_client, item_ttl=ITEM_TTL)
        lane = BatchLane(store, temporal, settings)
        llm = LlmActivities(client, InputLoader(), timeout_s=10, prices=DEFAULT_PRICE_TABLE)
        batches = BatchActivities(llm, client, temporal, store, base_url=settings.base_url)

        @activity.defn(name=contract.ACTIVITY_INVOKE_LLM)
        async def invoke_llm(call: LlmCallInput) -> LlmCallResult:
            return await lane.enqueue(call, None, pipeline="", digest=None)

        [asked_call] = asked(1)
        async with Worker(
            temporal,
            task_queue=task_queue,
            workflows=[BatchedCall, LlmBatch],
            activities=[invoke_llm, *batches.activities],
        ):
            handle = await temporal.start_workflow(
                BatchedCall.run, asked_call, id=asked_call.workflow_id, task_queue=task_queue
            )
            refused, _ = await asyncio.wait_for(handle.result(), timeout=HANDOFF_S)
    assert (refused.outcome, refused.lane, refused.batch_id) == ("failed", "batch", None)
    assert refused.failure is not None and refused.failure.permanent
    assert refused.failure.type == errors.LLM_PERMANENT
    assert "404" in refused.failure.error


async def test_a_call_whose_document_is_gone_is_failed_back_at_submission(
    temporal: Client,
    valkey_client: redis.Redis,
    openai_client: AsyncOpenAI,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Of a group's two calls, the one whose document cannot be read now is left out of the
    batch: dropped from the store, its spend reservation given back (the other's stays held)
    and counted failed; the other is submitted; each run's invoke_llm is handed its outcome
    (here neither waits any more: the log says so, once a run)."""
    capacity, gate = spend_gate(valkey_client, str(openai_client.base_url))
    store = BatchStore(valkey_client, item_ttl=ITEM_TTL)
    lane = Lane(openai_client, store, gate=gate, temporal=temporal)
    unreadable = call("Summarise it.", lane="batch", input_ref="/nowhere/gone.txt")
    calls = [*asked(1), unreadable]
    holds = await reserved(capacity, unreadable.tenant, "reservation-l0", "reservation-l1")
    await lane.open_group(calls, holds=holds)
    with caplog.at_level(logging.INFO, logger="activities.batch"):
        submitted = await lane.env().run(lane.activities.submit_batch, lane.round(0))
    assert (submitted.calls, submitted.dropped) == (1, 0)
    [kept] = await store.calls(lane.scope, [item_name(c) for c in calls])
    assert kept.item == item_name(calls[0])
    assert await capacity.spend_state(unreadable.tenant, holds[0].day) == (0.0, 0.5)
    assert lane.counted() == {"failed": 1, "submitted": 1}
    logged = [r.getMessage() for r in caplog.records if r.name == "activities.batch"]
    assert len(logged) == 2
    assert all(line.startswith("invoke_llm no longer waits (") for line in logged)
