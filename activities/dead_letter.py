"""The dead-letter queue: SQS through boto3.

A dead letter always lands, or fails for good; it never retries forever on a permanent error:

- The body is ASCII-only JSON (``json.dumps(..., ensure_ascii=True)`` of the message's JSON
  dump). SQS refuses characters outside its allowed set (U+FFFE, U+FFFF, most control
  characters: ``InvalidMessageContents``), and a run's text may hold any of them; escaped, the
  body is the same JSON and decodes to the same message. Lone surrogates, which no UTF-8 text
  can carry, become U+FFFD.
- It is kept under ``MAX_BODY_BYTES`` (measured on the ASCII form) by cutting the largest parts
  and saying so in the message.
- A body SQS still refuses for a reason no retry can fix (``BODY_REJECTED_CODES``) is sent again
  in a reduced form: ids, failed state, attempts and the error's type, no content, and a note in
  ``request["reduced"]`` saying why. If SQS refuses that too, the activity fails with the
  non-retryable ``DeadLetterRejected``, so the run can record the rejection and end.
- Everything else (SQS down, throttling, 5xx, a dropped connection, and access, KMS or endpoint
  trouble an operator can fix without touching the run) is raised as it is, and the workflow's
  ``DEAD_LETTER_RETRY`` keeps trying, visibly, until the queue accepts the message.

Each message carries a deduplication key derived from workflow id and run id (a message
attribute, and the MessageDeduplicationId on FIFO queues), so a consumer can drop the copy a
retried send may leave.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.redaction import content_free_dead_letter
from workflows import contract, errors
from workflows.payloads import DeadLetterInput, DeadLetterMessage, DeadLetterReceipt

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeNameType
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

MAX_BODY_BYTES = 250 * 1024
_KEEP_TEXT = 2000
# SQS error codes that say this request can never be accepted as it is, so sending it again
# unchanged is pointless: characters outside SQS's set (InvalidMessageContents); a parameter
# SQS will not take, above all a body over the queue's MaximumMessageSize ("Message must be
# shorter than N bytes" is an InvalidParameterValue); a parameter missing or not supported for
# this kind of queue; AWS's generic validation failure. Faults of the deployment rather than of
# the message (AccessDenied, Kms*, InvalidSecurity, InvalidAddress, QueueDoesNotExist) are left
# out on purpose: the reduced body would fail the same way, and an operator can fix them while
# the activity keeps retrying, so the dead letter still lands.
BODY_REJECTED_CODES: Final = frozenset(
    {
        "InvalidMessageContents",
        "InvalidParameterValue",
        "MissingParameter",
        "UnsupportedOperation",
        "ValidationError",
    }
)
# Query-compatible SQS error codes may carry this prefix (AWS.SimpleQueueService.NonExistentQueue).
_CODE_PREFIX = "AWS.SimpleQueueService."
# MessageGroupId and MessageDeduplicationId: at most 128 printable ASCII characters.
_SQS_ID = re.compile(r"[!-~]{1,128}")
_ERROR_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def dedup_key(message: DeadLetterMessage) -> str:
    return f"{message.workflow_id}:{message.run_id}"


def _well_formed(value: Any) -> Any:
    """``value`` with every lone surrogate replaced by U+FFFD (pairs are joined), recursively.

    A lone surrogate cannot be written as UTF-8, and as a ``\\udXXX`` escape strict decoders
    (pydantic's among them) refuse it, so the operator could not read the message.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, dict):
        return {_well_formed(key): _well_formed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_well_formed(item) for item in value]
    return value


def ascii_body(message: DeadLetterMessage) -> str:
    """The message as compact ASCII-only JSON: every other character is a JSON escape."""
    try:
        data = message.model_dump(mode="json")
    except UnicodeEncodeError:  # pydantic's JSON mode refuses lone surrogates: mend them first
        mended = DeadLetterMessage.model_validate(_well_formed(message.model_dump()))
        data = mended.model_dump(mode="json")
    return json.dumps(data, ensure_ascii=True, separators=(",", ":"))


def _size(message: DeadLetterMessage) -> int:
    return len(ascii_body(message))  # ASCII: one byte per character


def fit_body(message: DeadLetterMessage, limit: int = MAX_BODY_BYTES) -> str:
    """The message as ASCII JSON of at most ``limit`` bytes, cutting (and marking) what is too
    long."""
    if _size(message) <= limit:
        return ascii_body(message)
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
    return ascii_body(fitted)


def reduced_body(message: DeadLetterMessage, why: str) -> str:
    """The smallest useful message: ids, failed state, attempts and the error's type, no
    content, and ``request["reduced"]`` saying why. Redrive needs no more: it takes the request
    from the run's own history."""
    reduced = DeadLetterMessage(
        workflow_id=message.workflow_id,
        run_id=message.run_id,
        request={
            "request_id": message.request.get("request_id"),
            "reduced": (
                f"SQS refused the full dead-letter message ({why}); sent without content: "
                "the request and the run's history are in Temporal"
            ),
        },
        failed_state=message.failed_state,
        attempts=message.attempts,
        last_error=_error_type(message.last_error),
        history=[],
    )
    return ascii_body(reduced)


def _error_type(text: str | None) -> str | None:
    """``LlmRetryable`` of ``LlmRetryable: HTTP 503 ...``; None when there is no type to keep."""
    if not text:
        return None
    head = text.partition(":")[0].strip()
    return head if _ERROR_TYPE.fullmatch(head) else None


def _sqs_id(value: str) -> str:
    """``value`` if SQS takes it as a group or deduplication id, else its SHA-256 (stable, so a
    retried send still deduplicates)."""
    if _SQS_ID.fullmatch(value):
        return value
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _rejection(err: ClientError) -> tuple[str, str] | None:
    """(code, message) when SQS refused the request for good (``BODY_REJECTED_CODES``)."""
    details = err.response.get("Error", {})
    code = str(details.get("Code", "")).removeprefix(_CODE_PREFIX)
    if code not in BODY_REJECTED_CODES:
        return None
    return code, str(details.get("Message", ""))[:300]


class DeadLetterActivities:
    """``send_dead_letter``; the SQS client (retries off) is injected by the worker."""

    def __init__(self, sqs: SQSClient, queue_name: str, *, content_free: bool = False) -> None:
        self._sqs = sqs
        self._queue_name = queue_name
        # With payload encryption on, bodies carry no content (activities.redaction).
        self._content_free = content_free
        self._queue_url: str | None = None

    @activity.defn(name=contract.ACTIVITY_SEND_DEAD_LETTER)
    async def send_dead_letter(self, dead_letter: DeadLetterInput) -> DeadLetterReceipt:
        """Send the message (reduced if SQS refuses it whole).

        Raises:
            ApplicationError: ``DeadLetterRejected``, non-retryable: SQS refused even the
                reduced message.
            botocore.exceptions.BotoCoreError | ClientError: anything else; Temporal retries.
        """
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
        try:
            return self._send_body(queue_url, message, body)
        except ClientError as err:
            refused = _rejection(err)
            if refused is None:
                raise
        code, why = refused
        activity.logger.warning(
            "SQS refused the dead-letter message of %s (%s); sending it reduced",
            message.workflow_id,
            code,
        )
        try:
            return self._send_body(queue_url, message, reduced_body(message, f"{code}: {why}"))
        except ClientError as err:
            again = _rejection(err)
            if again is None:
                raise
        raise ApplicationError(
            f"SQS refused the dead-letter message of run {message.run_id} of "
            f"{message.workflow_id} for good, even reduced to ids and error type "
            f"({again[0]}: {again[1]}); first refusal: {code}: {why}",
            type=errors.DEAD_LETTER_REJECTED,
            non_retryable=True,
        )

    def _send_body(
        self, queue_url: str, message: DeadLetterMessage, body: str
    ) -> DeadLetterReceipt:
        key = dedup_key(message)
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            # Attribute values obey the body's character rules: escape whatever is not ASCII.
            "dedup_key": {"DataType": "String", "StringValue": json.dumps(key)[1:-1]}
        }
        if queue_url.endswith(".fifo"):
            sent = self._sqs.send_message(
                QueueUrl=queue_url,
                MessageBody=body,
                MessageAttributes=attributes,
                MessageGroupId=_sqs_id(message.workflow_id),
                MessageDeduplicationId=_sqs_id(key),
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
