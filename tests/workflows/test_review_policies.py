"""Review policies on the time-skipping server: a quorum of distinct reviewers from a group, a
reject that ends the round, the requester who never counts, the escalation chain that hands the
round to a second group at the first deadline and dead-letters it at the second, and
auto-approve rules that approve a matching result with no reviewer. (The 2-of-3 quorum, one
approval short of it and a reject's own quorum are checked in test_review_rules.py, a matching
auto-approve rule and reedits kept as data in test_review_decisions.py, a correction kept as
data in test_document_pipeline.py.)"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

import tests.workflows.test_document_pipeline as documents
from aiorch.ops.results import finished
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, events, notes
from tests.support.scripted_activities import Reply
from tests.support.time_skipping import assert_waited, skip_time
from tests.workflows.test_review_decisions import CONFIDENT
from tests.workflows.test_review_rules import TWO_OF_THREE
from workflows import contract
from workflows.payloads import (
    NOTE_REVIEW_VOTE,
    RunStatus,
)


async def submit(handle: WorkflowHandle[Any, Any], decision: str, reviewer: str) -> RunStatus:
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        {"decision": decision, "reviewer": reviewer},
        result_type=RunStatus,
    )
    return status


async def refusal(handle: WorkflowHandle[Any, Any], decision: str, reviewer: str) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await submit(handle, decision, reviewer)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    return cause.message


async def test_a_reject_by_anyone_in_the_group_ends_the_round(orch: Orchestration) -> None:
    """With the policy's default of one rejection, carol's reject after alice's approval ends
    the round: the run fails, rejected by carol, and alice's vote stays in the history."""
    orch.fakes.plan_overrides.update(TWO_OF_THREE)
    handle = await orch.awaiting_review()

    await submit(handle, "approve", "alice")
    after = await submit(handle, "reject", "carol")
    result = await finished(handle)

    assert after.state == "failed"
    assert result.state == "failed"
    rejection = entry_for(result.history, "reject")
    assert (rejection.reviewer, rejection.group) == ("carol", "finance")
    assert [v.reviewer for v in notes(result.history, NOTE_REVIEW_VOTE)] == ["alice"]
    await orch.check_finished(handle, result)


async def test_the_requester_never_counts(orch: Orchestration) -> None:
    """alice asked for the run: her approval is refused (she is in the group, but the requester
    never counts), and the quorum needs bob and carol."""
    orch.fakes.plan_overrides.update(TWO_OF_THREE)
    orch.fakes.llm_script = [Reply(needs_review=True)]
    request_id = new_request_id()
    handle = await orch.start(
        raw={
            "request_id": request_id,
            "user_message": "Summarise",
            "review": "auto",
            "requested_by": "alice",
        },
        workflow_id=request_id,
    )
    await orch.wait_for_state(handle, "await_review")

    assert await refusal(handle, "approve", "alice") == "'alice' requested this run"
    assert (await submit(handle, "approve", "bob")).state == "await_review"
    await submit(handle, "approve", "carol")
    result = await finished(handle)

    assert result.state == "completed"
    assert entry_for(result.history, "approve").detail == (
        "approve by carol (2 of 2 approvals: bob, carol)"
    )


CHAIN: dict[str, Any] = {
    "review_policy": "finance-then-leads",
    "review_stages": [
        {"group": "finance", "reviewers": ["alice", "bob"], "approvals": 2},
        {"group": "leads", "reviewers": ["dave"], "approvals": 1},
    ],
    "review_timeout_s": 60,
    "escalation_timeout_s": 120,
}


async def test_the_escalation_chain_hands_the_round_to_the_second_group_at_its_deadline(
    orch: Orchestration,
) -> None:
    """Before the first deadline only finance decides (dave is refused); at 60 s the round
    escalates to leads (the history says so, naming the group), where finance is refused and
    dave's one approval releases the run."""
    orch.fakes.plan_overrides.update(CHAIN)
    handle = await orch.awaiting_review()

    assert await refusal(handle, "approve", "dave") == (
        f"reviewer 'dave' is not in group finance, which decides run {handle.id} now"
    )
    await submit(handle, "approve", "alice")
    await skip_time(orch.env, timedelta(seconds=61))
    escalated = await orch.wait_for_state(handle, "escalate")

    timeout = entry_for(escalated.history, "review_timeout")
    assert_waited(entry_for(escalated.history, "needs_review").at, timeout.at, 60)
    assert timeout.group == "leads"
    assert timeout.detail == (
        "no review in 60s; escalated to group leads, 1 approval, until the deadline in 120s"
    )
    assert escalated.review is not None
    assert (escalated.review.stage, escalated.review.group) == (1, "leads")
    assert escalated.review.approvals == []  # alice's vote does not count for leads
    assert await refusal(handle, "approve", "bob") == (
        f"reviewer 'bob' is not in group leads, which decides run {handle.id} now"
    )
    await submit(handle, "approve", "dave")
    result = await finished(handle)

    assert result.state == "completed"
    approval = entry_for(result.history, "approve")
    assert (approval.reviewer, approval.group) == ("dave", "leads")


async def test_the_escalation_chain_dead_letters_at_the_second_deadline(
    orch: Orchestration,
) -> None:
    """Nobody decides: the round escalates at 60 s and the run is dead-lettered 120 s later,
    each step at its own deadline."""
    orch.fakes.plan_overrides.update(CHAIN)
    handle = await orch.awaiting_review()

    result = await finished(handle)

    assert result.state == "dead_letter"
    asked = entry_for(result.history, "needs_review").at
    escalated = entry_for(result.history, "review_timeout").at
    gave_up = entry_for(result.history, "escalation_timeout").at
    assert_waited(asked, escalated, 60)
    assert_waited(escalated, gave_up, 120)
    assert len(orch.fakes.dead_letters) == 1
    await orch.check_finished(handle, result)


async def test_a_result_the_rules_do_not_match_waits_for_a_reviewer(orch: Orchestration) -> None:
    """A reply below the rule's threshold (0.5), and one with no confidence at all, wait for a
    reviewer as before, who is told."""
    orch.fakes.plan_overrides.update(
        {"review_policy": "auto-confident", "auto_approve": [CONFIDENT], "notify": True}
    )
    orch.fakes.llm_script = [Reply(confidence=0.5)]
    unsure = await orch.start(review="always")
    waiting = await orch.wait_for_state(unsure, "await_review")
    orch.fakes.llm_script = [Reply()]
    silent = await orch.start(review="always")
    await orch.wait_for_state(silent, "await_review")

    assert "approve" not in events(waiting.history)
    assert {notice.workflow_id for notice in orch.fakes.notices} == {unsure.id, silent.id}
    # Both are decided before either result is awaited: awaiting one lets the server skip time
    # to the other's review timeout.
    await submit(unsure, "approve", "ann")
    await submit(silent, "approve", "ann")
    assert (await finished(unsure)).state == "completed"
    assert (await finished(silent)).state == "completed"


SMALL_CLEAN_INVOICE: dict[str, Any] = {
    "review_policy": "auto-small",
    "auto_approve": [
        {
            "name": "clean-small-invoice",
            "when": [
                {"fact": "problems", "op": "==", "value": 0},
                {"fact": "fields.total", "op": "<=", "value": 1000},
                {"fact": "fields.currency", "op": "in", "value": ["EUR", "USD"]},
            ],
        }
    ],
}


async def test_a_document_rule_approves_a_clean_small_invoice_and_not_a_large_one(
    orch: Orchestration,
) -> None:
    """With review always and a rule "no problems, total at most 1000, EUR or USD": an invoice
    of 22.20 EUR is stored with no reviewer (the stored row names none, the history names the
    rule); one of 2,200.00 waits for a reviewer."""
    orch.documents.plan_overrides.update(SMALL_CLEAN_INVOICE)
    orch.fakes.llm_script = [documents.fields(documents.VALID)]
    small = await documents.start(orch, review="always")
    result = await finished(small)

    assert result.state == "completed"
    approval = entry_for(result.history, "approve")
    assert (approval.rule, approval.reviewer) == ("clean-small-invoice", None)
    assert orch.documents.rows[small.id].reviewed_by is None

    large = {
        **documents.VALID,
        "line_items": [
            {"description": "Widgets", "quantity": "3", "unit_price": "600", "amount": "1800"},
            {"description": "Shipping", "quantity": "1", "unit_price": "5.00", "amount": "5.00"},
        ],
        "tax": "395.00",
        "total": "2200.00",
    }
    orch.fakes.llm_script = [documents.fields(large)]
    waiting = await documents.start(orch, review="always")
    view = await documents.waiting(orch, waiting)
    assert view.problems == [] and "approve" not in events(view.history)
