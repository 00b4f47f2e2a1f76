"""Cancellation: any non-terminal state -> cancelled, with compensation only when a vector may
have been written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from tests.support.history_events import scheduled_activities
from tests.support.orchestration import Orchestration
from tests.support.run_history import step
from tests.support.scripted_activities import Gate, rate_limited
from workflows import contract
from workflows.payloads import PipelineResult, RunStatus, vector_key


async def cancel_and_wait(
    orch: Orchestration, handle: WorkflowHandle[Any, PipelineResult]
) -> RunStatus:
    """Cancel the run, check it ended Cancelled, and return its final status."""
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert isinstance(info.value.cause, CancelledError), repr(info.value.cause)
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.CANCELED
    status = await orch.status(handle)
    assert (status.state, status.status, status.progress) == ("cancelled", "Cancelled", 100)
    await orch.check_history(handle, status.history)
    return status


async def test_cancel_in_await_review_needs_no_compensation(orch: Orchestration) -> None:
    """Cancelling a run that waits for review ends it Cancelled with an await_review -> cancelled
    entry; nothing was embedded, so delete_embedding is not called."""
    handle = await orch.awaiting_review()

    status = await cancel_and_wait(orch, handle)

    last = status.history[-1]
    assert (last.from_state, last.event, last.to_state) == ("await_review", "cancel", "cancelled")
    assert last.detail == "no side effects to undo"
    assert orch.fakes.deleted == []
    assert contract.ACTIVITY_DELETE_EMBEDDING not in await scheduled_activities(handle)


async def test_cancel_during_backoff_needs_no_compensation(orch: Orchestration) -> None:
    """Cancelling in retry_llm (waiting out a Retry-After) ends the run at once, no compensation."""
    orch.fakes.llm_script = [rate_limited(3600)]
    handle = await orch.start()
    await orch.wait_for_state(handle, "retry_llm")

    status = await cancel_and_wait(orch, handle)

    assert (status.history[-1].from_state, status.history[-1].event) == ("retry_llm", "cancel")
    assert len(orch.fakes.llm_calls) == 1
    assert orch.fakes.deleted == []


async def test_cancel_during_escalation(orch: Orchestration) -> None:
    """An escalated run can be cancelled too; no dead letter is sent."""
    handle = await orch.escalated(review_timeout_s=10)

    status = await cancel_and_wait(orch, handle)

    assert status.history[-1].from_state == "escalate"
    assert orch.fakes.dead_letters == [] and orch.fakes.deleted == []


async def test_cancel_during_llm_call_needs_no_compensation(private_orch: Orchestration) -> None:
    """Cancelling while invoke_llm is in flight ends the run Cancelled (the cancel is not taken
    for an LLM failure to retry) without compensation, and the call itself is cancelled."""
    orch = private_orch
    gate = orch.fakes.llm_gate = Gate()
    handle = await orch.start()
    await gate.entered.wait()

    status = await cancel_and_wait(orch, handle)

    last = status.history[-1]
    assert (last.from_state, last.event, last.detail) == (
        "invoke_llm",
        "cancel",
        "no side effects to undo",
    )
    assert "retryable_error" not in [e.event for e in status.history]
    assert status.attempts == 1 and len(orch.fakes.llm_calls) == 1
    assert orch.fakes.deleted == [] and orch.fakes.embedding_calls == []
    await asyncio.wait_for(gate.cancelled.wait(), timeout=5)


async def test_cancel_during_embedding_stops_it_then_compensates(orch: Orchestration) -> None:
    """Cancelling while generate_embedding runs cancels the call, waits for it to stop, then
    calls the compensation delete_embedding with the run's vector key; no vector is left behind and
    no dead letter is sent (the cancel is not taken for an embedding failure)."""
    gate = orch.fakes.embedding_gate = Gate()
    handle = await orch.start()
    await gate.entered.wait()

    status = await cancel_and_wait(orch, handle)

    assert gate.cancelled.is_set() and gate.exited.is_set()
    assert orch.fakes.deleted == [vector_key(handle.id, handle.first_execution_run_id)]
    assert not orch.fakes.stored
    assert orch.fakes.dead_letters == []
    assert step(status.history[-1]) == (
        "generate_embedding",
        "cancel",
        "cancelled",
        "compensation: deleted 0 vector(s)",
    )
    activities = await scheduled_activities(handle)
    assert activities[-2:] == [
        contract.ACTIVITY_GENERATE_EMBEDDING,
        contract.ACTIVITY_DELETE_EMBEDDING,
    ]


async def test_cancel_too_late_to_stop_the_write_deletes_the_vector(orch: Orchestration) -> None:
    """An embedding call that completes its upsert despite the cancel still ends Cancelled, and
    the compensation deletes the vector it wrote."""
    gate = orch.fakes.embedding_gate = Gate(finish_despite_cancel=True)
    handle = await orch.start()
    await gate.entered.wait()

    status = await cancel_and_wait(orch, handle)

    assert gate.cancelled.is_set()
    assert orch.fakes.deleted == [vector_key(handle.id, handle.first_execution_run_id)]
    assert not orch.fakes.stored
    assert status.history[-1].detail == "compensation: deleted 1 vector(s)"
    assert "embedded" not in [e.event for e in status.history]
