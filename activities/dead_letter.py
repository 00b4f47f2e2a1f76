"""The dead-letter queue: SQS through boto3.

Each message carries a deduplication key derived from workflow id and run id (a message
attribute, and the MessageDeduplicationId on FIFO queues), so a consumer can drop the copy a
retried send may leave. Bodies are kept under SQS's 256 KiB limit by cutting the largest parts
and saying so in the message.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import activity

from aiorch.redaction import content_free_dead_letter
from workflows import contract
from workflows.payloads import DeadLetterInput, DeadLetterMessage, DeadLetterReceipt

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeNameType
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

MAX_BODY_BYTES = 250 * 1024
_KEEP_TEXT = 2000


def dedup_key(message: DeadLetterMessage) -> str:
    return f"{message.workflow_id}:{message.run_id}"


def _size(message: DeadLetterMessage) -> int:
    return len(message.model_dump_json().encode("utf-8"))


def fit_body(message: DeadLetterMessage, limit: int = MAX_BODY_BYTES) -> str:
    """The message as JSON of at most ``limit`` bytes, cutting (and marking) what is too long."""
    if _size(message) <= limit:
        return message.model_dump_json()
    request = dict(message.request)
    text = str(request.get("user_message", ""))
    if len(text) > _KEEP_TEXT:
        request["user_message"] = text[:_KEEP_TEXT]
        request["truncated"] = f"user_message cut from {len(text)} characters"
    last_error = message.last_error
    if last_error and len(last_error) > _KEEP_TEXT:
        last_error = last_error[:_KEEP_TEXT] + " [cut]"
    history = list(message.history)
    fitted = message.model_copy(
        update={"request": request, "last_error": last_error, "history": history}
    )
    while _size(fitted) > limit and history:
        history = history[len(history) // 2 + 1 :] if len(history) > 1 else []
        fitted = fitted.model_copy(update={"history": history})
    if _size(fitted) > limit:
        request = {"request_id": request.get("request_id"), "truncated": "request too large"}
        fitted = fitted.model_copy(update={"request": request})
    return fitted.model_dump_json()


class DeadLetterActivities:
    """``send_dead_letter``; the SQS client (retries off) is injected by the worker."""

    def __init__(self, sqs: SQSClient, queue_name: str, *, content_free: bool = False) -> None:
        self._sqs = sqs
        self._queue_name = queue_name
        # With payload encryption on, bodies carry no content (aiorch.redaction).
        self._content_free = content_free
        self._queue_url: str | None = None

    @activity.defn(name=contract.ACTIVITY_SEND_DEAD_LETTER)
    async def send_dead_letter(self, dead_letter: DeadLetterInput) -> DeadLetterReceipt:
        """Send the message; raising on any failure lets Temporal retry until SQS accepts it."""
        return await asyncio.to_thread(self._send, dead_letter.message)

    def _send(self, message: DeadLetterMessage) -> DeadLetterReceipt:
        try:
            return self._send_to(self._queue_url or self._resolve_queue(), message)
        except self._sqs.exceptions.QueueDoesNotExist:
            # The queue went away since its URL was cached (deleted by an operator, or a local
            # SQS restarted empty): resolve (and if need be create) it again, then send once
            # more. Any other failure is raised for Temporal to retry.
            self._queue_url = None
            return self._send_to(self._resolve_queue(), message)

    def _send_to(self, queue_url: str, message: DeadLetterMessage) -> DeadLetterReceipt:
        body = fit_body(content_free_dead_letter(message) if self._content_free else message)
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            "dedup_key": {"DataType": "String", "StringValue": dedup_key(message)}
        }
        if queue_url.endswith(".fifo"):
            sent = self._sqs.send_message(
                QueueUrl=queue_url,
                MessageBody=body,
                MessageAttributes=attributes,
                MessageGroupId=message.workflow_id,
                MessageDeduplicationId=dedup_key(message)[:128],
            )
        else:
            sent = self._sqs.send_message(
                QueueUrl=queue_url, MessageBody=body, MessageAttributes=attributes
            )
        return DeadLetterReceipt(message_id=sent["MessageId"], queue_url=queue_url)

    def _resolve_queue(self) -> str:
        try:
            url = self._sqs.get_queue_url(QueueName=self._queue_name)["QueueUrl"]
        except self._sqs.exceptions.QueueDoesNotExist:
            # SQS refuses a .fifo name on any other kind of queue.
            fifo: dict[QueueAttributeNameType, str] = (
                {"FifoQueue": "true"} if self._queue_name.endswith(".fifo") else {}
            )
            url = self._sqs.create_queue(QueueName=self._queue_name, Attributes=fifo)["QueueUrl"]
        self._queue_url = url
        return url
