"""Who may make the replay lab's forks spend: with start authentication on
(REQUESTER_PUBLIC_KEYS), a fork's request must carry a start claim for the fork itself, as a
run's start must. Tried as an outsider with a Temporal client on the lab's task queue, against
a real dev server, a worker process and the simulator: a fork of a recorded LLM run from its
model call (whose plan the fork takes from the recording, so no plan activity of its own would
check it) without a claim, or with the original's claim, is refused before any model call;
the lab itself, with a requester key, forks the same run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.lab import run_forks
from aiorch.ops.lab.recorded import read_original
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import Settings, lab_queue
from tests.support.live_runs import request, start
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.simulator import Simulator
from workflows import contract, errors
from workflows.engine.forks import ForkInput, ForkResult
from workflows.payloads import PipelineRequest, Variant

pytestmark = pytest.mark.e2e

ALICE = SigningKey.generate("alice")
FROM = "invoke_llm"


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return {**E2E_WORKER_ENV, "REQUESTER_PUBLIC_KEYS": ALICE.requester_entry("acme")}


def signed_start(message: str) -> dict[str, Any]:
    claimed = ALICE.sign_start(
        PipelineRequest.model_validate(request(message)),
        workflow_type=contract.WORKFLOW_TYPE,
        namespace="default",
        now=datetime.now(UTC),
    )
    return claimed.model_dump(mode="json", exclude_none=True)


async def forged_fork(client: Client, workflow_id: str, fork_request: dict[str, Any]) -> str:
    """Start, as an outsider, a fork of run ``workflow_id`` whose request is ``fork_request``,
    seeded with the run's real recorded outputs; returns why it failed."""
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id or ""
    original = await read_original(client, workflow_id, run_id, FROM)
    fork = ForkInput(
        request=fork_request,
        lab_id="outsider",
        original_workflow_id=workflow_id,
        original_run_id=run_id,
        from_state=FROM,
        kind="candidate",
        variant=Variant(model="sim-small"),
        recorded=original.recorded,
        tenant="lab",
    )
    handle = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        fork,
        id=fork_request["request_id"],
        task_queue=lab_queue(contract.DEFAULT_TASK_QUEUE, None),
        result_type=ForkResult,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == errors.INVALID_REQUEST, cause
    return cause.message


async def test_a_fork_needs_a_start_claim_of_its_own(stack: LocalStack, client: Client) -> None:
    """A fork started without a claim, or with the original's claim moved onto it, fails
    before any model call (the simulator sees none for it); ``run_forks`` with alice's
    requester key forks the same run, each fork calling the model once."""
    simulator = Simulator(stack.addresses.openai_base_url)
    original = signed_start("Summarise the outage")
    handle = await start(client, original)
    await handle.result()
    await asyncio.sleep(2)  # visibility lists a close a moment after it

    unsigned = {**original, "request_id": "a" * 24}
    unsigned.pop("start_claim")
    assert "the start is not signed" in await forged_fork(client, handle.id, unsigned)
    moved = {**original, "request_id": "b" * 24}
    assert "issued for another request" in await forged_fork(client, handle.id, moved)
    assert simulator.chat_requests("a" * 24) == simulator.chat_requests("b" * 24) == []

    settings = Settings(
        temporal_address=stack.addresses.temporal_address, requester_key=ALICE.private_entry()
    )
    run_id = (await handle.describe()).run_id or ""
    lab = await run_forks(
        client,
        settings,
        [run_id],
        from_state=FROM,
        candidate=Variant(model="sim-small"),
        lab_id="alice-lab",
    )
    [comparison] = lab.comparisons
    for fork in (comparison.baseline, comparison.candidate):
        assert fork.error is None and fork.state == "completed", fork
        assert len(simulator.chat_requests(fork.workflow_id)) == 1
