"""How the workflow calls its activities and reads their failures: retry policies and timeouts
per activity, and the helpers that turn an ActivityError into history text and graph events.

Pure data and functions; enters the workflow through the sandbox pass-through.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import CancelledError as ActivityCancelledError
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from workflows import errors
from workflows.payloads import CallFailure

# The LLM activity gets exactly one attempt per call: retries are the graph's retry_llm state,
# so each attempt, its error and its backoff are visible in history and in status.attempts.
SINGLE_ATTEMPT = RetryPolicy(maximum_attempts=1)
FETCH_RETRY = RetryPolicy(
    maximum_attempts=5,
    non_retryable_error_types=[errors.INVALID_REQUEST, errors.INPUT_UNAVAILABLE],
)
EMBEDDING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=[errors.EMBEDDING_FAILED],
)
# A dead letter must never be lost: keep trying (visibly, in the pending activity) until the
# queue accepts it, however long the queue is down.
DEAD_LETTER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
)
COMPENSATION_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=30))
# A notification is worth a few tries over a couple of minutes, no more: the run never waits
# for it, and a reviewer told an hour late is better told by the inbox.
NOTIFY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=6,
    non_retryable_error_types=[errors.NOTIFICATION_REJECTED],
)
NOTIFY_TIMEOUT = timedelta(seconds=20)
NOTIFY_SCHEDULE_TO_CLOSE = timedelta(minutes=10)
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# An inline fetch_prompt does no I/O (it validates and builds the prompt from worker settings),
# so it runs as a local activity: no task queue round trip, no extra workflow task, one marker
# in history instead of three activity events. Its failures are permanent (InvalidRequest).
LOCAL_FETCH_TIMEOUT = timedelta(seconds=10)
# verify_continuation reads the previous run from Temporal: a few quick tries, then the run fails
# (a continuation nobody can vouch for is not resumed).
VERIFY_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=2))


def error_text(err: BaseException) -> str:
    """The innermost message of an activity failure, for last_error and history."""
    cause = err.cause if isinstance(err, ActivityError) and err.cause is not None else err
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    if isinstance(cause, ActivityTimeoutError):
        return f"Timeout: activity timed out ({cause.type.name if cause.type else 'unknown'})"
    return str(cause) or type(cause).__name__


def failure_of(err: ActivityError) -> CallFailure:
    """An activity's failure as a value: its text (``error_text``), type, whether it is
    permanent and the delay it asks for."""
    cause = err.cause
    delay = retry_after(err)
    return CallFailure(
        error=error_text(err),
        type=cause.type if isinstance(cause, ApplicationError) else None,
        permanent=is_permanent(err),
        retry_after_s=delay.total_seconds() if delay else None,
    )


def is_permanent(err: ActivityError) -> bool:
    """Whether the activity failed for good (a non-retryable application error)."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.non_retryable


def retry_after(err: ActivityError) -> timedelta | None:
    """The delay the failure asks for (an LLM 429's Retry-After), if any."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.next_retry_delay
    return None


def cancelled(err: ActivityError) -> bool:
    """True when ``err`` is the run's cancel reaching an in-flight activity: the SDK reports
    it as ActivityError (cause CancelledError), not asyncio.CancelledError."""
    return isinstance(err.cause, ActivityCancelledError)
