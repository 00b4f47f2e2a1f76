"""The dead-letter queue against a real SQS endpoint (moto in server mode, its own process).

``send_dead_letter`` runs in the activity test environment with the worker's boto3 settings;
the operator's side (``aiorch.ops.dead_letters``: list without consuming, delete) reads the same
queue. moto enforces a queue's ``MaximumMessageSize`` (``InvalidParameterValue``, as SQS does)
but not SQS's character set, so permanent rejections are produced with a small queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import EndpointConnectionError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.dead_letter import MAX_BODY_BYTES, DeadLetterActivities, dedup_key
from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_sqs_server
from aiorch.ops.dead_letters import DeadLetterQueue
from aiorch_runtime import aws
from tests.support.builders import REQUEST_ID, dead_letter, history_entry, triage_fields
from workflows import errors
from workflows.payloads import DeadLetterInput, DeadLetterMessage

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

QUEUE = "test-dlq"
# SQS's smallest MaximumMessageSize.
SMALL_QUEUE_BYTES = 1024
# What worker.py gives the activity: one boto3 attempt, so Temporal owns every retry.
WORKER_BOTO = aws.WORKER

pytestmark = pytest.mark.e2e


class Sqs:
    """A moto server process that a test may stop and start again on the same port."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.log_dir = log_dir
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: ManagedProcess | None = None
        self.start()

    def start(self) -> None:
        self.proc = start_sqs_server(port=self.port, log_dir=self.log_dir)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def client(self, config: BotoConfig = WORKER_BOTO) -> SQSClient:
        return boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        ).client("sqs", endpoint_url=self.url, config=config)


@pytest.fixture
def sqs(tmp_path: Path) -> Iterator[Sqs]:
    server = Sqs(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def message(workflow_id: str, run_id: str = "run-1", text: str = "hello") -> DeadLetterMessage:
    return dead_letter(
        text,
        workflow_id=workflow_id,
        run_id=run_id,
        history=[history_entry("invoke_llm", "retry_llm", "retryable_error", attempt=1)],
    )


async def send(activities: DeadLetterActivities, dead: DeadLetterMessage) -> str:
    receipt = await ActivityEnvironment().run(
        activities.send_dead_letter, DeadLetterInput(message=dead)
    )
    return receipt.message_id


def all_raw(sqs: Sqs) -> list[MessageTypeDef]:
    """Every message with its attributes, made visible again afterwards."""
    client = sqs.client()
    url = client.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    found = client.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30, MessageAttributeNames=["All"]
    ).get("Messages", [])
    for item in found:
        client.change_message_visibility(
            QueueUrl=url, ReceiptHandle=item["ReceiptHandle"], VisibilityTimeout=0
        )
    return found


async def test_send_creates_the_queue_and_sends_the_contract_body(sqs: Sqs) -> None:
    """The first send creates the missing queue; the body is the contract's message and carries
    the workflow:run deduplication key as a message attribute."""
    activities = DeadLetterActivities(sqs.client(), QUEUE)
    dead = message("wf-1")

    message_id = await send(activities, dead)

    [raw] = all_raw(sqs)
    assert raw["MessageId"] == message_id
    assert DeadLetterMessage.model_validate_json(str(raw["Body"])) == dead
    attributes = raw["MessageAttributes"]
    assert attributes == {"dedup_key": {"DataType": "String", "StringValue": "wf-1:run-1"}}
    assert dedup_key(dead) == "wf-1:run-1"


async def test_fifo_queue_is_created_as_fifo_and_drops_a_repeated_send(sqs: Sqs) -> None:
    """A DLQ_QUEUE_NAME ending in .fifo is created as a FIFO queue, and the same run's message
    sent twice (a retried activity) arrives once: its deduplication id is workflow:run."""
    activities = DeadLetterActivities(sqs.client(), "test-dlq.fifo")
    dead = message("wf-fifo")

    await send(activities, dead)
    await send(activities, dead)

    client = sqs.client()
    url = client.get_queue_url(QueueName="test-dlq.fifo")["QueueUrl"]
    attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["FifoQueue"])
    assert attributes["Attributes"]["FifoQueue"] == "true"
    received = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    assert [DeadLetterMessage.model_validate_json(str(m["Body"])) for m in received] == [dead]


async def test_unreachable_sqs_fails_the_attempt_fast(sqs: Sqs) -> None:
    """With SQS down the activity raises at once (connection refused, one boto3 attempt), so
    Temporal's retry policy, not boto3, decides when to try again."""
    activities = DeadLetterActivities(sqs.client(), QUEUE)
    sqs.stop()
    started = time.monotonic()

    with pytest.raises(EndpointConnectionError):
        await send(activities, message("wf-down"))
    assert time.monotonic() - started < 3


async def test_send_recovers_when_the_queue_vanished(sqs: Sqs) -> None:
    """A queue that disappears after its URL was cached (local SQS restarted empty) is created
    again and the message sent in the same attempt: exactly one message arrives."""
    activities = DeadLetterActivities(sqs.client(), QUEUE)
    await send(activities, message("wf-before"))
    sqs.stop()
    sqs.start()  # moto keeps no state: the queue is gone

    await send(activities, message("wf-after"))

    bodies = [json.loads(str(raw["Body"]))["workflow_id"] for raw in all_raw(sqs)]
    assert bodies == ["wf-after"]


async def test_huge_message_is_accepted_by_sqs(sqs: Sqs) -> None:
    """A 1 MB request is cut to fit; SQS accepts it and the body says what was cut."""
    activities = DeadLetterActivities(sqs.client(), QUEUE)

    await send(activities, message("wf-huge", text="x" * 1_000_000))

    [raw] = all_raw(sqs)
    assert len(str(raw["Body"]).encode()) <= MAX_BODY_BYTES
    body = DeadLetterMessage.model_validate_json(str(raw["Body"]))
    assert "cut from 1000000 characters" in body.request["truncated"]


async def test_listing_pages_past_ten_and_consumes_nothing(sqs: Sqs) -> None:
    """The operator's listing finds all 23 messages (SQS returns at most ten per receive), oldest
    first, and leaves every one of them visible: a second listing sees them all again."""
    activities = DeadLetterActivities(sqs.client(), QUEUE)
    for number in range(23):
        await send(activities, message(f"wf-{number:02d}"))
    queue = DeadLetterQueue(sqs.client(), QUEUE, wait_s=0)

    first = queue.peek()
    second = queue.peek()

    assert [letter.workflow_id for letter in first] == [f"wf-{n:02d}" for n in range(23)]
    assert {letter.message_id for letter in second} == {letter.message_id for letter in first}
    assert all(letter.problem is None and letter.sent_at is not None for letter in first)
    client = sqs.client()
    url = client.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    attributes = client.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert attributes == {
        "ApproximateNumberOfMessages": "23",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }


async def test_listing_a_missing_queue_is_empty(sqs: Sqs) -> None:
    """Before anything was dead-lettered the queue does not exist: the listing is empty and
    does not create it."""
    queue = DeadLetterQueue(sqs.client(), "never-created", wait_s=0)

    assert queue.peek() == []
    assert "QueueUrls" not in sqs.client().list_queues()


async def test_unreadable_message_is_listed_with_its_problem(sqs: Sqs) -> None:
    """A message that is not a dead-letter body is listed (not hidden, not deleted) with the
    reason it cannot be read."""
    client = sqs.client()
    url = client.create_queue(QueueName=QUEUE)["QueueUrl"]
    client.send_message(QueueUrl=url, MessageBody="not json")
    queue = DeadLetterQueue(client, QUEUE, wait_s=0)

    [letter] = queue.peek()

    assert letter.body is None
    assert letter.problem is not None and "not a dead-letter message" in letter.problem
    assert len(queue.peek()) == 1


async def test_odd_characters_arrive_as_ascii_and_decode_to_the_original(sqs: Sqs) -> None:
    """A request holding U+FFFE, U+FFFF, control, non-BMP and other odd characters (which real
    SQS refuses raw: InvalidMessageContents) arrives; the raw body is pure ASCII JSON and decodes
    to the original message."""
    activities = DeadLetterActivities(sqs.client(), QUEUE)
    odd = '\ufffe\uffff\x00\x08\x1b\x7f\U0001f600\U0010fffd\u2028\u202e\ufeff\\"\ud7ff\ue000'
    dead = message("wf-odd", text=f"start {odd} end").model_copy(
        update={"last_error": f"LlmMalformedReply: {odd}"}
    )

    message_id = await send(activities, dead)

    [raw] = all_raw(sqs)
    assert raw["MessageId"] == message_id
    body = str(raw["Body"])
    assert body.isascii()
    assert DeadLetterMessage.model_validate_json(body) == dead


async def test_body_the_queue_refuses_is_sent_reduced(sqs: Sqs) -> None:
    """A queue whose MaximumMessageSize the message exceeds refuses it (InvalidParameterValue);
    the message arrives reduced: ids, failed state, attempts and the error's type, no content,
    and a note that says it was reduced and why."""
    client = sqs.client()
    client.create_queue(QueueName=QUEUE, Attributes={"MaximumMessageSize": str(SMALL_QUEUE_BYTES)})
    activities = DeadLetterActivities(client, QUEUE)
    dead = message("wf-small", text="private words " * 200)

    await send(activities, dead)

    [raw] = all_raw(sqs)
    body = str(raw["Body"])
    assert len(body) <= SMALL_QUEUE_BYTES
    assert "private words" not in body
    reduced = DeadLetterMessage.model_validate_json(body)
    assert triage_fields(reduced) == ("wf-small", "run-1", "invoke_llm", 3)
    assert reduced.last_error == "LlmRetryable"
    assert reduced.request["request_id"] == REQUEST_ID
    assert "InvalidParameterValue" in reduced.request["reduced"]
    assert raw["MessageAttributes"]["dedup_key"]["StringValue"] == "wf-small:run-1"


async def test_reduced_body_refused_too_fails_for_good(sqs: Sqs) -> None:
    """When even the reduced message is refused (here its workflow id alone is over the
    queue's limit), the activity raises the non-retryable DeadLetterRejected instead of
    retrying forever, and nothing reaches the queue."""
    client = sqs.client()
    client.create_queue(QueueName=QUEUE, Attributes={"MaximumMessageSize": str(SMALL_QUEUE_BYTES)})
    activities = DeadLetterActivities(client, QUEUE)

    with pytest.raises(ApplicationError) as refused:
        await send(activities, message("w" * 1500))

    assert refused.value.type == errors.DEAD_LETTER_REJECTED
    assert refused.value.non_retryable
    assert "InvalidParameterValue" in refused.value.message
    assert all_raw(sqs) == []


async def test_hold_reports_the_messages_it_no_longer_holds(sqs: Sqs) -> None:
    """Renewing the hold of received messages hides them again for the whole period and names
    the ones that can no longer be held (here: deleted by another consumer meanwhile)."""
    activities = DeadLetterActivities(sqs.client(), QUEUE)
    for name in ("wf-kept", "wf-taken"):
        await send(activities, message(name))
    queue = DeadLetterQueue(sqs.client(), QUEUE, wait_s=0)
    received = {letter.workflow_id: letter for letter in queue.receive_all(timedelta(seconds=30))}
    kept, taken = received["wf-kept"], received["wf-taken"]
    queue.delete(taken)

    lost = queue.hold([kept, taken], timedelta(seconds=60))

    assert lost == {taken.message_id}
    assert queue.receive_all(timedelta(seconds=1)) == []  # the kept one is still hidden
