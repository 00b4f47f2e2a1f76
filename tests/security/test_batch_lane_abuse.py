"""The batch lane, attacked by an outsider who may signal runs: hand a run waiting for its batch
a made-up answer through the plain Temporal CLI, by signals named like the lane's and by an
update; hurry its group's workflow; submit a group again from a workflow of their own.

A real dev server, a real worker process with the batch lane allowed, the capacity store (a
real Redis) and the LLM simulator, whose batches take a few seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, temporal_cli, temporal_workflow_signal
from tests.support.simulator import Simulator
from workflows import contract
from workflows.payloads import BatchGroup

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
