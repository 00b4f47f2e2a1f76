"""Activity failures the Temporal server keeps whole, so the reason is what an operator sees.

While an activity retries, the server keeps its last failure (message, stack trace, causes) in
the run's mutable state, where ``limit.mutableStateActivityFailureSize.error`` caps each one
(4 KiB by default; the server logs a warning past ``.warn``, 2 KiB). A larger failure is
replaced by the server's own, whose message is "Failure exceeds size limit.", with the original
(cut) as its cause: the Web UI and ``describe`` then show that instead of why the activity
fails. Python 3.13's tracebacks (position markers, multi-line calls) took a plain botocore
connection error of ``send_dead_letter`` past it.

``ActivityFailureConverter`` is the SDK's default failure converter, except that the failure
of an *activity* (the SDK hands the converter an ``ActivitySerializationContext``) is bounded
to ``FAILURE_BUDGET`` bytes as the worker sends it (``ENCODED_FAILURE_BUDGET`` with payload
encryption, whose codec adds a key id, the namespace and the workflow id to each level). A
failure that fits is sent as the SDK makes it; a larger one in the first of ``SHAPES``, from
the most generous to the tightest, that fits:

- the message stays first and whole up to ``Shape.message`` bytes, then is cut with a note of
  its full size;
- stack traces lose Python's position-marker lines (``~~~^^^``) and blank lines, then keep
  their first frame (where the activity's code began) and as many of the last frames (where
  the error was raised) as fit, then go;
- causes are kept up to ``Shape.causes``: the first ones and the root cause, with a note of how
  many were left out between them, each message cut to ``Shape.cause_message`` bytes.

The error type (``application_failure_info.type``, which the retry policy's non-retryable types
match), ``non_retryable``, ``next_retry_delay``, the category and the details are never
changed. A run's own failure, an update's or a query's is left as the SDK makes it: the server
keeps those whole in history. The worker's log keeps every activity failure in full (the SDK
logs it with its traceback). Reading a failure back is the SDK's own, so recorded histories
replay as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from temporalio.api.failure.v1 import Failure
from temporalio.converter import (
    ActivitySerializationContext,
    DefaultFailureConverter,
    PayloadConverter,
    SerializationContext,
    WithSerializationContext,
)

# The server's defaults: past the error limit a retrying activity's failure is replaced.
SERVER_FAILURE_LIMIT = 4 * 1024
SERVER_FAILURE_WARNING = 2 * 1024
# What an activity's failure may take as sent: the server's warning threshold, half its limit.
FAILURE_BUDGET = SERVER_FAILURE_WARNING
# Before the codec: with a 255-character namespace and 80-character key id, encryption adds
# about 500 bytes to each of the (at most 4) levels, which still leaves it under the limit.
ENCODED_FAILURE_BUDGET = 1536
# A source line in a stack trace longer than this is cut (minified code, a huge literal).
MAX_LINE_CHARS = 160
ENCODED_MESSAGE = "Encoded failure"  # what the SDK leaves in place of an encoded message

_POSITION_MARKERS = re.compile(r"\s*[~^]+\s*")
_FRAME_START = "  File "


@dataclass(frozen=True)
class Shape:
    """How much of a failure to keep, in UTF-8 bytes and levels.

    Attributes:
        message: the failure's own message.
        stack: its stack trace (0: none).
        causes: how many causes (the first ones and the root cause).
        cause_message: each cause's message.
        cause_stack: each cause's stack trace (0: none).
    """

    message: int
    stack: int
    causes: int
    cause_message: int
    cause_stack: int


SHAPES: tuple[Shape, ...] = (
    Shape(message=1024, stack=768, causes=3, cause_message=256, cause_stack=256),
    Shape(message=1024, stack=512, causes=3, cause_message=256, cause_stack=0),
    Shape(message=1024, stack=0, causes=3, cause_message=192, cause_stack=0),
    Shape(message=768, stack=0, causes=1, cause_message=192, cause_stack=0),
    Shape(message=512, stack=0, causes=0, cause_message=0, cause_stack=0),
    Shape(message=256, stack=0, causes=0, cause_message=0, cause_stack=0),
)


def bounded(
    failure: Failure, budget: int, *, encode_with: PayloadConverter | None = None
) -> Failure:
    """``failure`` as it is if it fits in ``budget`` bytes, else in the first of ``SHAPES``
    that fits (the tightest if none does: only an error type or details that large can make
    that happen).

    Args:
        failure: the failure as the SDK's default converter makes it (``failure`` is not
            changed).
        budget: the most bytes the failure may take as sent.
        encode_with: move each level's message and stack trace into its encoded attributes
            with this converter, as the SDK's converter with encoded attributes does (the codec
            then encrypts them); None: leave them in plain text.
    """
    candidate = Failure()
    candidate.CopyFrom(failure)
    for shape in (None, *SHAPES):
        if shape is not None:
            candidate = shaped(failure, shape)
        if encode_with is not None:
            encode_attributes(candidate, encode_with)
        if candidate.ByteSize() <= budget:
            break
    return candidate


def shaped(failure: Failure, shape: Shape) -> Failure:
    """A copy of ``failure`` cut to ``shape`` (every field but messages, stack traces and
    causes kept as it is)."""
    top, *causes = _levels(failure)
    kept = _kept_causes(causes, shape.causes)
    left_out = len(causes) - len(kept)
    levels = [(top, shape.message, shape.stack)]
    levels += [(cause, shape.cause_message, shape.cause_stack) for cause in kept]
    # The causes left out sit between the first ones kept and the root cause: the note goes on
    # the level before that gap (the failure itself when no first cause is kept).
    gap = max(len(kept) - 1, 0)
    note = f" [{left_out} more cause{'s' if left_out > 1 else ''} left out]" if left_out else ""
    return _chain(
        [
            _shaped_level(level, message, stack, note if index == gap else "")
            for index, (level, message, stack) in enumerate(levels)
        ]
    )


def cut_text(text: str, limit: int, suffix: str = "") -> str:
    """``text`` + ``suffix`` in at most ``limit`` UTF-8 bytes: whole if it fits, else its start
    with a note of its full size (the suffix is kept whole)."""
    size = len(text.encode())
    if size + len(suffix.encode()) <= limit:
        return text + suffix
    note = f" … [cut from {size} bytes]{suffix}"
    room = max(limit - len(note.encode()), 0)
    return text.encode()[:room].decode(errors="ignore") + note


def trimmed_stack(stack: str, limit: int) -> str:
    """``stack`` in at most ``limit`` UTF-8 bytes: without position-marker and blank lines,
    then its first frame and as many of its last frames as fit."""
    if limit <= 0:
        return ""
    lines = [
        line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"
        for line in stack.splitlines()
        if line.strip() and not _POSITION_MARKERS.fullmatch(line)
    ]
    frames = _frames(lines)
    whole = "\n".join(frames)
    if len(whole.encode()) <= limit:
        return whole
    tail: list[str] = []
    used = len(frames[0].encode()) + len(_left_out(len(frames)).encode()) + 2
    for frame in reversed(frames[1:]):
        used += len(frame.encode()) + 1
        if used > limit:
            break
        tail.insert(0, frame)
    if not tail:  # not even the last frame fits beside the first: the last frame, cut
        return cut_text(frames[-1], limit)
    left_out = len(frames) - 1 - len(tail)
    return "\n".join([frames[0], _left_out(left_out), *tail])


def encode_attributes(failure: Failure, converter: PayloadConverter) -> None:
    """Move the message and stack trace of ``failure`` and of each of its causes into their
    encoded attributes, as ``DefaultFailureConverterWithEncodedAttributes`` does (its
    ``from_failure`` reads them back)."""
    level: Failure | None = failure
    while level is not None:
        [attributes] = converter.to_payloads(
            [{"message": level.message, "stack_trace": level.stack_trace}]
        )
        level.encoded_attributes.CopyFrom(attributes)
        level.message = ENCODED_MESSAGE
        level.stack_trace = ""
        level = level.cause if level.HasField("cause") else None


class ActivityFailureConverter(DefaultFailureConverter, WithSerializationContext):
    """The SDK's default failure converter; an activity's failures are bounded (``bounded``).

    The SDK builds it without arguments and hands each use its serialization context: an
    activity's (``ActivitySerializationContext``) gives the bounding converter, any other the
    SDK's behaviour unchanged.

    Args:
        for_activity: bound every failure this instance converts.
    """

    encodes_attributes: ClassVar[bool] = False
    budget: ClassVar[int] = FAILURE_BUDGET

    def __init__(self, *, for_activity: bool = False) -> None:
        super().__init__(encode_common_attributes=self.encodes_attributes)
        self.for_activity = for_activity

    def with_context(self, context: SerializationContext) -> Self:
        for_activity = isinstance(context, ActivitySerializationContext)
        if for_activity == self.for_activity:
            return self
        return type(self)(for_activity=for_activity)

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        if not self.for_activity:
            super().to_failure(exception, payload_converter, failure)
            return
        plain = Failure()
        _PLAIN.to_failure(exception, payload_converter, plain)
        encode_with = payload_converter if self.encodes_attributes else None
        failure.CopyFrom(bounded(plain, self.budget, encode_with=encode_with))


class EncodedActivityFailureConverter(ActivityFailureConverter):
    """``ActivityFailureConverter`` with messages and stack traces in encoded attributes (which
    the payload codec encrypts), as ``DefaultFailureConverterWithEncodedAttributes``."""

    encodes_attributes = True
    budget = ENCODED_FAILURE_BUDGET


_PLAIN = DefaultFailureConverter()


def _levels(failure: Failure) -> list[Failure]:
    levels: list[Failure] = []
    level: Failure | None = failure
    while level is not None:
        levels.append(level)
        level = level.cause if level.HasField("cause") else None
    return levels


def _kept_causes(causes: Sequence[Failure], keep: int) -> list[Failure]:
    if len(causes) <= keep:
        return list(causes)
    if keep == 0:
        return []
    return [*causes[: keep - 1], causes[-1]]


def _shaped_level(level: Failure, message: int, stack: int, note: str) -> Failure:
    copy = Failure()
    copy.CopyFrom(level)
    copy.ClearField("cause")
    # A failure re-raised from one the SDK decoded still holds its encoded attributes; its
    # message and stack trace are the decoded ones, which are what gets bounded.
    copy.ClearField("encoded_attributes")
    copy.message = cut_text(level.message, message, note)
    copy.stack_trace = trimmed_stack(level.stack_trace, stack)
    return copy


def _chain(levels: Sequence[Failure]) -> Failure:
    for outer, inner in zip(reversed(levels[:-1]), reversed(levels[1:]), strict=True):
        outer.cause.CopyFrom(inner)
    return levels[0]


def _frames(lines: Sequence[str]) -> list[str]:
    """Lines grouped into frames, each from its ``  File "..."`` line; a trace in another form
    (another SDK's) is one line per frame."""
    if not any(line.startswith(_FRAME_START) for line in lines):
        return list(lines) or [""]
    frames: list[list[str]] = []
    for line in lines:
        if line.startswith(_FRAME_START) or not frames:
            frames.append([line])
        else:
            frames[-1].append(line)
    return ["\n".join(frame) for frame in frames]


def _left_out(frames: int) -> str:
    return f"  [... {frames} frames left out ...]"
