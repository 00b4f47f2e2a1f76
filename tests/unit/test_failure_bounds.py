"""The bounds on an activity's failure (``aiorch_runtime.failures``): what the worker sends for
the largest failures an activity can raise, in plain text and encrypted, and what it leaves
alone. The same failures through a real server: ``tests/activities/test_failure_size.py``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    DefaultFailureConverter,
    WorkflowSerializationContext,
)
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.failures import (
    ENCODED_FAILURE_BUDGET,
    ENCODED_MESSAGE,
    FAILURE_BUDGET,
    SERVER_FAILURE_LIMIT,
    SHAPES,
    cut_text,
    trimmed_stack,
)
from aiorch_runtime.temporal import DATA_CONVERTER, encrypted_converter
from tests.support.large_failures import (
    BOTOCORE_REASON,
    CHAIN_CAUSES,
    HUGE_BYTES,
    KINDS,
    REASONS,
    Kind,
    raised,
)
from workflows import errors

WORKFLOW_ID = "0123456789abcdef01234567"  # a request id, as every run's workflow id is


def activity_in(namespace: str = "default") -> ActivitySerializationContext:
    return ActivitySerializationContext(
        namespace=namespace,
        workflow_id=WORKFLOW_ID,
        workflow_type="AiOrchestrator",
        activity_type="send_dead_letter",
        activity_id="7",
        activity_task_queue="ai-orchestrator",
        is_local=False,
    )


ACTIVITY = activity_in()
# The longest key id PAYLOAD_KEYS takes, and the longest namespace name Temporal takes.
LONGEST_KEYS = KeyRing.parse(f"{'k' * 64}:{new_key()}")
LONGEST_NAMESPACE = activity_in("n" * 255)


async def sent(converter: DataConverter, error: BaseException) -> Failure:
    """The failure as the worker sends it for ``error`` (codec applied)."""
    failure = Failure()
    await converter.encode_failure(error, failure)
    return failure


async def read_back(converter: DataConverter, failure: Failure) -> list[BaseException]:
    """The error ``failure`` decodes to, then each of its causes."""
    copy = Failure()
    copy.CopyFrom(failure)
    error: BaseException | None = await converter.decode_failure(copy)
    chain: list[BaseException] = []
    while error is not None:
        chain.append(error)
        error = error.__cause__
    return chain


def message_of(error: BaseException) -> str:
    assert isinstance(error, ApplicationError), error
    return error.message


def levels(failure: Failure) -> int:
    return 1 + (levels(failure.cause) if failure.HasField("cause") else 0)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_largest_failures_fit_with_their_reason_first(kind: Kind) -> None:
    """Each of the largest failures takes at most FAILURE_BUDGET bytes as sent, and reads back
    with its reason at the start of its message and its root cause's reason last."""
    reason, root = REASONS[kind]
    converter = DATA_CONVERTER.with_context(ACTIVITY)

    failure = await sent(converter, raised(kind))

    assert failure.ByteSize() <= FAILURE_BUDGET
    chain = await read_back(converter, failure)
    assert message_of(chain[0]).startswith(reason)
    assert len(chain) <= 1 + max(shape.causes for shape in SHAPES)
    if root is not None:
        assert root in message_of(chain[-1])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("context", "limit"),
    [(ACTIVITY, SERVER_FAILURE_LIMIT * 5 // 8), (LONGEST_NAMESPACE, SERVER_FAILURE_LIMIT * 3 // 4)],
    ids=["default-namespace", "longest-namespace"],
)
async def test_encrypted_failures_fit_well_under_the_server_limit(
    kind: Kind, context: ActivitySerializationContext, limit: int
) -> None:
    """Encrypted, each level carries the key id, namespace and workflow id: with the longest
    key id the largest failures take at most 2.5 KiB in the default namespace and 3 KiB in the
    longest one Temporal allows, read back with their reason, and none of their text is in the
    clear."""
    reason, root = REASONS[kind]
    converter = encrypted_converter(LONGEST_KEYS).with_context(context)

    failure = await sent(converter, raised(kind))

    assert failure.ByteSize() <= limit
    assert failure.message == ENCODED_MESSAGE
    assert reason.encode() not in failure.SerializeToString()
    chain = await read_back(converter, failure)
    assert message_of(chain[0]).startswith(reason)
    if root is not None:
        assert root in message_of(chain[-1])


async def test_a_huge_message_is_cut_with_its_size_and_keeps_its_retry_settings() -> None:
    """A megabyte message is cut with a note of its full size; its type, retry delay,
    category, non-retryable flag and details are those it was raised with."""
    error = ApplicationError(
        "the provider refused the request: " + "é" * HUGE_BYTES,
        {"request": "r1"},
        type=errors.LLM_PERMANENT,
        non_retryable=True,
        next_retry_delay=timedelta(seconds=7),
        category=ApplicationErrorCategory.BENIGN,
    )
    converter = DATA_CONVERTER.with_context(ACTIVITY)

    failure = await sent(converter, error)

    assert failure.ByteSize() <= FAILURE_BUDGET
    assert failure.message.endswith(f"[cut from {len(error.message.encode())} bytes]")
    [back] = await read_back(converter, failure)
    assert isinstance(back, ApplicationError)
    assert back.message.startswith("the provider refused the request: éé")
    assert (back.type, back.non_retryable) == (errors.LLM_PERMANENT, True)
    assert back.next_retry_delay == timedelta(seconds=7)
    assert back.category == ApplicationErrorCategory.BENIGN
    assert list(back.details) == [{"request": "r1"}]


async def test_a_deep_chain_keeps_its_first_causes_and_its_root_and_says_how_many_went() -> None:
    """Of 40 causes the first two and the root cause stay; the second says how many between
    it and the root were left out."""
    failure = await sent(DATA_CONVERTER.with_context(ACTIVITY), raised("deep_chain"))

    assert levels(failure) == 4
    first, second, root = failure.cause, failure.cause.cause, failure.cause.cause.cause
    assert first.message.startswith("cause 1: ")
    assert second.message.startswith("cause 2: ")
    assert second.message.endswith(f"[{CHAIN_CAUSES - 3} more causes left out]")
    assert root.application_failure_info.type == "ConnectionRefusedError"


async def test_botocore_connection_error_raised_as_it_is_keeps_its_message() -> None:
    """botocore's EndpointConnectionError raised by the activity itself (as send_dead_letter
    lets it through): its message is the failure's, whatever Python's tracebacks look like."""
    unreachable = raised("unreachable_sqs").__cause__
    assert unreachable is not None and unreachable.__cause__ is not None
    botocore_error = unreachable.__cause__

    failure = await sent(DATA_CONVERTER.with_context(ACTIVITY), botocore_error)

    assert failure.ByteSize() <= FAILURE_BUDGET
    assert failure.message.startswith(BOTOCORE_REASON)
    assert failure.application_failure_info.type == "EndpointConnectionError"


async def test_a_failure_that_fits_is_sent_as_the_sdk_makes_it() -> None:
    """A small failure with a cause is exactly what the SDK's own converter makes."""
    try:
        try:
            raise KeyError("model")
        except KeyError as err:
            raise ApplicationError("no such model", type=errors.LLM_PERMANENT) from err
    except ApplicationError as err:
        error = err

    ours = await sent(DATA_CONVERTER.with_context(ACTIVITY), error)
    sdks = await sent(DataConverter(failure_converter_class=DefaultFailureConverter), error)

    assert ours == sdks


async def test_failures_of_workflows_are_left_as_the_sdk_makes_them() -> None:
    """Outside an activity (a run's failure, an update's) nothing is cut: the server keeps
    those whole in history."""
    context = WorkflowSerializationContext(namespace="default", workflow_id=WORKFLOW_ID)
    error = raised("huge_message")

    ours = await sent(DATA_CONVERTER.with_context(context), error)
    sdks = await sent(DataConverter(failure_converter_class=DefaultFailureConverter), error)

    assert ours == sdks
    assert ours.ByteSize() > HUGE_BYTES


@pytest.mark.parametrize(
    "text",
    [
        '"quoted" \\ and \x00 control \x1b characters ' * 2000,
        "多字节的原因 " * 5000,
        "🙂" * 10_000,
    ],
    ids=["json-escapes", "cjk", "emoji"],
)
async def test_messages_that_grow_in_json_still_fit_encrypted(text: str) -> None:
    """Quotes, backslashes and control characters take more bytes in the encoded attributes'
    JSON than in the message: the budget is checked on what is sent, so they fit too, and a
    cut never splits a character."""
    converter = encrypted_converter(LONGEST_KEYS).with_context(ACTIVITY)
    plain_budget = DATA_CONVERTER.with_context(ACTIVITY)

    failure = await sent(converter, ApplicationError(text, type=errors.LLM_RETRYABLE))
    unencrypted = await sent(plain_budget, ApplicationError(text, type=errors.LLM_RETRYABLE))

    assert failure.ByteSize() <= SERVER_FAILURE_LIMIT * 5 // 8
    assert unencrypted.ByteSize() <= FAILURE_BUDGET
    [back] = await read_back(converter, failure)
    assert text.startswith(message_of(back).split(" … [cut from")[0])


def test_encoded_budget_leaves_room_for_the_codec() -> None:
    """The budget before encryption is below the plain one, which is the server's warning
    threshold: the codec's additions (key id, namespace, workflow id on each level) fit."""
    assert ENCODED_FAILURE_BUDGET < FAILURE_BUDGET <= SERVER_FAILURE_LIMIT // 2


def test_cut_text_keeps_whole_characters_within_the_limit() -> None:
    """A cut lands on a character boundary, within the limit, and says how long the text was;
    a text that fits is returned whole with the suffix."""
    cut = cut_text("ü" * 1000, 101, " [note]")

    assert len(cut.encode()) <= 101
    assert cut.startswith("ü" * 20) and cut.endswith("[cut from 2000 bytes] [note]")
    assert cut_text("short", 100, " [note]") == "short [note]"


def python_traceback(frames: int) -> str:
    """A stack trace as the SDK formats one on Python 3.13: frames separated by blank lines,
    with position markers."""
    return "\n".join(
        f'  File "/srv/app/module_{n}.py", line {n}, in call_{n}\n'
        f"    result = call_{n + 1}(argument)\n"
        f"             ~~~~~~~~^^^^^^^^^^\n"
        for n in range(frames)
    )


def test_a_long_stack_trace_keeps_its_first_and_last_frames() -> None:
    """Position markers and blank lines go first; then the first frame and the last ones stay,
    with a line saying how many frames between them were left out."""
    trimmed = trimmed_stack(python_traceback(100), 512)

    assert len(trimmed.encode()) <= 512
    assert "~~" not in trimmed and "\n\n" not in trimmed
    lines = trimmed.splitlines()
    assert lines[0] == '  File "/srv/app/module_0.py", line 0, in call_0'
    assert lines[-2] == '  File "/srv/app/module_99.py", line 99, in call_99'
    [note] = [line for line in lines if "left out" in line]
    kept = sum(line.startswith("  File ") for line in lines)
    assert note == f"  [... {100 - kept} frames left out ...]"


def test_a_short_stack_trace_only_loses_its_position_markers() -> None:
    """A trace that fits once its markers and blank lines are gone keeps every frame."""
    trimmed = trimmed_stack(python_traceback(3), 512)

    assert trimmed.count("  File ") == 3
    assert "~~" not in trimmed


def test_a_stack_trace_in_another_form_keeps_its_first_and_last_lines() -> None:
    """A trace without Python's frame lines (another SDK's) is trimmed line by line; a single
    huge line is cut."""
    java = "\n".join(f"at com.example.Step{n}.run(Step{n}.java:{n})" for n in range(200))

    trimmed = trimmed_stack(java, 300)

    assert len(trimmed.encode()) <= 300
    assert trimmed.startswith("at com.example.Step0.run") and trimmed.endswith("(Step199.java:199)")
    assert len(trimmed_stack("x" * 10_000, 300).encode()) <= 300
