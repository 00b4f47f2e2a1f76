"""generate_embedding: retried by its activity retry policy, dead-lettered when it gives up."""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import path, step
from tests.support.scripted_activities import Reply, server_error
from workflows import errors
from workflows.payloads import vector_key


async def test_non_retryable_embedding_failure_dead_letters(orch: Orchestration) -> None:
    """A non-retryable EmbeddingFailed is not retried: one call, then one dead letter with
    failed_state generate_embedding, and the run ends in dead_letter keeping the LLM output."""
    orch.fakes.llm_script = [Reply(content="to embed")]
    orch.fakes.embedding_script = [
        ApplicationError(
            "HTTP 400 from the LLM: input too long",
            type=errors.EMBEDDING_FAILED,
            non_retryable=True,
        )
    ]
    handle = await orch.start()

    result = await finished(handle)

    assert result.state == "dead_letter"
    assert (result.content, result.embedding_id) == ("to embed", None)
    assert orch.fakes.embedding_attempts == [1]
    expected_error = "EmbeddingFailed: HTTP 400 from the LLM: input too long"
    assert step(result.history[-1]) == (
        "generate_embedding",
        "exhausted",
        "dead_letter",
        expected_error,
    )
    [dead_letter] = orch.fakes.dead_letters
    message = dead_letter.message
    assert (message.workflow_id, message.failed_state, message.attempts) == (
        handle.id,
        "generate_embedding",
        1,
    )
    assert message.last_error == expected_error
    assert message.history == result.history[:-1]
    assert orch.fakes.stored == set()
    await orch.check_finished(handle, result)


async def test_transient_embedding_failures_are_retried_then_dead_letter(
    orch: Orchestration,
) -> None:
    """Transient failures are retried by the activity retry policy (5 attempts, backoff crossed
    in skipped time, invisible to the graph); when the attempts run out the run dead-letters."""
    orch.fakes.embedding_script = [server_error() for _ in range(6)]
    handle = await orch.start()

    result = await finished(handle)

    assert result.state == "dead_letter"
    assert orch.fakes.embedding_attempts == [1, 2, 3, 4, 5]
    assert path(result.history)[-2:] == ["generate_embedding", "dead_letter"]
    # Retry backoff 1 + 2 + 4 + 8 s passed on the workflow clock.
    embedding_started = result.history[-2].at
    assert result.history[-1].at - embedding_started >= timedelta(seconds=15)
    [dead_letter] = orch.fakes.dead_letters
    assert dead_letter.message.failed_state == "generate_embedding"
    assert dead_letter.message.last_error == "LlmRetryable: HTTP 503 from the LLM: overloaded"
    await orch.check_finished(handle, result)


async def test_embedding_recovers_after_transient_failures(orch: Orchestration) -> None:
    """Two transient failures then success: the run completes with the vector stored once."""
    orch.fakes.embedding_script = [server_error(), server_error()]
    handle = await orch.start()

    result = await finished(handle)

    assert result.state == "completed"
    assert result.embedding_id == f"vec-{handle.id}"
    assert orch.fakes.embedding_attempts == [1, 2, 3]
    assert orch.fakes.stored == {vector_key(handle.id, handle.first_execution_run_id)}
    assert orch.fakes.dead_letters == []
    await orch.check_finished(handle, result)
