"""Review notifications: one ``notify_reviewers`` activity per review wait and per escalation,
started only when the plan says so, and never in the run's way (it is not awaited)."""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.history_events import scheduled_activities
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for
from tests.support.scripted_activities import Reply
from tests.support.time_skipping import assert_waited, skip_time
from workflows import contract, errors


async def test_a_review_wait_and_its_escalation_each_notify_once(orch: Orchestration) -> None:
    """With notifications on, entering await_review starts one notice (review_needed, round 1,
    the review deadline) and the timeout into escalate one more (escalated, the escalation
    deadline); an approval then completes the run with no further notice."""
    orch.fakes.plan_overrides = {"notify": True}
    orch.fakes.llm_script = [Reply(content="draft", needs_review=True)]
    handle = await orch.start(review="auto", options={"review_timeout_s": 600})

    waiting = await orch.wait_for_state(handle, "await_review")
    await skip_time(orch.env, timedelta(seconds=1))  # lets the started notice run
    [needed] = orch.fakes.notices
    entered = entry_for(waiting.history, "needs_review")
    assert (needed.workflow_id, needed.reason, needed.state) == (
        handle.id,
        "review_needed",
        "await_review",
    )
    assert needed.review_round == 1 and needed.run_id == handle.result_run_id
    assert needed.deadline is not None
    assert_waited(entered.at, needed.deadline, 600)

    await skip_time(orch.env, timedelta(seconds=601))
    escalated_status = await orch.wait_for_state(handle, "escalate")
    await skip_time(orch.env, timedelta(seconds=1))
    assert [n.reason for n in orch.fakes.notices] == ["review_needed", "escalated"]
    escalated = orch.fakes.notices[1]
    timed_out = entry_for(escalated_status.history, "review_timeout")
    assert escalated.state == "escalate" and escalated.deadline is not None
    assert_waited(timed_out.at, escalated.deadline, 1200)

    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "bob"})
    result = await finished(handle)
    assert result.state == "completed"
    assert len(orch.fakes.notices) == 2
    await orch.check_finished(handle, result)


async def test_each_review_round_notifies_again(orch: Orchestration) -> None:
    """A reedit sends the run back to the LLM; the next review wait is a new round and gets its
    own notice (round 2)."""
    orch.fakes.plan_overrides = {"notify": True}
    orch.fakes.llm_script = [Reply("v1", needs_review=True), Reply("v2", needs_review=True)]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")
    await handle.signal(
        contract.SIGNAL_REVIEW, {"decision": "reedit", "reviewer": "bob", "feedback": "shorter"}
    )
    second = await orch.wait_for_state(handle, "await_review")
    while second.review_round != 2:
        second = await orch.wait_for_state(handle, "await_review")
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "bob"})
    assert (await finished(handle)).state == "completed"

    assert [(n.reason, n.review_round) for n in orch.fakes.notices] == [
        ("review_needed", 1),
        ("review_needed", 2),
    ]


async def test_notifications_off_schedule_nothing(orch: Orchestration) -> None:
    """Without notify in the plan (the default) no notify_reviewers activity is ever scheduled,
    through review and escalation: the feature costs nothing unless configured."""
    handle = await orch.escalated(review_timeout_s=60)
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "bob"})
    assert (await finished(handle)).state == "completed"

    assert orch.fakes.notices == []
    assert contract.ACTIVITY_NOTIFY_REVIEWERS not in await scheduled_activities(handle)


async def test_a_failing_notification_never_fails_or_holds_the_run(orch: Orchestration) -> None:
    """A receiver that refuses for good (non-retryable) and one that keeps failing (retryable,
    every attempt) change nothing for the run: it waits, escalates and completes as without
    notifications, with no failure in its own history."""
    orch.fakes.plan_overrides = {"notify": True}
    refused = ApplicationError("HTTP 404", type=errors.NOTIFICATION_REJECTED, non_retryable=True)
    down = ApplicationError("unreachable", type=errors.NOTIFICATION_FAILED)
    orch.fakes.notify_script = [refused, *([down] * 6)]

    handle = await orch.escalated(review_timeout_s=60)
    await skip_time(orch.env, timedelta(minutes=5))  # the escalation notice's retries play out
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "bob"})
    result = await finished(handle)

    assert result.state == "completed" and result.history[-1].to_state == "completed"
    reasons = [n.reason for n in orch.fakes.notices]
    assert reasons[0] == "review_needed" and set(reasons[1:]) == {"escalated"}
    assert len(reasons) == 7  # refused once; the escalation tried 6 times (NOTIFY_RETRY)
    await orch.check_finished(handle, result)


async def test_an_operators_dead_letter_tells_no_reviewer(orch: Orchestration) -> None:
    """The operator's dead_letter signal sends the run through escalate to dead_letter; that is
    no escalation for reviewers to hear about, so only the review wait was notified."""
    orch.fakes.plan_overrides = {"notify": True}
    handle = await orch.awaiting_review()
    await handle.signal(contract.SIGNAL_DEAD_LETTER, {"operator": "oncall"})

    assert (await finished(handle)).state == "dead_letter"
    assert [n.reason for n in orch.fakes.notices] == ["review_needed"]
