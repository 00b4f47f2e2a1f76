"""The retry_llm state: backoff in workflow time, Retry-After as a floor, model fallback,
exhaustion to the dead-letter queue, permanent errors and corrective re-asks."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise

from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, events, path, step
from tests.support.scripted_activities import (
    FALLBACK_MODEL,
    PRIMARY_MODEL,
    Reply,
    rate_limited,
    server_error,
)
from tests.support.time_skipping import assert_waited, skip_time
from workflows import errors


def malformed() -> ApplicationError:
    """What the real invoke_llm raises when the reply is not the contract's JSON."""
    return ApplicationError("reply is not the contract's JSON", type=errors.LLM_MALFORMED_REPLY)


async def test_retry_after_is_waited_in_workflow_time(orch: Orchestration) -> None:
    """A rate-limited call with next_retry_delay=30s sends the run to retry_llm, where it waits
    30 s of workflow time (not the shorter jittered backoff) before the next attempt; status
    shows the error and the attempt count meanwhile."""
    orch.fakes.plan_overrides["fallback_after"] = 10
    orch.fakes.llm_script = [rate_limited(30), rate_limited(30), Reply(content="finally")]
    handle = await orch.start()

    backing_off = await orch.wait_for_state(handle, "retry_llm")
    assert (backing_off.status, backing_off.attempts) == ("Processing", 1)
    assert backing_off.last_error == "LlmRateLimited: HTTP 429 from the LLM: rate limit exceeded"
    await skip_time(orch.env, timedelta(seconds=29))
    assert await handle.query("state") == "retry_llm"
    assert len(orch.fakes.llm_calls) == 1
    await skip_time(orch.env, timedelta(seconds=2))
    await orch.wait_for_state(handle, "retry_llm")
    assert len(orch.fakes.llm_calls) == 2

    result = await finished(handle)

    assert result.state == "completed"
    assert result.content == "finally"
    assert events(result.history)[2:8] == [
        "retryable_error",
        "backoff_elapsed",
        "retryable_error",
        "backoff_elapsed",
        "llm_ok",
        "embedded",
    ]
    for nth in (0, 1):
        error = entry_for(result.history, "retryable_error", nth)
        elapsed = entry_for(result.history, "backoff_elapsed", nth)
        assert (error.to_state, elapsed.from_state) == ("retry_llm", "retry_llm")
        assert_waited(error.at, elapsed.at, 30)
        assert elapsed.detail == "waited 30.00s"
    scheduled = orch.fakes.llm_scheduled_at
    assert all(later - earlier >= timedelta(seconds=30) for earlier, later in pairwise(scheduled))
    assert [c.attempt for c in orch.fakes.llm_calls] == [1, 2, 3]
    assert [c.model for c in orch.fakes.llm_calls] == [PRIMARY_MODEL] * 3
    status = await orch.status(handle)
    assert status.attempts == 3
    await orch.check_finished(handle, result)


async def test_fallback_model_after_consecutive_failures(orch: Orchestration) -> None:
    """After fallback_after (2) consecutive failures the next call uses plan.fallback_model;
    a success resets the count, so the call after a reedit is back on the primary model."""
    orch.fakes.llm_script = [
        server_error(),
        server_error(),
        Reply(content="from fallback", needs_review=True),
        Reply(content="from primary"),
    ]
    handle = await orch.start(review="auto")
    # Skip past both backoffs (at most 1 s + 2 s) in workflow time, well short of the review
    # timeout; then wait for the task that parks the run in await_review.
    await skip_time(orch.env, timedelta(seconds=10))
    waiting = await orch.wait_for_state(handle, "await_review")
    assert waiting.model == FALLBACK_MODEL
    await handle.signal("review", {"decision": "reedit", "reviewer": "ann", "feedback": "again"})

    result = await finished(handle)

    assert result.state == "completed"
    assert [c.model for c in orch.fakes.llm_calls] == [
        PRIMARY_MODEL,
        PRIMARY_MODEL,
        FALLBACK_MODEL,
        PRIMARY_MODEL,
    ]
    assert (result.content, result.model) == ("from primary", PRIMARY_MODEL)
    assert path(result.history).count("retry_llm") == 2
    await orch.check_finished(handle, result)


async def test_exhausted_attempts_dead_letter_from_invoke_llm(orch: Orchestration) -> None:
    """llm_max_attempts=3 failing attempts end in dead_letter: one dead letter with
    failed_state invoke_llm, attempts 3 and the last error; backoffs stay under their caps."""
    orch.fakes.llm_script = [server_error(), server_error(), server_error(), Reply()]
    handle = await orch.start(options={"llm_max_attempts": 3})

    result = await finished(handle)

    assert result.state == "dead_letter"
    assert len(orch.fakes.llm_calls) == 3
    assert events(result.history)[2:] == [
        "retryable_error",
        "backoff_elapsed",
        "retryable_error",
        "backoff_elapsed",
        "retryable_error",
        "exhausted",
    ]
    exhausted = result.history[-1]
    assert (exhausted.from_state, exhausted.to_state) == ("retry_llm", "dead_letter")
    assert exhausted.detail == "gave up after 3 attempts"
    # Full jitter below a ceiling of backoff_initial_s * 2**(n-1): at most 1 s, then 2 s.
    for nth, ceiling in ((0, 1.0), (1, 2.0)):
        waited = (
            entry_for(result.history, "backoff_elapsed", nth).at
            - entry_for(result.history, "retryable_error", nth).at
        )
        assert waited <= timedelta(seconds=ceiling + 1), waited

    [dead_letter] = orch.fakes.dead_letters
    message = dead_letter.message
    assert (message.workflow_id, message.failed_state, message.attempts) == (
        handle.id,
        "invoke_llm",
        3,
    )
    assert message.last_error == "LlmRetryable: HTTP 503 from the LLM: overloaded"
    assert message.request["options"]["llm_max_attempts"] == 3
    assert message.history == result.history[:-1]
    status = await orch.status(handle)
    assert (status.attempts, status.status, status.last_error) == (3, "Failed", message.last_error)
    assert orch.fakes.embedding_calls == []
    await orch.check_finished(handle, result)


async def test_permanent_error_fails_after_one_call(orch: Orchestration) -> None:
    """A non-retryable error ends the run in failed after exactly one call, no backoff, no
    dead letter, with last_error carrying the error type."""
    orch.fakes.llm_script = [
        ApplicationError(
            "HTTP 401 from the LLM: bad key", type=errors.LLM_PERMANENT, non_retryable=True
        )
    ]
    handle = await orch.start()

    result = await finished(handle)

    assert result.state == "failed"
    assert len(orch.fakes.llm_calls) == 1
    expected = "LlmPermanent: HTTP 401 from the LLM: bad key"
    assert step(result.history[-1]) == ("invoke_llm", "permanent_error", "failed", expected)
    status = await orch.status(handle)
    assert (status.attempts, status.last_error) == (1, expected)
    assert orch.fakes.dead_letters == [] and orch.fakes.embedding_calls == []
    assert (result.content, result.model, result.embedding_id) == (None, None, None)
    await orch.check_finished(handle, result)


async def test_malformed_reply_makes_the_next_call_corrective(orch: Orchestration) -> None:
    """A malformed reply is retried with corrective=True on the very next call only; another
    kind of error in between clears it again."""
    orch.fakes.plan_overrides["fallback_after"] = 10
    orch.fakes.llm_script = [malformed(), server_error(), malformed(), Reply(content="valid")]
    handle = await orch.start(options={"llm_max_attempts": 4})

    result = await finished(handle)

    assert result.state == "completed"
    assert [c.corrective for c in orch.fakes.llm_calls] == [False, True, False, True]
    assert entry_for(result.history, "retryable_error").detail == (
        "LlmMalformedReply: reply is not the contract's JSON"
    )
    assert (await orch.status(handle)).attempts == 4
    await orch.check_finished(handle, result)
