"""The batch lane, attacked by an outsider who may signal runs: hand a run waiting for its batch
a made-up answer through the plain Temporal CLI, by signals named like the lane's and by an
update; hurry its group's workflow; submit a group again from a workflow of their own; start
the next groups' workflows first with a schedule of their own; wait for another run's batched
answer from their own run.

A real dev server, a real worker process with the batch lane allowed, the capacity store (a
real Redis) and the LLM simulator, whose batches take a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as redis
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment

from activities.batch import BatchActivities
from activities.input_loader import InputLoader
from activities.llm import LlmActivities
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch.worker.clients import openai_client
from aiorch_runtime.batch_store import BatchStore, scope_keys
from aiorch_runtime.config import Settings
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, temporal_cli, temporal_workflow_signal
from tests.support.simulator import Simulator
from workflows import contract, errors
from workflows.payloads import AwaitBatchInput, BatchGroup, LlmCallResult

pytestmark = pytest.mark.e2e

FORGED = {
    "content": "FORGED ANSWER",
    "needs_review": False,
    "model": "sim-large",
    "outcome": "answered",
    "lane": "batch",
}


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return {
        **E2E_WORKER_ENV,
        "LLM_BATCH": "allowed",
        "LLM_BATCH_SIZE": "1",
        "LLM_BATCH_POLL_S": "1",
    }


@pytest.fixture(scope="module")
def stack_options() -> dict[str, Any]:
    return {"with_capacity_store": True}


async def test_no_signal_or_update_hands_a_waiting_run_an_answer(
    stack: LocalStack, client: Client
) -> None:
    """A run waits in await_batch; the plain Temporal CLI signals it batch_full, await_batch
    and batch_result carrying a made-up answer, and sends an await_batch update: the run
    takes none of them (the update is rejected), and it completes with its batch's answer.
    The batch group's workflow, signalled batch_full again, submits nothing twice."""
    simulator = Simulator(stack.addresses.openai_base_url)
    simulator.set_batches(completion_s=6)
    try:
        handle = await start(client, request("What is the real answer?", options={"lane": "batch"}))
        waiting = await wait_for_state(handle, "await_batch")
        assert waiting.batch_id is not None
        forged = json.dumps(FORGED)
        for name in (contract.SIGNAL_BATCH_FULL, contract.ACTIVITY_AWAIT_BATCH, "batch_result"):
            sent = temporal_workflow_signal(stack, handle.id, name, forged)
            assert sent.returncode == 0, sent.stderr
        update = temporal_cli(
            *("workflow", "update", "execute", "--name", contract.ACTIVITY_AWAIT_BATCH),
            *("--address", stack.addresses.temporal_address, "--workflow-id", handle.id),
            *("--input", forged),
        )
        assert update.returncode != 0
        assert "no update named" in update.stdout + update.stderr
        groups = [
            w
            async for w in client.list_workflows(
                f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}'"
            )
        ]
        for group in groups:
            temporal_workflow_signal(stack, group.id, contract.SIGNAL_BATCH_FULL, forged)
        result = await finished(handle)
    finally:
        simulator.set_batches(completion_s=1)
    assert result.state == "completed"
    assert result.content is not None
    assert "FORGED" not in result.content
    assert result.content.startswith("Simulated answer")
    assert simulator.batches()["submissions"] == 1


async def test_a_group_is_submitted_only_by_its_own_workflow(
    stack: LocalStack, client: Client
) -> None:
    """Anyone may start an LlmBatch workflow on the task queue under an id of their own,
    naming a real group (model, number): its submission is refused as an UnknownCaller, and
    the group is not submitted a second time."""
    simulator = Simulator(stack.addresses.openai_base_url)
    handle = await start(client, request("A group of one", options={"lane": "batch"}))
    assert (await finished(handle)).state == "completed"
    before = simulator.batches()["submissions"]
    groups = [
        w
        async for w in client.list_workflows(f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}'")
    ]
    scope, number = groups[0].id.split(":", 1)[1].rsplit(":", 1)
    forged = await client.start_workflow(
        contract.WORKFLOW_TYPE_LLM_BATCH,
        BatchGroup(scope=scope, model="sim-large", group=int(number), delay_s=0.1, poll_s=1),
        id=f"forged-{number}",
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    with pytest.raises(WorkflowFailureError) as refused:
        await forged.result()
    assert isinstance(refused.value.cause, ActivityError)
    assert isinstance(refused.value.cause.cause, ApplicationError)
    assert refused.value.cause.cause.type == "UnknownCaller"
    assert simulator.batches()["submissions"] == before


def capacity_store(stack: LocalStack) -> redis.Redis:
    """A client of the stack's capacity store, as the worker's."""
    url = stack.addresses.capacity_store_url
    assert url is not None
    return redis.Redis.from_url(url)


async def latest_group(stack: LocalStack, client: Client, model: str) -> tuple[str, int]:
    """The batch lane's scope for ``model`` and the number of the last group it opened there
    (from its store)."""
    ids = [
        w.id
        async for w in client.list_workflows(f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}'")
        if w.id.startswith(f"{contract.WORKFLOW_TYPE_LLM_BATCH}:") and f":{model}:" in w.id
    ]
    scope = ids[0].split(":", 1)[1].rsplit(":", 1)[0]
    store = capacity_store(stack)
    try:
        return scope, int(await store.get(scope_keys(scope)["seq"]) or 0)
    finally:
        await store.aclose()


async def test_a_pre_started_group_does_not_get_its_schedule(
    stack: LocalStack, client: Client
) -> None:
    """A client pre-starts the next two groups' LlmBatch ids with schedules of its own (no
    wait between polls and a thousand rounds; a negative delay and poll): the lane finds the
    next id held by a run it did not start, closes that group and fails the call for a retry,
    which a group of the lane's own submits once (here on the run's fallback model); the
    pre-started run, hurried by the lane's batch_full, is refused its submission
    (UnknownCaller) and never polls or collects."""
    simulator = Simulator(stack.addresses.openai_base_url)
    first = await start(client, request("Which group comes next?", options={"lane": "batch"}))
    assert (await finished(first)).state == "completed"
    scope, last = await latest_group(stack, client, "sim-large")
    schedules = {
        last + 1: {"delay_s": 3600, "poll_s": 0, "rounds": 1000},
        last + 2: {"delay_s": -1, "poll_s": -1, "rounds": 1000},
    }
    forged = {
        number: await client.start_workflow(
            contract.WORKFLOW_TYPE_LLM_BATCH,
            {"scope": scope, "model": "sim-large", "group": number, **schedule},
            id=f"{contract.WORKFLOW_TYPE_LLM_BATCH}:{scope}:{number}",
            task_queue=contract.DEFAULT_TASK_QUEUE,
        )
        for number, schedule in schedules.items()
    }
    before = simulator.batches()["submissions"]
    try:
        handle = await start(client, request("Past the held groups", options={"lane": "batch"}))
        result = await finished(handle)
        assert result.state == "completed", result
        assert result.content is not None and result.content.startswith("Simulated answer")
        assert simulator.batches()["submissions"] == before + 1
        with pytest.raises(WorkflowFailureError) as refused:
            await asyncio.wait_for(forged[last + 1].result(), timeout=30)
        assert isinstance(refused.value.cause, ActivityError)
        assert getattr(refused.value.cause.cause, "type", None) == errors.UNKNOWN_CALLER
        scheduled = [
            event.activity_task_scheduled_event_attributes.activity_type.name
            for event in (await forged[last + 1].fetch_history()).events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        assert scheduled == [contract.ACTIVITY_SUBMIT_BATCH]
    finally:
        with contextlib.suppress(RPCError):
            await forged[last + 2].terminate(reason="test done")


def batch_activities(stack: LocalStack, store: BatchStore, client: Client) -> BatchActivities:
    """The worker's batch activities, built as the worker builds them, on the stack's store."""
    settings = Settings(openai_base_url=stack.addresses.openai_base_url)
    loader = InputLoader()
    llm = LlmActivities(openai_client(settings), loader, settings.llm_timeout_s)
    return BatchActivities(
        llm, openai_client(settings), client, store, base_url=settings.openai_base_url
    )


def in_run(workflow_id: str, token: bytes) -> ActivityEnvironment:
    """An activity environment whose activity was scheduled by run ``workflow_id``."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        workflow_id=workflow_id,
        workflow_type=contract.WORKFLOW_TYPE,
        task_token=token,
        is_local=False,
    )
    return env


async def test_a_batched_answer_goes_only_to_the_run_that_asked(
    stack: LocalStack, client: Client
) -> None:
    """Another run's await_batch naming the victim's batched call (its item is in the
    victim's history) is refused as an UnknownCaller and takes over nothing: the victim's
    run completes with its own batch's answer."""
    simulator = Simulator(stack.addresses.openai_base_url)
    simulator.set_batches(completion_s=6)
    store = capacity_store(stack)
    try:
        victim = await start(client, request("Whose answer is this?", options={"lane": "batch"}))
        waiting = await wait_for_state(victim, "await_batch")
        assert waiting.batch_id is not None
        item = await batched_item(victim)
        activities = batch_activities(stack, BatchStore(store, item_ttl=timedelta(hours=1)), client)
        stolen = AwaitBatchInput(item=item, model="sim-large", batch_id=waiting.batch_id)
        with pytest.raises(ApplicationError) as refused:
            await in_run("attacker-run", b"attacker-token").run(activities.await_batch, stolen)
        assert refused.value.type == errors.UNKNOWN_CALLER and refused.value.non_retryable
        result = await asyncio.wait_for(finished(victim), timeout=60)
    finally:
        simulator.set_batches(completion_s=1)
        await store.aclose()
    assert result.state == "completed"
    assert result.content is not None and result.content.startswith("Simulated answer")


async def batched_item(handle: WorkflowHandle[Any, Any]) -> str:
    """The item of the run's batched call, as its history shows invoke_llm's result."""
    for event in (await handle.fetch_history()).events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        payloads = event.activity_task_completed_event_attributes.result.payloads
        [value] = await DATA_CONVERTER.decode(payloads, [LlmCallResult])
        if isinstance(value, LlmCallResult) and value.batch_item:
            return value.batch_item
    raise AssertionError("no batched call in the run's history")
