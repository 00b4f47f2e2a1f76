"""The submit_review update and the review signal: when a review is taken, refused or ignored."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, events, step, transitions
from tests.support.scripted_activities import Gate, Reply
from workflows import contract
from workflows.payloads import REEDIT_NEEDS_FEEDBACK, PipelineResult, RunStatus

APPROVE = {"decision": "approve", "reviewer": "alice", "feedback": None}

UPDATE_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
}


async def submit(handle: WorkflowHandle[Any, PipelineResult], review: Any) -> RunStatus:
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW, review, result_type=RunStatus
    )
    return status


async def refusal(handle: WorkflowHandle[Any, PipelineResult], review: Any) -> str:
    """Submit a review that must be refused; the refusal's message."""
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await submit(handle, review)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    return cause.message


async def update_events(handle: WorkflowHandle[Any, PipelineResult]) -> list[int]:
    history = await handle.fetch_history()
    return [event.event_type for event in history.events if event.event_type in UPDATE_EVENTS]


async def test_update_in_await_review_returns_status_after_the_decision(
    orch: Orchestration,
) -> None:
    """submit_review in await_review is accepted and returns the status once the decision is
    applied: the run has moved on to generate_embedding, with an approve entry naming the
    reviewer."""
    orch.fakes.llm_script = [Reply(needs_review=True)]
    orch.fakes.embedding_gate = Gate()
    handle = await orch.start(review="auto")
    before = await orch.wait_for_state(handle, "await_review")

    status = await submit(handle, APPROVE)

    assert (status.state, status.status, status.progress) == (
        "generate_embedding",
        "Processing",
        85,
    )
    assert status.history[: len(before.history)] == before.history
    assert step(status.history[-1]) == (
        "await_review",
        "approve",
        "generate_embedding",
        "approve by alice",
    )
    orch.fakes.embedding_gate.release.set()
    result = await finished(handle)
    assert result.state == "completed"
    await orch.check_finished(handle, result)


async def test_update_refused_while_the_llm_is_still_running(orch: Orchestration) -> None:
    """While invoke_llm is in flight the validator refuses a review with a message naming the
    state; nothing is recorded, the state is unchanged, and the refused approval does not
    carry over to the review that follows."""
    gate = orch.fakes.llm_gate = Gate()
    orch.fakes.llm_script = [Reply(needs_review=True)]
    handle = await orch.start(review="auto")
    await gate.entered.wait()

    message = await refusal(handle, APPROVE)

    assert message == "run is not awaiting review (state: invoke_llm)"
    status = await orch.status(handle)
    assert status.state == "invoke_llm"
    assert [e.event for e in status.history] == ["start", "prompt_ready"]
    assert await update_events(handle) == []

    gate.release.set()
    waiting = await orch.wait_for_state(handle, "await_review")
    assert waiting.history[-1].event == "needs_review"
    # Still waiting: the refused approval was not kept for later.
    assert await handle.query(contract.QUERY_STATE) == "await_review"
    status = await submit(handle, APPROVE)
    assert status.state == "generate_embedding"
    result = await finished(handle)
    assert result.state == "completed"
    await orch.check_finished(handle, result)


async def test_update_refused_while_embedding(orch: Orchestration) -> None:
    """After the decision, a second review is refused: the run is in generate_embedding."""
    orch.fakes.llm_script = [Reply(needs_review=True)]
    gate = orch.fakes.embedding_gate = Gate()
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")
    await submit(handle, APPROVE)
    await gate.entered.wait()

    message = await refusal(handle, {"decision": "reject", "reviewer": "mallory"})

    assert message == "run is not awaiting review (state: generate_embedding)"
    assert await handle.query(contract.QUERY_STATE) == "generate_embedding"
    gate.release.set()
    result = await finished(handle)
    assert result.state == "completed"
    assert [e.event for e in result.history].count("approve") == 1
    assert "reject" not in [e.event for e in result.history]
    await orch.check_finished(handle, result)


async def test_update_after_completion_is_refused_by_the_server(orch: Orchestration) -> None:
    """A closed run takes no review: the server refuses the update (the workflow is gone, so no
    validator runs) and the result stays as it was."""
    handle = await orch.start(review="never")
    result = await finished(handle)
    assert result.state == "completed"

    with pytest.raises(RPCError) as info:
        await submit(handle, APPROVE)

    assert info.value.status == RPCStatusCode.NOT_FOUND
    assert await finished(handle) == result
    with pytest.raises(RPCError) as signal_info:
        await handle.signal(contract.SIGNAL_REVIEW, APPROVE)
    assert signal_info.value.status == RPCStatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("review", "field", "problem"),
    [
        ({"decision": "maybe", "reviewer": "alice"}, "decision", "Input should be 'approve'"),
        ({"decision": "approve"}, "reviewer", "Field required"),
        ({"decision": "approve", "reviewer": "   "}, "reviewer", "must not be empty"),
        ({**APPROVE, "approved": True}, "approved", "Extra inputs are not permitted"),
        ("approve", "(payload)", "valid dictionary"),
    ],
)
async def test_update_validator_names_the_invalid_field(
    orch: Orchestration, review: Any, field: str, problem: str
) -> None:
    """An invalid review payload is refused by the validator with 'invalid review: <field>: ...'
    before it reaches the workflow; the run keeps waiting for a valid review."""
    handle = await orch.awaiting_review()

    message = await refusal(handle, review)

    assert message.startswith(f"invalid review: {field}: "), message
    assert problem in message
    status = await orch.status(handle)
    assert status.state == "await_review"
    assert status.history[-1].event == "needs_review"
    assert await update_events(handle) == []
    await orch.check_history(handle, status.history)


async def test_review_signal_with_the_same_payload_approves(orch: Orchestration) -> None:
    """The review signal takes the same payload as the update and moves the run on."""
    orch.fakes.llm_script = [Reply(content="signed off", needs_review=True)]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")

    await handle.signal(contract.SIGNAL_REVIEW, APPROVE)
    result = await finished(handle)

    assert result.state == "completed"
    assert result.content == "signed off"
    assert entry_for(result.history, "approve").detail == "approve by alice"
    await orch.check_finished(handle, result)


async def test_invalid_or_untimely_review_signals_are_counted_not_applied(
    orch: Orchestration,
) -> None:
    """A signal cannot be refused, so an invalid one, or one sent before the run awaits review,
    is counted (state unchanged, nothing added to the history) and not acted on: the run waits
    on until a valid, timely signal arrives."""
    gate = orch.fakes.llm_gate = Gate()
    orch.fakes.llm_script = [Reply(needs_review=True)]
    handle = await orch.start(review="auto")
    await gate.entered.wait()

    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "reject", "reviewer": "early"})
    early = await orch.status(handle)
    gate.release.set()
    await orch.wait_for_state(handle, "await_review")
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "nope", "reviewer": "bob"})
    invalid = await orch.status(handle)
    await handle.signal(contract.SIGNAL_REVIEW, "approve")
    not_a_dict = await orch.status(handle)
    await handle.signal(contract.SIGNAL_REVIEW, APPROVE)
    result = await finished(handle)

    assert result.state == "completed"
    assert events(result.history).count("approve") == 1
    assert "reject" not in events(result.history)
    assert len(result.history) == len(transitions(result.history))
    assert early.reviews_refused == 1
    assert early.last_refusal == "run is not awaiting review (state: invoke_llm)"
    assert invalid.reviews_refused == 2
    assert invalid.last_refusal is not None
    assert invalid.last_refusal.startswith("invalid review: decision: ")
    assert not_a_dict.reviews_refused == 3
    assert not_a_dict.last_refusal is not None
    assert not_a_dict.last_refusal.startswith("invalid review: (payload): ")
    assert (await orch.status(handle)).reviews_refused == 3
    await orch.check_finished(handle, result)


@pytest.mark.parametrize("feedback", [None, "", "  \n "], ids=["none", "empty", "blanks"])
async def test_a_signalled_reedit_without_feedback_is_counted_not_applied(
    orch: Orchestration, feedback: str | None
) -> None:
    """The review signal's reedit with no feedback (none, empty or only blanks) is refused by
    the rule the update's validator, the CLI and the inbox apply: counted with its reason, the
    run still waits in round 1, the model is not asked again and the history records nothing;
    an approval then completes the run."""
    orch.fakes.llm_script = [Reply(content="draft", needs_review=True)]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")

    reedit = {"decision": "reedit", "reviewer": "alice", "feedback": feedback}
    await handle.signal(contract.SIGNAL_REVIEW, reedit)
    refused = await orch.status(handle)
    await handle.signal(contract.SIGNAL_REVIEW, APPROVE)
    result = await finished(handle)

    assert (refused.reviews_refused, refused.last_refusal) == (1, REEDIT_NEEDS_FEEDBACK)
    assert (refused.state, refused.review_round) == ("await_review", 1)
    assert result.state == "completed" and result.content == "draft"
    assert "reedit" not in events(result.history) and result.corrections == []
    assert len(orch.fakes.llm_calls) == 1
    await orch.check_finished(handle, result)
