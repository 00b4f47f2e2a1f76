"""The dead-letter queue from the operator's side: list dead-lettered runs and redrive them.

``starter.py dlq list`` and ``starter.py dlq redrive`` (``aiorch.cli``) are thin wrappers
around this module.

Listing never consumes a message. SQS hands out at most ten messages per receive and, with a
visibility timeout of zero, may hand out the same ten again, so the queue is paged by receiving
with a short visibility timeout (received messages stay hidden while the next page is fetched)
until a receive brings no new message id; then every message is made visible again at once.

Redrive starts each dead-lettered request again as a new run of the same workflow id (the
contract's id = request_id), so it gets a fresh attempt budget and the dead-lettered run stays
in history next to it. The message is deleted only after the new run has started: a crash in
between leaves it in the queue, and redriving it again sees that the workflow id already has a
newer run and only deletes the message, so nothing runs twice. (If redrive itself dies, the
messages it had received become visible again when their hold, ``REDRIVE_HOLD``, runs out.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal, ParamSpec, TypeVar

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.config import Settings
from workflows import contract
from workflows.errors import OrchestratorError
from workflows.payloads import DeadLetterMessage, PipelineRequest, describe_validation_error

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

# An operator's command, not an activity: a few quick retries of throttling or a dropped
# connection are welcome here, and nothing multiplies them.
BOTO_CONFIG = BotoConfig(
    retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=15
)
# How long received messages stay hidden while the rest of the queue is paged through (list)
# or the chosen ones are redriven; both make the ones they keep visible again right after.
LIST_HOLD = timedelta(seconds=30)
REDRIVE_HOLD = timedelta(minutes=5)
_PAGE = 10  # SQS's maximum per receive

RedriveAction = Literal["started", "already_redriven", "skipped", "failed"]
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


@dataclass(frozen=True)
class RedriveOutcome:
    """What redrive did with one message."""

    message_id: str
    workflow_id: str | None
    action: RedriveAction
    detail: str
    new_run_id: str | None = None


def sqs_client(settings: Settings) -> SQSClient:
    """A boto3 SQS client for ``SQS_ENDPOINT_URL`` (unset: AWS) in ``AWS_REGION``."""
    session = boto3.session.Session(region_name=settings.aws_region)
    return session.client("sqs", endpoint_url=settings.sqs_endpoint_url, config=BOTO_CONFIG)


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
        return cls(sqs_client(settings), settings.dlq_queue_name)

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
        url = self.url()
        pending = list(letters)
        if url is None or not pending:
            return
        for start in range(0, len(pending), _PAGE):
            batch = pending[start : start + _PAGE]
            self._call(
                self._sqs.change_message_visibility_batch,
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": letter.receipt_handle, "VisibilityTimeout": 0}
                    for i, letter in enumerate(batch)
                ],
            )

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


async def redrive(
    client: Client,
    queue: DeadLetterQueue,
    *,
    task_queue: str,
    select: str | None,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[RedriveOutcome]:
    """Start the dead-lettered runs again and delete their messages.

    Args:
        client: connected to the namespace the runs live in.
        queue: the dead-letter queue.
        task_queue: where the new runs go (``TEMPORAL_TASK_QUEUE``).
        select: a workflow id (or SQS message id) to redrive only its messages; None for all.
        progress: called with one line per step, for the operator.

    Raises:
        DeadLetterQueueError: the queue cannot be read, or ``select`` matches no message.
    """
    letters = await asyncio.to_thread(queue.receive_all, REDRIVE_HOLD)
    chosen = [x for x in letters if select is None or select in (x.workflow_id, x.message_id)]
    chosen_ids = {x.message_id for x in chosen}
    await asyncio.to_thread(queue.release, [x for x in letters if x.message_id not in chosen_ids])
    if select is not None and not chosen:
        raise DeadLetterQueueError(f"no dead letter for {select} in the {queue.where}")
    progress(f"redriving {len(chosen)} dead letter(s) from the {queue.where}")
    outcomes = []
    for letter in chosen:
        try:
            outcome = await _redrive_one(client, queue, letter, task_queue, progress)
        except (OrchestratorError, RPCError) as err:
            # Visible again for the next try; if SQS is down too, the hold runs out by itself.
            with contextlib.suppress(DeadLetterQueueError):
                await asyncio.to_thread(queue.release, [letter])
            outcome = RedriveOutcome(letter.message_id, letter.workflow_id, "failed", str(err))
            progress(f"{letter.workflow_id or letter.message_id}: not redriven: {err}")
        outcomes.append(outcome)
    return outcomes


async def _redrive_one(
    client: Client,
    queue: DeadLetterQueue,
    letter: DeadLetter,
    task_queue: str,
    progress: Callable[[str], None],
) -> RedriveOutcome:
    dead = letter.body
    if dead is None:
        await asyncio.to_thread(queue.release, [letter])
        progress(f"message {letter.message_id}: skipped, {letter.problem}")
        return RedriveOutcome(letter.message_id, None, "skipped", letter.problem or "")
    wid = dead.workflow_id
    latest = await _latest_run(client, wid)
    if latest is not None and latest[0] != dead.run_id:
        return await _drop_redriven(queue, letter, f"run {latest[0]} already replaced it", progress)
    if latest is not None and latest[1] == WorkflowExecutionStatus.RUNNING:
        await asyncio.to_thread(queue.release, [letter])
        progress(f"{wid}: skipped, run {dead.run_id} is still running")
        return RedriveOutcome(letter.message_id, wid, "skipped", "the run is still running")
    request = await original_request(client, dead)
    try:
        handle = await client.start_workflow(
            contract.WORKFLOW_TYPE,
            request.model_dump(mode="json"),
            id=wid,
            task_queue=task_queue,
            # The contract starts an id once (REJECT_DUPLICATE); a redrive deliberately
            # starts it again, and only ever after the dead-lettered run has closed.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(
                        SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE), "idle"
                    )
                ]
            ),
            static_summary=f"AI pipeline run (review: {request.review}), redriven",
            static_details=(
                f"redrive of run {dead.run_id}, dead-lettered in {dead.failed_state} after "
                f"{dead.attempts} attempt(s): {dead.last_error or 'no error recorded'}"
            ),
        )
    except WorkflowAlreadyStartedError:
        return await _drop_redriven(queue, letter, "another redrive started it", progress)
    new_run = handle.result_run_id or "?"
    progress(f"{wid}: started run {new_run} (replaces dead-lettered run {dead.run_id})")
    await asyncio.to_thread(queue.delete, letter)
    progress(f"{wid}: deleted message {letter.message_id}")
    return RedriveOutcome(letter.message_id, wid, "started", "started", new_run_id=new_run)


async def _drop_redriven(
    queue: DeadLetterQueue, letter: DeadLetter, why: str, progress: Callable[[str], None]
) -> RedriveOutcome:
    await asyncio.to_thread(queue.delete, letter)
    progress(f"{letter.workflow_id}: already redriven ({why}); deleted message {letter.message_id}")
    return RedriveOutcome(letter.message_id, letter.workflow_id, "already_redriven", why)


async def _latest_run(
    client: Client, workflow_id: str
) -> tuple[str, WorkflowExecutionStatus | None] | None:
    """The run id and status of the newest run with this id, or None when there is none."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:  # never started, or past retention
            return None
        raise
    return description.run_id, description.status


async def original_request(client: Client, dead: DeadLetterMessage) -> PipelineRequest:
    """The request to run again: the message's copy, or, when the message had to be cut to fit
    SQS's size limit, the dead-lettered run's own input from Temporal history.

    Raises:
        DeadLetterQueueError: neither is usable.
    """
    try:
        return PipelineRequest.model_validate(dead.request)
    except ValidationError as err:
        cut = describe_validation_error(err)
    handle = client.get_workflow_handle(dead.workflow_id, run_id=dead.run_id)
    try:
        history = await handle.fetch_history()
    except RPCError as err:
        raise DeadLetterQueueError(
            f"{dead.workflow_id}: the message's request is incomplete ({cut}) and the run's "
            f"history is unavailable ({err.message})"
        ) from None
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [raw] = await client.data_converter.decode(payloads)
            try:
                return PipelineRequest.model_validate(raw)
            except ValidationError as err:
                cut = describe_validation_error(err)
    raise DeadLetterQueueError(f"{dead.workflow_id}: no usable request to redrive ({cut})")


def summarize(outcomes: Sequence[RedriveOutcome]) -> str:
    """One line: how many runs were started, found already redriven, skipped or failed."""
    counts = {action: 0 for action in ("started", "already_redriven", "skipped", "failed")}
    for outcome in outcomes:
        counts[outcome.action] += 1
    return (
        f"{counts['started']} started, {counts['already_redriven']} already redriven, "
        f"{counts['skipped']} skipped, {counts['failed']} failed"
    )


def format_age(age: timedelta | None) -> str:
    """``42s``, ``3m 07s``, ``5h 02m`` or ``2d 04h``."""
    if age is None:
        return "?"
    seconds = int(age.total_seconds())
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    days, hrs = divmod(hours, 24)
    if days:
        return f"{days}d {hrs:02d}h"
    if hours:
        return f"{hours}h {mins:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


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
