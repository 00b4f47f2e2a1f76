"""The dead-letter queue from the operator's side: read, hold, release and delete messages.

``starter.py dlq list`` is a thin wrapper around this module; ``starter.py dlq redrive`` uses it
through ``aiorch.ops.redrive``, which verifies every message against Temporal before it acts.

Listing never consumes a message. SQS hands out at most ten messages per receive and, with a
visibility timeout of zero, may hand out the same ten again, so the queue is paged by receiving
with a short visibility timeout (received messages stay hidden while the next page is fetched)
until a receive brings no new message id; then every message is made visible again at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from aiorch_runtime import aws
from aiorch_runtime.config import Settings
from workflows.errors import OrchestratorError
from workflows.payloads import DeadLetterMessage, describe_validation_error

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

# How long received messages stay hidden while the rest of the queue is paged through (list);
# listing makes them visible again right after.
LIST_HOLD = timedelta(seconds=30)
_PAGE = 10  # SQS's maximum per receive

P = ParamSpec("P")
R = TypeVar("R")


class DeadLetterQueueError(OrchestratorError):
    """The queue cannot be read or changed; the message says what to check."""


@dataclass(frozen=True)
class DeadLetter:
    """One message of the queue: the run it describes, or why its body could not be read."""

    message_id: str
    receipt_handle: str
    sent_at: datetime | None
    body: DeadLetterMessage | None
    problem: str | None = None

    @property
    def workflow_id(self) -> str | None:
        return self.body.workflow_id if self.body else None

    def age(self, now: datetime) -> timedelta | None:
        """How long ago SQS accepted the message (its ``SentTimestamp``)."""
        return None if self.sent_at is None else max(timedelta(0), now - self.sent_at)


def parse_message(message: MessageTypeDef) -> DeadLetter:
    """A received SQS message as a `DeadLetter`; an unreadable body is kept with its problem."""
    sent = message.get("Attributes", {}).get("SentTimestamp")
    sent_at = datetime.fromtimestamp(int(sent) / 1000, UTC) if sent else None
    body: DeadLetterMessage | None = None
    problem: str | None = None
    try:
        body = DeadLetterMessage.model_validate_json(message.get("Body", ""))
    except ValidationError as err:
        problem = f"body is not a dead-letter message: {describe_validation_error(err)}"
    return DeadLetter(
        message_id=message["MessageId"],
        receipt_handle=message["ReceiptHandle"],
        sent_at=sent_at,
        body=body,
        problem=problem,
    )


class DeadLetterQueue:
    """The queue named by ``DLQ_QUEUE_NAME``, as an operator reads and cleans it."""

    def __init__(self, sqs: SQSClient, queue_name: str, *, wait_s: int = 1) -> None:
        """``wait_s`` is the long-poll wait of each receive: SQS's short polls sample only
        some of its servers and can miss messages of a small queue; a long poll asks them all.
        """
        self._sqs = sqs
        self.queue_name = queue_name
        self._wait_s = wait_s
        self._url: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> DeadLetterQueue:
        return cls(aws.sqs_client(settings, aws.OPERATOR), settings.dlq_queue_name)

    @property
    def where(self) -> str:
        """The queue and its endpoint, for messages to the operator."""
        return f"queue {self.queue_name!r} at {self._sqs.meta.endpoint_url}"

    def url(self) -> str | None:
        """The queue's URL, or None when it does not exist (nothing was ever dead-lettered)."""
        if self._url is None:
            try:
                self._url = self._call(self._sqs.get_queue_url, QueueName=self.queue_name)[
                    "QueueUrl"
                ]
            except self._sqs.exceptions.QueueDoesNotExist:
                return None
        return self._url

    def peek(self) -> list[DeadLetter]:
        """Every message, oldest first, leaving all of them in the queue and visible."""
        letters = self.receive_all(LIST_HOLD)
        self.release(letters)
        return letters

    def receive_all(self, hold: timedelta) -> list[DeadLetter]:
        """Receive every message, hidden from other consumers for ``hold``; oldest first.

        Call `release` (or `delete`) for each afterwards.
        """
        url = self.url()
        if url is None:
            return []
        seen: dict[str, DeadLetter] = {}
        while True:
            page = self._call(
                self._sqs.receive_message,
                QueueUrl=url,
                MaxNumberOfMessages=_PAGE,
                VisibilityTimeout=int(hold.total_seconds()),
                WaitTimeSeconds=self._wait_s,
                MessageSystemAttributeNames=["SentTimestamp"],
            ).get("Messages", [])
            new = [parse_message(m) for m in page if m["MessageId"] not in seen]
            if not new:
                break
            # A message received again (its hold ran out) has a new receipt handle; only the
            # latest one can release or delete it.
            seen.update({letter.message_id: letter for letter in new})
        epoch = datetime.min.replace(tzinfo=UTC)
        return sorted(seen.values(), key=lambda letter: letter.sent_at or epoch)

    def release(self, letters: Iterable[DeadLetter]) -> None:
        """Make received messages visible again at once."""
        self.hold(letters, timedelta(0))

    def hold(self, letters: Iterable[DeadLetter], hold: timedelta) -> set[str]:
        """Keep received messages hidden for ``hold`` from now (zero: visible again at once).

        Returns the ids of the messages whose hold could not be set: another consumer received
        them since (their receipt handle is stale) or they are gone.
        """
        url = self.url()
        pending = list(letters)
        if url is None or not pending:
            return set()
        lost: set[str] = set()
        for start in range(0, len(pending), _PAGE):
            batch = pending[start : start + _PAGE]
            answer = self._call(
                self._sqs.change_message_visibility_batch,
                QueueUrl=url,
                Entries=[
                    {
                        "Id": str(i),
                        "ReceiptHandle": letter.receipt_handle,
                        "VisibilityTimeout": int(hold.total_seconds()),
                    }
                    for i, letter in enumerate(batch)
                ],
            )
            lost.update(batch[int(failed["Id"])].message_id for failed in answer.get("Failed", []))
        return lost

    def delete(self, letter: DeadLetter) -> None:
        """Remove a message for good."""
        url = self.url()
        if url is not None:
            self._call(self._sqs.delete_message, QueueUrl=url, ReceiptHandle=letter.receipt_handle)

    def _call(self, method: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except self._sqs.exceptions.QueueDoesNotExist:
            raise
        except (BotoCoreError, ClientError) as err:
            raise DeadLetterQueueError(
                f"cannot use the dead-letter {self.where}: {err}. Is SQS running and are "
                "SQS_ENDPOINT_URL, AWS_REGION and the AWS credentials right?"
            ) from None


def to_json(letters: Sequence[DeadLetter], now: datetime) -> str:
    """The listing as JSON lines material for scripts (``dlq list --json``)."""
    return json.dumps(
        [
            {
                "message_id": x.message_id,
                "workflow_id": x.workflow_id,
                "run_id": x.body.run_id if x.body else None,
                "failed_state": x.body.failed_state if x.body else None,
                "attempts": x.body.attempts if x.body else None,
                "last_error": x.body.last_error if x.body else None,
                "sent_at": x.sent_at.isoformat() if x.sent_at else None,
                "age_s": age.total_seconds() if (age := x.age(now)) is not None else None,
                "problem": x.problem,
            }
            for x in letters
        ],
        indent=2,
    )
