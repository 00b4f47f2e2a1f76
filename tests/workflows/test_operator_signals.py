"""Operator signals for runs stuck in review: expire_review forces the review timeout now,
dead_letter forces every review wait to time out so the run dead-letters the normal way."""

from __future__ import annotations

from datetime import timedelta

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, path
from tests.support.scripted_activities import Gate, Reply
from workflows import contract


async def test_expire_review_escalates_without_waiting(orch: Orchestration) -> None:
    """expire_review in await_review takes the review_timeout edge at once (no time passes),
    naming the operator and reason; the escalation timer then runs as usual."""
    orch.fakes.llm_script = [Reply(needs_review=True)]
    handle = await orch.start(review="auto", options={"escalation_timeout_s": 300})
    waiting = await orch.wait_for_state(handle, "await_review")

    await handle.signal(
        contract.SIGNAL_EXPIRE_REVIEW, {"operator": "oncall", "reason": "reviewer away"}
    )
    escalated = await orch.wait_for_state(handle, "escalate")

    timeout = entry_for(escalated.history, "review_timeout")
    assert timeout.detail == "review timeout forced by oncall: reviewer away"
    # The plan's review timeout is 600 s; the forced one fires as soon as the signal lands.
    assert timeout.at - waiting.history[-1].at < timedelta(seconds=5)
    await orch.check_history(handle, escalated.history)
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "ann"})
    result = await finished(handle)
    assert result.state == "completed"
    assert orch.fakes.dead_letters == []
    await orch.check_finished(handle, result)


async def test_dead_letter_signal_sends_the_run_to_the_dead_letter_queue(
    orch: Orchestration,
) -> None:
    """dead_letter in await_review walks await_review -> escalate -> dead_letter at once and
    sends one dead letter whose last_error names the operator."""
    handle = await orch.awaiting_review()

    await handle.signal(contract.SIGNAL_DEAD_LETTER, {"operator": "oncall"})
    result = await finished(handle)

    assert result.state == "dead_letter"
    assert path(result.history)[-3:] == ["await_review", "escalate", "dead_letter"]
    [dead_letter] = orch.fakes.dead_letters
    assert dead_letter.message.failed_state == "escalate"
    assert dead_letter.message.last_error == "dead-lettered by oncall"
    await orch.check_finished(handle, result)


async def test_operator_signals_outside_review_are_ignored(orch: Orchestration) -> None:
    """Operator signals only act on runs waiting for review: sent while the LLM is still
    working, they are dropped and the run later waits for its reviewer as usual."""
    gate = orch.fakes.llm_gate = Gate()
    orch.fakes.llm_script = [Reply(needs_review=True)]
    handle = await orch.start(review="auto")
    await gate.entered.wait()

    await handle.signal(contract.SIGNAL_EXPIRE_REVIEW, {"operator": "oncall"})
    await handle.signal(contract.SIGNAL_DEAD_LETTER, {"operator": "oncall"})
    gate.release.set()
    waiting = await orch.wait_for_state(handle, "await_review")

    assert waiting.history[-1].event == "needs_review"
    assert await handle.query(contract.QUERY_STATE) == "await_review"
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "ann"})
    result = await finished(handle)
    assert result.state == "completed"
    assert orch.fakes.dead_letters == []
    await orch.check_finished(handle, result)
