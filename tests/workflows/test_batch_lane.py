"""The batch lane as a run walks it: invoke_llm comes back once the call's batch is submitted,
the run waits in await_batch (Pending, shown, its batch in status and the Web UI's details),
and the batch's outcome is taken up by the step as a synchronous call's is: an answer goes on,
a failure takes the retry path or ends the run, a cancel ends it."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, path
from tests.support.scripted_activities import PRIMARY_MODEL, Gate, Reply, batched
from tests.support.time_skipping import TASK_PROGRESS_TIMEOUT_S
from workflows import errors
from workflows.payloads import AwaitBatchInput, CallFailure, LlmCallResult

BATCH = "batch_sim000042"


def failed(error: str, type_: str, *, permanent: bool = False) -> LlmCallResult:
    """What await_batch returns for a call its batch failed."""
    return LlmCallResult(
        model="",
        outcome="failed",
        lane="batch",
        failure=CallFailure(error=f"{type_}: {error}", type=type_, permanent=permanent),
    )


async def details(orch: Orchestration, handle: object) -> str:
    """The Web UI's current-details line of a run."""
    metadata: WorkflowMetadata = await orch.client.get_workflow_handle(
        handle.id  # type: ignore[attr-defined]
    ).query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return str(metadata.current_details)


async def test_a_batched_call_waits_visibly_then_the_run_completes(orch: Orchestration) -> None:
    """In the batch lane the run's one invoke_llm comes back "batched" in batch_sim000042; the
    run waits in await_batch (Pending, AiState await_batch, the batch id in status and in the
    Web UI's details, attempt 1 counted), its await_batch asks for that call; the answer then
    completes the run along invoke_llm -> await_batch -> invoke_llm -> generate_embedding, with
    no second model call, and the run's cost is the batched call's."""
    orch.fakes.plan_overrides = {"lane": "batch"}
    orch.fakes.llm_script = [batched(BATCH, "call-7")]
    orch.fakes.batch_script = [Reply(content="from the batch")]
    orch.fakes.batch_gate = Gate()
    handle = await orch.start()

    waiting = await orch.wait_for_state(handle, "await_batch")
    assert (waiting.status, waiting.attempts, waiting.batch_id) == ("Pending", 1, BATCH)
    assert (await orch.ai_state(handle))[0] == "await_batch"
    await asyncio.wait_for(orch.fakes.batch_gate.entered.wait(), TASK_PROGRESS_TIMEOUT_S)
    assert BATCH in await details(orch, handle)
    assert orch.fakes.batch_waits == [
        AwaitBatchInput(item="call-7", model=PRIMARY_MODEL, batch_id=BATCH)
    ]
    [call] = orch.fakes.llm_calls
    assert (call.lane, call.attempt) == ("batch", 1)

    orch.fakes.batch_gate.release.set()
    result = await finished(handle)
    assert result.content == "from the batch"
    assert path(result.history) == [
        "idle",
        "fetch_prompt",
        "invoke_llm",
        "await_batch",
        "invoke_llm",
        "generate_embedding",
        "completed",
    ]
    assert (
        entry_for(result.history, "batch_submitted").detail
        == f"in batch {BATCH} on {PRIMARY_MODEL}"
    )
    assert len(orch.fakes.llm_calls) == 1
    status = await orch.status(handle)
    assert (status.attempts, status.cost_usd, status.batch_id) == (1, 0.001, BATCH)
    await orch.check_finished(handle, result)


async def test_a_batched_call_that_failed_takes_the_retry_path(orch: Orchestration) -> None:
    """A call the batch failed with a retryable error (a 503 in its error file) is attempt 1
    failed: the run backs off in retry_llm and its attempt 2 goes into a new batch, whose
    answer completes it."""
    orch.fakes.plan_overrides = {"lane": "batch"}
    orch.fakes.llm_script = [batched("batch_a", "call-1"), batched("batch_b", "call-2")]
    orch.fakes.batch_script = [failed("HTTP 503 from the LLM: busy", errors.LLM_RETRYABLE), Reply()]
    result = await finished(await orch.start())
    assert result.state == "completed"
    assert path(result.history)[2:8] == [
        "invoke_llm",
        "await_batch",
        "invoke_llm",
        "retry_llm",
        "invoke_llm",
        "await_batch",
    ]
    assert [call.attempt for call in orch.fakes.llm_calls] == [1, 2]
    assert [wait.batch_id for wait in orch.fakes.batch_waits] == ["batch_a", "batch_b"]
    retried = entry_for(result.history, "retryable_error")
    assert retried.detail == "LlmRetryable: HTTP 503 from the LLM: busy"


async def test_a_permanent_batch_failure_fails_the_run(orch: Orchestration) -> None:
    """A call the batch refused for good (a 400 in its error file) ends the run failed, as a
    synchronous 400 does."""
    orch.fakes.plan_overrides = {"lane": "batch"}
    orch.fakes.llm_script = [batched()]
    orch.fakes.batch_script = [
        failed("HTTP 400 from the LLM: bad", errors.LLM_PERMANENT, permanent=True)
    ]
    handle = await orch.start()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    status = await orch.status(handle)
    assert status.state == "failed"
    assert status.last_error == "LlmPermanent: HTTP 400 from the LLM: bad"


async def test_an_await_that_itself_fails_is_a_failed_call(orch: Orchestration) -> None:
    """await_batch failing (the call unknown to the store, a timeout) is taken up as the
    call's failure: the run retries, it is not stuck and does not fail its workflow task."""
    orch.fakes.plan_overrides = {"lane": "batch"}
    orch.fakes.llm_script = [batched("batch_a", "call-1"), batched("batch_b", "call-2")]
    orch.fakes.batch_script = [ApplicationError("the store lost it", type=errors.LLM_RETRYABLE)]
    result = await finished(await orch.start())
    assert result.state == "completed"
    assert entry_for(result.history, "retryable_error").detail == (
        "LlmRetryable: the store lost it"
    )


async def test_a_malformed_batched_reply_is_retried_with_a_correction(orch: Orchestration) -> None:
    """A batched reply that was not the contract's JSON is retried like a synchronous one: the
    next attempt asks again with the corrective instruction."""
    orch.fakes.plan_overrides = {"lane": "batch"}
    orch.fakes.llm_script = [batched("batch_a", "call-1"), batched("batch_b", "call-2")]
    orch.fakes.batch_script = [failed("reply is not JSON", errors.LLM_MALFORMED_REPLY), Reply()]
    result = await finished(await orch.start())
    assert result.state == "completed"
    assert [call.corrective for call in orch.fakes.llm_calls] == [False, True]


async def test_a_run_cancelled_in_await_batch_ends_cancelled(
    private_orch: Orchestration,
) -> None:
    """Cancelled while its call is in a batch, the run ends cancelled (nothing to undo). (On a
    server of its own: the test server keeps the orphaned await_batch outstanding, and stops
    skipping time meanwhile.)"""
    orch = private_orch
    orch.fakes.plan_overrides = {"lane": "batch"}
    orch.fakes.llm_script = [batched()]
    orch.fakes.batch_gate = Gate()
    handle = await orch.start()
    await orch.wait_for_state(handle, "await_batch")
    await asyncio.wait_for(orch.fakes.batch_gate.entered.wait(), TASK_PROGRESS_TIMEOUT_S)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    status = await orch.status(handle)
    assert status.state == "cancelled"
    assert status.history[-1].from_state == "await_batch"


async def test_the_synchronous_lane_is_unchanged(orch: Orchestration) -> None:
    """A plan without a lane calls synchronously: no batch state, no await_batch."""
    result = await finished(await orch.start())
    assert "await_batch" not in path(result.history)
    assert orch.fakes.batch_waits == []
    assert [call.lane for call in orch.fakes.llm_calls] == ["sync"]
