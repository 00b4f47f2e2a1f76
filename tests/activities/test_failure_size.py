"""The largest failures an activity can raise, through a real Temporal dev server: what the Web
UI and ``describe`` show for a retrying activity (its pending ``last_failure``, which the server
caps at ``limit.mutableStateActivityFailureSize.error``), and what the workflow gets once the
activity gives up (its ``ActivityError``'s cause) both start with the reason.

The activities run in a worker of this process with the project's plugin: the test's own
``raise_large_failure`` (``tests.support.large_failures``) and the real ``send_dead_letter``
with SQS unreachable, the case that showed the server's "Failure exceeds size limit." on
Python 3.13. The SDK's own failure converter on the same server is the control: the same
failure loses its reason there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import boto3
import pytest
import pytest_asyncio
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.converter import DataConverter, DefaultFailureConverter
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from activities.dead_letter import DeadLetterActivities
from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_temporal_dev_server
from aiorch_runtime import aws
from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.failures import FAILURE_BUDGET, SERVER_FAILURE_LIMIT
from aiorch_runtime.temporal import DATA_CONVERTER, AiOrchestratorPlugin, encrypted_converter
from tests.support.builders import dead_letter
from tests.support.large_failures import (
    BOTOCORE_REASON,
    KINDS,
    RAISE_LARGE_FAILURE,
    REASONS,
    Kind,
    raise_large_failure,
)
from tests.support.retrying_workflow import RunsOneActivity
from workflows import contract
from workflows.payloads import DeadLetterInput

pytestmark = pytest.mark.e2e

EXCEEDS_LIMIT = "Failure exceeds size limit."
# A few retries at RETRY_INTERVAL, on a loaded machine.
SEEN_WITHIN_S = 30.0
# Each converter, and the most bytes a failure may take as the server keeps it: the budget in
# plain text; encrypted, the budget plus what the codec adds to each level (the key id, the
# namespace and the workflow id, here all short).
CONVERTERS: dict[str, tuple[DataConverter, int]] = {
    "plain": (DATA_CONVERTER, FAILURE_BUDGET),
    "encrypted": (
        encrypted_converter(KeyRing.parse(f"k1:{new_key()}")),
        SERVER_FAILURE_LIMIT * 5 // 8,
    ),
}


@pytest.fixture(scope="module")
def server_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One dev server (the real one, with its failure size limit) for the module."""
    port = free_port()
    log_dir = tmp_path_factory.mktemp("temporal")
    server: ManagedProcess = start_temporal_dev_server(
        port=port, ui_port=None, db_file=None, log_dir=log_dir
    )
    with server:
        yield f"127.0.0.1:{port}"


@dataclasses.dataclass
class Running:
    """A worker of this test's own task queue, and its client."""

    client: Client
    task_queue: str
    bound: int

    async def start(self, activity: str, arg: Any, attempts: int) -> WorkflowHandle[Any, Any]:
        return await self.client.start_workflow(
            RunsOneActivity.run,
            args=[activity, arg, attempts],
            id=f"failure-size-{uuid.uuid4().hex[:12]}",
            task_queue=self.task_queue,
        )


async def running(
    address: str, converter: DataConverter, bound: int = SERVER_FAILURE_LIMIT
) -> AsyncIterator[Running]:
    client = await Client.connect(address, plugins=[AiOrchestratorPlugin(data_converter=converter)])
    task_queue = f"failure-size-{uuid.uuid4().hex[:8]}"
    unreachable_sqs = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("sqs", endpoint_url=f"http://127.0.0.1:{free_port()}", config=aws.WORKER)
    dead_letters = DeadLetterActivities(unreachable_sqs, "ai-orchestrator-dlq")
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[RunsOneActivity],
        activities=[raise_large_failure, dead_letters.send_dead_letter],
    ):
        yield Running(client, task_queue, bound)


@pytest_asyncio.fixture(params=list(CONVERTERS))
async def worker(request: pytest.FixtureRequest, server_address: str) -> AsyncIterator[Running]:
    """A worker with the project's plugin: plain, or with payload encryption."""
    async for each in running(server_address, *CONVERTERS[request.param]):
        yield each


@pytest_asyncio.fixture
async def sdk_worker(server_address: str) -> AsyncIterator[Running]:
    """The control: the project's plugin with the SDK's own failure converter."""
    converter = dataclasses.replace(DATA_CONVERTER, failure_converter_class=DefaultFailureConverter)
    async for each in running(server_address, converter):
        yield each


async def last_failure(handle: WorkflowHandle[Any, Any]) -> PendingActivityInfo:
    """The pending activity once it has failed twice (so the server has kept a failure and
    replaced nothing it still had to store), as the Web UI shows it."""
    deadline = time.monotonic() + SEEN_WITHIN_S
    while True:
        description = await handle.describe()
        pending = list(description.raw_description.pending_activities)
        if pending and pending[0].attempt >= 3:
            return pending[0]
        assert time.monotonic() < deadline, f"no retried activity in {handle.id}: {pending}"
        await asyncio.sleep(0.1)


async def read(client: Client, failure: Failure) -> list[BaseException]:
    """The failure decoded as the Web UI's codec server would, then each of its causes."""
    copy = Failure()
    copy.CopyFrom(failure)
    error: BaseException | None = await client.data_converter.decode_failure(copy)
    chain: list[BaseException] = []
    while error is not None:
        chain.append(error)
        error = error.__cause__
    return chain


def message(error: BaseException) -> str:
    assert isinstance(error, ApplicationError), repr(error)
    return error.message


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retrying_activity_shows_the_reason_of_its_largest_failures(
    worker: Running, kind: Kind
) -> None:
    """While the activity retries, its pending last failure is the activity's own (not the
    server's replacement), within the budget (encrypted: well under the limit), with the reason
    first and the root cause last."""
    reason, root = REASONS[kind]
    handle = await worker.start(RAISE_LARGE_FAILURE, kind, attempts=0)
    try:
        pending = await last_failure(handle)
    finally:
        await handle.terminate("test over")

    kept = pending.last_failure
    assert kept.message != EXCEEDS_LIMIT
    assert kept.ByteSize() <= worker.bound
    chain = await read(worker.client, kept)
    assert message(chain[0]).startswith(reason)
    if root is not None:
        assert root in message(chain[-1])


@pytest.mark.parametrize("kind", KINDS)
async def test_the_workflow_gets_the_reason_once_the_activity_gives_up(
    worker: Running, kind: Kind
) -> None:
    """After its last attempt, the workflow's ActivityError has the activity's failure as its
    cause, with the reason first and the error type it was raised with."""
    reason, _ = REASONS[kind]
    handle = await worker.start(RAISE_LARGE_FAILURE, kind, attempts=1)

    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()

    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    cause = activity_error.cause
    assert isinstance(cause, ApplicationError)
    assert cause.message.startswith(reason)


async def test_send_dead_letter_with_sqs_down_shows_why(worker: Running) -> None:
    """The real send_dead_letter, SQS unreachable: the pending activity's last failure is
    botocore's "Could not connect to the endpoint URL", as an operator must see it."""
    letter = DeadLetterInput(message=dead_letter()).model_dump(mode="json")
    handle = await worker.start(contract.ACTIVITY_SEND_DEAD_LETTER, letter, attempts=0)
    try:
        pending = await last_failure(handle)
    finally:
        await handle.terminate("test over")

    assert pending.last_failure.ByteSize() <= worker.bound
    [error, *_] = await read(worker.client, pending.last_failure)
    assert message(error).startswith(BOTOCORE_REASON)
    assert pending.last_failure.application_failure_info.type == "EndpointConnectionError"


async def test_without_the_bounds_the_server_replaces_the_reason(sdk_worker: Running) -> None:
    """The control: with the SDK's own converter the same failure passes the server's limit,
    and the pending activity shows the server's replacement instead of the reason."""
    handle = await sdk_worker.start(RAISE_LARGE_FAILURE, "deep_chain", attempts=0)
    try:
        pending = await last_failure(handle)
    finally:
        await handle.terminate("test over")

    assert pending.last_failure.message == EXCEEDS_LIMIT
