"""The largest failures an activity can raise, each raised for real (so each level has its own
traceback), for the tests of ``aiorch_runtime.failures``:

- ``huge_message``: a reason followed by a megabyte (a provider's error body quoted whole);
- ``deep_chain``: 40 causes, each with a 2 kB message, the outermost raised 200 frames deep;
- ``unreachable_sqs``: botocore's ``EndpointConnectionError`` from a real SQS client (the
  worker's boto3 settings) at a port nothing listens on, wrapped twice, as the dead-letter
  activity's error reaches Temporal through a layer of our own.

Each comes with the reason an operator must see first in its message.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Literal, NoReturn

import boto3
from temporalio import activity
from temporalio.exceptions import ApplicationError

from aiorch.devstack.processes import free_port
from aiorch_runtime import aws
from workflows import errors

RAISE_LARGE_FAILURE = "raise_large_failure"
Kind = Literal["huge_message", "deep_chain", "unreachable_sqs"]
KINDS: tuple[Kind, ...] = ("huge_message", "deep_chain", "unreachable_sqs")

HUGE_REASON = "HTTP 400 from the LLM: the prompt is too long for the model"
HUGE_BYTES = 1_000_000
CHAIN_REASON = "cannot reach the vector store"
CHAIN_ROOT = "Connection refused by the vector store"
CHAIN_CAUSES = 40
STACK_FRAMES = 200
SQS_REASON = "the dead-letter queue is unreachable"
BOTOCORE_REASON = "Could not connect to the endpoint URL"
# The reason each kind's message starts with, and the root cause's when it has one.
REASONS: dict[Kind, tuple[str, str | None]] = {
    "huge_message": (HUGE_REASON, None),
    "deep_chain": (CHAIN_REASON, CHAIN_ROOT),
    "unreachable_sqs": (SQS_REASON, BOTOCORE_REASON),
}


def raised(kind: Kind) -> BaseException:
    """The failure ``kind`` after it was raised (tracebacks and causes set)."""
    try:
        _RAISERS[kind]()
    except BaseException as err:  # what is raised is what the test wants back
        return err
    raise AssertionError(f"{kind} raised nothing")


@activity.defn(name=RAISE_LARGE_FAILURE)
async def raise_large_failure(kind: Kind) -> None:
    """Fails with the failure ``kind``, every attempt."""
    raise raised(kind)


def _huge_message() -> NoReturn:
    raise ApplicationError(
        f"{HUGE_REASON}: " + "x" * HUGE_BYTES,
        type=errors.LLM_RETRYABLE,
        next_retry_delay=timedelta(milliseconds=300),
    )


def _deep_chain() -> NoReturn:
    def cause(level: int) -> NoReturn:
        if level == CHAIN_CAUSES:
            raise ConnectionRefusedError(111, CHAIN_ROOT)
        try:
            cause(level + 1)
        except OSError as err:
            raise OSError(f"cause {level}: " + "c" * 2000) from err

    def deep(frames: int) -> NoReturn:
        if frames == 0:
            try:
                cause(1)
            except OSError as err:
                raise ApplicationError(
                    f"{CHAIN_REASON}: " + "m" * 2000, type=errors.EMBEDDING_FAILED
                ) from err
        deep(frames - 1)

    deep(STACK_FRAMES)


def _unreachable_sqs() -> NoReturn:
    client = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("sqs", endpoint_url=f"http://127.0.0.1:{free_port()}", config=aws.WORKER)
    try:
        try:
            client.get_queue_url(QueueName="ai-orchestrator-dlq")
        except Exception as err:
            raise RuntimeError(f"resolving the dead-letter queue: {err}") from err
        raise AssertionError("an SQS answered at a port nothing listens on")
    except RuntimeError as err:
        raise ApplicationError(f"{SQS_REASON}: {err}", type="DeadLetterUnreachable") from err


_RAISERS: dict[Kind, Callable[[], NoReturn]] = {
    "huge_message": _huge_message,
    "deep_chain": _deep_chain,
    "unreachable_sqs": _unreachable_sqs,
}
