"""`starter.py dlq redrive` end to end with payload encryption on: a run that continued as new
and then dead-lettered is redriven from its own (encrypted) history, and operators redriving at
the same time start each dead-lettered run exactly once.

The stack of this module encrypts payloads (so dead-letter bodies carry no content and the
request exists only in encrypted history) and continues a reedit loop as new after one round.
Everything is real: the dev server, a worker process, moto's SQS and the LLM simulator.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter

from aiorch.devstack.stack import LocalStack
from aiorch.ops import reviews
from aiorch.ops.dead_letters import DeadLetterQueue
from aiorch.ops.dead_runs import start_again, verify_dead_run
from aiorch.ops.redrive import redrive, summarize
from aiorch.ops.results import finished
from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.temporal import encrypted_converter
from tests.support import ROOT
from tests.support.live_runs import request, start, status_of
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.simulator import Simulator
from workflows import contract
from workflows.payloads import PipelineRequest, ReviewDecision

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

pytestmark = pytest.mark.e2e

QUEUE_NAME = "ai-orchestrator-dlq"  # DLQ_QUEUE_NAME's default, which the stack's worker uses
KEYS = f"k1:{new_key()}"


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {
        **E2E_WORKER_ENV,
        "PAYLOAD_KEYS": KEYS,
        "PAYLOAD_KEY_ID": "k1",
        "REEDIT_ROUNDS_PER_RUN": "1",
    }
    with LocalStack(tmp_path_factory.mktemp("redrive"), with_worker=True, worker_env=env) as stack:
        yield stack


def signer(stack: LocalStack) -> reviews.Signer:
    """Signs reviews with the stack's reviewer key, as the CLI does with REVIEWER_KEY_FILE."""
    return stack.reviewer_key.signer()


def keyed_converter() -> DataConverter:
    return encrypted_converter(KeyRing.parse(KEYS, "k1"))


@pytest.fixture(scope="module")
async def keyed(sealed: LocalStack) -> Client:
    """The project's client with the worker's keys."""
    return await Client.connect(sealed.addresses.temporal_address, data_converter=keyed_converter())


def sqs(stack: LocalStack) -> SQSClient:
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("sqs", endpoint_url=stack.addresses.sqs_endpoint_url)


def queue(stack: LocalStack, name: str = QUEUE_NAME) -> DeadLetterQueue:
    return DeadLetterQueue(sqs(stack), name, wait_s=0)


async def starter(stack: LocalStack, *args: str, keys: bool = True) -> tuple[int, str]:
    """``python starter.py ARGS`` against the stack (with the worker's keys unless told not
    to); returns the exit status and stdout + stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYLOAD_KEY")}
    env.update(stack.addresses.env(), COLUMNS="250")
    if keys:
        env.update(PAYLOAD_KEYS=KEYS, PAYLOAD_KEY_ID="k1")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    raw_out, raw_err = await asyncio.wait_for(process.communicate(), timeout=90)
    assert "Traceback" not in raw_err.decode()
    assert process.returncode is not None
    return process.returncode, raw_out.decode() + raw_err.decode()


async def started_with(client: Client, workflow_id: str, run_id: str) -> Any:
    """The input a run was started with, decoded from its history with the worker's keys."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    first = (await handle.fetch_history()).events[0]
    assert first.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    payloads = first.workflow_execution_started_event_attributes.input.payloads
    [value] = await client.data_converter.decode(payloads)
    return value


async def dead_lettered(client: Client, stack: LocalStack, count: int) -> dict[str, str]:
    """``count`` runs that dead-letter while the LLM is down; their workflow and run ids."""
    simulator = Simulator(stack.addresses.openai_base_url)
    simulator.set_fault({"status": 503, "path": "chat"})
    try:
        handles = [
            await start(client, request(f"Give up {n}", options={"llm_max_attempts": 1}))
            for n in range(count)
        ]
        for handle in handles:
            assert (await finished(handle)).state == "dead_letter"
    finally:
        simulator.clear_faults()
    return {h.id: (await h.describe()).run_id for h in handles}


async def runs_of(client: Client, workflow_id: str, expected: int) -> int:
    """How many runs visibility lists for ``workflow_id``, once it lists ``expected`` (or after
    ten seconds); then a second later again, so a late extra run would be counted too."""
    query = f"WorkflowId = '{workflow_id}'"
    deadline = asyncio.get_running_loop().time() + 10
    while (count := len([x async for x in client.list_workflows(query)])) < expected:
        if asyncio.get_running_loop().time() > deadline:
            return count
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    return len([x async for x in client.list_workflows(query)])


async def wait_until_round(handle: WorkflowHandle[Any, Any], review_round: int) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while (current := await status_of(handle)).state != "await_review" or (
        current.review_round != review_round
    ):
        assert asyncio.get_running_loop().time() < deadline, current
        await asyncio.sleep(0.1)


async def test_continued_run_is_redriven_from_its_encrypted_history(
    sealed: LocalStack, keyed: Client
) -> None:
    """A run reedits once (so it continues as new) and is then dead-lettered by the operator's
    `dead_letter` signal. Its message carries no content (encryption is on) and the dead run's
    input is a ContinuedRun, so redrive reads the original request from that input. A starter
    without the keys is refused with a clear line and leaves the message; with the keys the
    request is started again as a fresh run, which can be approved and completes."""
    original = request("Continue me, then give up", review="always")
    handle = await start(keyed, original)
    await wait_until_round(handle, 1)
    first_run = (await handle.describe()).run_id
    reedit = ReviewDecision(decision="reedit", reviewer="ann", feedback="again", review_round=1)
    await reviews.submit_review(keyed, handle.id, reedit, signer=signer(sealed))
    await wait_until_round(handle, 2)
    dead_run = (await handle.describe()).run_id
    assert dead_run != first_run  # continued as new after one round
    assert "carried" in await started_with(keyed, handle.id, dead_run)
    await handle.signal(contract.SIGNAL_DEAD_LETTER, {"operator": "ops", "reason": "give up"})
    assert (await finished(handle)).state == "dead_letter"
    [letter] = queue(sealed).peek()
    assert letter.body is not None and letter.body.run_id == dead_run
    assert "user_message" not in letter.body.request

    status, without_keys = await starter(sealed, "dlq", "redrive", handle.id, keys=False)

    assert status == 1, without_keys
    assert "does this starter have the worker's PAYLOAD_KEYS?" in without_keys
    assert "0 started, 0 already redriven, 0 refused, 0 skipped, 1 failed" in without_keys
    assert len(queue(sealed).peek()) == 1

    status, with_keys = await starter(sealed, "dlq", "redrive", handle.id)

    assert status == 0, with_keys
    assert f"{handle.id}: started run" in with_keys
    new_run = (await handle.describe()).run_id
    assert new_run not in (first_run, dead_run)
    restarted = PipelineRequest.model_validate(await started_with(keyed, handle.id, new_run))
    assert restarted == PipelineRequest.model_validate(original)
    await wait_until_round(handle, 1)  # a fresh run: its own first round
    approve = ReviewDecision(decision="approve", reviewer="ann")
    assert (await reviews.submit_review(keyed, handle.id, approve, signer=signer(sealed))).applied
    latest = keyed.get_workflow_handle(handle.id)  # `handle` follows the first run's chain
    assert (await finished(latest)).state == "completed"
    assert queue(sealed).peek() == []


async def test_two_operators_redriving_at_once_start_each_dead_run_once(
    sealed: LocalStack, keyed: Client
) -> None:
    """Three runs dead-letter and each message is in the queue twice (a retried send leaves a
    copy). Two `dlq redrive --all` run at the same time: together they start each dead run
    exactly once, account for every message (started or already redriven), and leave the queue
    empty."""
    dead = await dead_lettered(keyed, sealed, 3)
    client = sqs(sealed)
    url = client.get_queue_url(QueueName=QUEUE_NAME)["QueueUrl"]
    bodies = [
        letter.body.model_dump_json() for letter in queue(sealed).peek() if letter.body is not None
    ]
    assert len(bodies) == 3
    for body in bodies:
        client.send_message(QueueUrl=url, MessageBody=body)

    (status_a, out_a), (status_b, out_b) = await asyncio.gather(
        starter(sealed, "dlq", "redrive", "--all"), starter(sealed, "dlq", "redrive", "--all")
    )

    assert (status_a, status_b) == (0, 0), out_a + out_b
    started = out_a.count(": started run") + out_b.count(": started run")
    handled = started + out_a.count("already redriven (") + out_b.count("already redriven (")
    assert (started, handled) == (3, 6), out_a + out_b
    for workflow_id, dead_run in dead.items():
        assert await runs_of(keyed, workflow_id, 2) == 2
        assert (await keyed.get_workflow_handle(workflow_id).describe()).run_id != dead_run
    assert queue(sealed).peek() == []


async def test_racing_redrives_of_the_same_dead_runs_start_one_run_each(
    sealed: LocalStack, keyed: Client
) -> None:
    """Two redrives hold a copy of every dead letter at once (here from two queues, so each is
    sure to work on every run) and verify and start the same runs side by side: each dead run
    gets one new run. Once that run has completed, starting the dead run again (a redrive that
    verified just before it) returns the same run instead of a second one."""
    dead = await dead_lettered(keyed, sealed, 3)
    letters = queue(sealed).receive_all(timedelta(seconds=30))
    copies = [queue(sealed, "ops-a"), queue(sealed, "ops-b")]
    client = sqs(sealed)
    for copy in copies:
        url = client.create_queue(QueueName=copy.queue_name)["QueueUrl"]
        for letter in letters:
            assert letter.body is not None
            client.send_message(QueueUrl=url, MessageBody=letter.body.model_dump_json())
    for letter in letters:
        queue(sealed).delete(letter)

    outcomes = await asyncio.gather(
        *(
            redrive(keyed, copy, task_queue=contract.DEFAULT_TASK_QUEUE, select=None)
            for copy in copies
        )
    )

    print("racing redrives:", " | ".join(summarize(side) for side in outcomes))
    every = [outcome for side in outcomes for outcome in side]
    assert sorted(o.action for o in every) == ["already_redriven"] * 3 + ["started"] * 3, [
        summarize(side) for side in outcomes
    ]
    for workflow_id in dead:
        assert await runs_of(keyed, workflow_id, 2) == 2
    assert all(copy.peek() == [] for copy in copies)

    workflow_id, dead_run = next(iter(dead.items()))
    handle = keyed.get_workflow_handle(workflow_id)
    assert (await finished(handle)).state == "completed"
    new_run = (await handle.describe()).run_id
    verified = await verify_dead_run(
        keyed, workflow_id, dead_run, task_queue=contract.DEFAULT_TASK_QUEUE
    )
    late = await start_again(
        keyed, verified, task_queue=contract.DEFAULT_TASK_QUEUE, identity="a late operator"
    )
    assert late == new_run
    assert await runs_of(keyed, workflow_id, 2) == 2
