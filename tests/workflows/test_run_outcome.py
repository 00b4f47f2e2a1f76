"""Failures look like failures: a run that ends failed or dead_letter closes as a Temporal
*Failed* run (so the Web UI's failure views, ``ExecutionStatus='Failed'`` and the SDK's failure
metrics see it), with a typed non-retryable ``RunFailed`` whose details carry the contract's
result; a completed run stays Completed with the same result shape."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished, result_of_failure
from tests.support.orchestration import Orchestration
from tests.support.scripted_activities import Reply, server_error
from workflows import contract, errors
from workflows.payloads import PipelineResult, RunStatus


async def test_a_rejected_run_closes_failed_with_its_result(orch: Orchestration) -> None:
    """reject: Temporal status Failed, a RunFailed error (non-retryable, its message names the
    final state, no content), and the PipelineResult in its details."""
    orch.fakes.llm_script = [Reply(content="secret draft", needs_review=True)]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        {"decision": "reject", "reviewer": "legal"},
        result_type=RunStatus,
    )

    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == (errors.RUN_FAILED, True)
    assert cause.message == "run ended in failed" and "secret" not in cause.message
    result = result_of_failure(info.value, PipelineResult)
    assert isinstance(result, PipelineResult) and result.state == "failed"
    assert result.content == "secret draft"
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    await orch.check_finished(handle, result)


async def test_a_dead_lettered_run_closes_failed_naming_the_error_type(
    orch: Orchestration,
) -> None:
    """dead_letter after exhausted LLM attempts: Failed, the message names the error's type."""
    orch.fakes.llm_script = [server_error()] * 3
    handle = await orch.start(options={"llm_max_attempts": 3})

    result = await finished(handle)

    assert result.state == "dead_letter"
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert isinstance(info.value.cause, ApplicationError)
    assert info.value.cause.message == "run ended in dead_letter (LlmRetryable)"
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED


async def test_a_completed_run_stays_completed(orch: Orchestration) -> None:
    """The happy path returns its result as before: Temporal status Completed."""
    handle = await orch.start()

    result = await handle.result()

    assert result.state == "completed"
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
