"""Decisions that reach a continued run before its carried state is vouched for (the moment its
``verify_continuation`` runs), by signal or by update, are held and judged once the state is in
place, in the order they came: not against the blank state the run holds until then, and an
update is never refused for arriving in that moment."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import notes, path
from tests.support.scripted_activities import Reply
from tests.support.time_skipping import TASK_PROGRESS_TIMEOUT_S
from workflows import contract, errors
from workflows.payloads import NOTE_CONTINUED_AS_NEW, PipelineResult, RunStatus

# Each junk review is refused, but its bytes stay in history: three of them pass the size at
# which a waiting run continues as new (continuation.CONTINUE_AT_BYTES, 2 MiB).
JUNK_REVIEW = {"decision": "approve", "reviewer": "mallory", "feedback": "x" * 800_000}
# The continued run's workflow tasks time out this soon, so the worker reports its task as
# alive while the held check runs, and the signal sent meanwhile reaches the run before the
# check returns (Temporal delivers it with the next task).
TASK_TIMEOUT = timedelta(seconds=1)


async def resuming(orch: Orchestration) -> tuple[WorkflowHandle[Any, PipelineResult], int]:
    """A run waiting for review that has continued as new, its new run holding in
    ``verify_continuation``; and the review round it waits in."""
    orch.fakes.llm_script = [Reply(needs_review=True)]
    handle = await orch.start(review="auto", task_timeout=TASK_TIMEOUT)
    waiting = await orch.wait_for_state(handle, "await_review")
    orch.lineage.hold = asyncio.Event()
    for _ in range(3):
        await handle.signal(contract.SIGNAL_REVIEW, JUNK_REVIEW)
    await asyncio.wait_for(orch.lineage.entered.wait(), TASK_PROGRESS_TIMEOUT_S)
    return handle, waiting.review_round


async def resume(orch: Orchestration) -> None:
    """Let the held check return once Temporal has delivered what was sent meanwhile."""
    assert orch.lineage.hold is not None
    await asyncio.sleep(TASK_TIMEOUT.total_seconds())
    orch.lineage.hold.set()


async def test_an_operator_signal_sent_while_a_run_resumes_is_held_not_dropped(
    orch: Orchestration,
) -> None:
    """A run waiting for review continues as new (its history grew); a dead_letter signal that
    arrives while the new run verifies its lineage acts once the carried await_review state is
    installed: the run dead-letters at once, as it would have a moment earlier or later. The
    history notes when the run continued: while waiting for review."""
    handle, _ = await resuming(orch)
    await handle.signal(contract.SIGNAL_DEAD_LETTER, {"operator": "oncall"})
    await resume(orch)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert result.state == "dead_letter"
    [continued] = notes(result.history, NOTE_CONTINUED_AS_NEW)
    assert continued.detail is not None
    assert continued.detail.startswith("continued as a new run while waiting for review ("), (
        continued.detail
    )
    assert path(result.history)[-3:] == ["await_review", "escalate", "dead_letter"]
    [dead_letter] = orch.fakes.dead_letters
    assert dead_letter.message.last_error == "dead-lettered by oncall"
    await orch.check_finished(handle, result)


async def test_a_review_sent_while_a_run_resumes_is_judged_against_the_carried_state(
    orch: Orchestration,
) -> None:
    """An approval for the round the run waits in, arriving while the new run verifies its
    lineage, is judged once the carried state (that round) is installed: it completes the run,
    and the refused junk before it stays counted."""
    handle, review_round = await resuming(orch)
    approval = {"decision": "approve", "reviewer": "ann", "review_round": review_round}
    await handle.signal(contract.SIGNAL_REVIEW, approval)
    await resume(orch)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert result.state == "completed"
    assert [entry.reviewer for entry in result.history if entry.event == "approve"] == ["ann"]
    assert (await orch.status(handle)).reviews_refused == 3
    await orch.check_finished(handle, result)


async def test_a_review_update_sent_while_a_run_resumes_waits_and_is_applied_once(
    orch: Orchestration,
) -> None:
    """A submit_review update for the round the run waits in, sent while the new run verifies
    its lineage, is not refused for arriving then: it waits until the carried state is in
    place, is applied once, and answers with the status after it."""
    handle, review_round = await resuming(orch)
    approval = {"decision": "approve", "reviewer": "ann", "review_round": review_round}
    update = asyncio.create_task(
        handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
    )
    await resume(orch)
    after = await asyncio.wait_for(update, TASK_PROGRESS_TIMEOUT_S)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert after.state != "await_review"
    assert [e.review_round for e in after.history if e.event == "approve"] == [review_round]
    assert result.state == "completed"
    assert [entry.reviewer for entry in result.history if entry.event == "approve"] == ["ann"]
    await orch.check_finished(handle, result)


async def test_updates_sent_while_a_run_resumes_are_judged_in_order_by_the_same_rules(
    orch: Orchestration,
) -> None:
    """Three updates sent while the run resumes, in order: a review for a round the run is not
    in, an approval for the current round, and a second approval for it. Once the state is in
    place the first is refused for its round, the second applied, the third
    refused because the round already has a decision: each with the rule's reason, none with
    "send it again"."""
    handle, review_round = await resuming(orch)
    stale = {"decision": "reject", "reviewer": "bob", "review_round": review_round + 1}
    approval = {"decision": "approve", "reviewer": "ann", "review_round": review_round}
    again = {"decision": "approve", "reviewer": "cy", "review_round": review_round}
    updates = []
    for decision in (stale, approval, again):
        updates.append(
            asyncio.create_task(
                handle.execute_update(
                    contract.UPDATE_SUBMIT_REVIEW, decision, result_type=RunStatus
                )
            )
        )
        # Accepted (held) before the next is sent, so the order is the sending order.
        await asyncio.sleep(0.2)
    await resume(orch)
    stale_out, approved, again_out = await asyncio.wait_for(
        asyncio.gather(*updates, return_exceptions=True), TASK_PROGRESS_TIMEOUT_S
    )
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert isinstance(approved, RunStatus)
    for refused, reason in ((stale_out, "refused: run"), (again_out, "already has a decision")):
        assert isinstance(refused, WorkflowUpdateFailedError)
        assert isinstance(refused.cause, ApplicationError)
        assert refused.cause.type == errors.DECISION_REFUSED
        assert reason in refused.cause.message
        assert "send it again" not in refused.cause.message
    assert result.state == "completed"
    assert [entry.reviewer for entry in result.history if entry.event in ("approve", "reject")] == [
        "ann"
    ]


async def test_a_budget_decision_sent_while_a_run_resumes_is_judged_by_the_budget_rules(
    orch: Orchestration,
) -> None:
    """A decide_budget update sent while a run waiting for review resumes is judged once the
    carried state is in place, by the budget desk's rule (the run is not waiting for a budget
    decision), not refused for arriving then; a review sent after it still completes the
    run."""
    handle, review_round = await resuming(orch)
    budget = asyncio.create_task(
        handle.execute_update(
            contract.UPDATE_DECIDE_BUDGET,
            {"decision": "approve", "operator": "cfo"},
            result_type=RunStatus,
        )
    )
    await resume(orch)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await asyncio.wait_for(budget, TASK_PROGRESS_TIMEOUT_S)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == errors.DECISION_REFUSED
    assert "budget" in cause.message
    assert "send it again" not in cause.message

    approval = {"decision": "approve", "reviewer": "ann", "review_round": review_round}
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)
    assert result.state == "completed"


async def test_a_flood_while_a_run_resumes_is_held_only_up_to_the_cap(
    orch: Orchestration,
) -> None:
    """64 reviews sent while a run resumes are held, and judged once its state is in place; the
    two after them, a valid approval among them, are refused at once as one too many and never
    applied, so a flood in that moment cannot grow the run's memory without bound. An update
    beyond the cap is refused with that reason, one that does not decode with its own; a review
    sent once the run is admitted is judged as usual and completes the run."""
    handle, review_round = await resuming(orch)
    stale = {"decision": "approve", "reviewer": "mallory", "review_round": review_round + 1}
    for _ in range(64):
        await handle.signal(contract.SIGNAL_REVIEW, stale)
    approval = {"decision": "approve", "reviewer": "ann", "review_round": review_round}
    await handle.signal(contract.SIGNAL_REVIEW, approval)
    await handle.signal(contract.SIGNAL_REVIEW, stale)
    update = asyncio.create_task(
        handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
    )
    undecodable = asyncio.create_task(
        handle.execute_update(
            contract.UPDATE_SUBMIT_REVIEW, {"decision": "maybe", "reviewer": "ann"}
        )
    )
    await asyncio.sleep(0.2)  # refused by the validator, before the run resumes
    await resume(orch)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await asyncio.wait_for(update, TASK_PROGRESS_TIMEOUT_S)
    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.non_retryable
    assert refused.value.cause.message == (
        "invalid review: too many sent while the run was resuming"
    )
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await asyncio.wait_for(undecodable, TASK_PROGRESS_TIMEOUT_S)
    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.message.startswith("invalid review: decision: ")

    # The three junk reviews before the flood, the 64 held, then the two signals past the cap:
    # all refused, and counted on the run's own state, the last ones last.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TASK_PROGRESS_TIMEOUT_S
    while (status := await orch.status(handle)).reviews_refused < 3 + 64 + 2:
        assert loop.time() < deadline, status.reviews_refused
        await asyncio.sleep(0.05)
    assert status.reviews_refused == 3 + 64 + 2
    assert status.last_refusal == "invalid review: too many sent while the run was resuming"
    assert status.state == "await_review"  # the approval past the cap was not applied

    await handle.signal(contract.SIGNAL_REVIEW, approval)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)
    assert result.state == "completed"
    assert [entry.reviewer for entry in result.history if entry.event == "approve"] == ["ann"]
    # Refused by its validator: the update never entered the history.
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    assert not [e for e in (await handle.fetch_history()).events if e.event_type == accepted]


async def test_an_update_that_does_not_decode_is_refused_at_once_while_a_run_resumes(
    orch: Orchestration,
) -> None:
    """While a run resumes, an update whose payload is not a review is refused at once by its
    validator (non-retryable DecisionRefused, naming the field), never held or entered in
    history; the run then completes as usual."""
    handle, review_round = await resuming(orch)
    bad = asyncio.create_task(
        handle.execute_update(
            contract.UPDATE_SUBMIT_REVIEW, {"decision": "maybe", "reviewer": "ann"}
        )
    )
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await asyncio.wait_for(bad, TASK_PROGRESS_TIMEOUT_S)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == (errors.DECISION_REFUSED, True)
    assert cause.message.startswith("invalid review: decision: "), cause.message
    await resume(orch)
    approval = {"decision": "approve", "reviewer": "ann", "review_round": review_round}
    await handle.signal(contract.SIGNAL_REVIEW, approval)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)
    assert result.state == "completed"
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    assert not [e for e in (await handle.fetch_history()).events if e.event_type == accepted]
