"""Reviewer decisions: approve, reedit and reject, in await_review and after escalation; an
auto-approve rule's approval; reedits kept as data."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, events, path, step
from tests.support.scripted_activities import PRIMARY_MODEL, Reply
from tests.support.time_skipping import skip_time
from workflows import contract
from workflows.payloads import (
    REEDIT_NEEDS_FEEDBACK,
    Decision,
    PipelineResult,
    ReviewDecision,
    RunStatus,
)

CONFIDENT = {
    "name": "confident",
    "when": [{"fact": "confidence", "op": ">=", "value": 0.9}],
}


async def submit(
    handle: WorkflowHandle[Any, PipelineResult],
    decision: Decision,
    reviewer: str = "alice",
    feedback: str | None = None,
) -> RunStatus:
    """Send a review through the submit_review update; the status after the decision."""
    review = ReviewDecision(decision=decision, reviewer=reviewer, feedback=feedback)
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW, review, result_type=RunStatus
    )
    return status


async def test_a_review_wait_records_its_round_and_tells_the_reviewers(
    orch: Orchestration,
) -> None:
    """Entering await_review records the move with the answering model as its detail and the
    new review round (1), and, with notifications on, starts one notice that names the same
    round and state and says a review is needed."""
    orch.fakes.plan_overrides = {"notify": True}
    handle = await orch.awaiting_review()
    waiting = await orch.status(handle)
    entered = entry_for(waiting.history, "needs_review")
    assert (entered.to_state, entered.detail, entered.review_round) == (
        "await_review",
        f"answered by {PRIMARY_MODEL}",
        1,
    )
    await skip_time(orch.env, timedelta(seconds=1))  # lets the started notice run
    [notice] = orch.fakes.notices
    assert (notice.reason, notice.state, notice.review_round) == (
        "review_needed",
        "await_review",
        1,
    )
    await submit(handle, "approve")
    assert (await finished(handle)).state == "completed"


async def test_the_move_into_review_reports_the_reply_on_its_span(
    orch: Orchestration, transition_spans: InMemorySpanExporter
) -> None:
    """The span of the move into await_review carries the reply's model and token usage and,
    with content capture on, the prompt it answered and the reply."""
    orch.fakes.plan_overrides = {"capture_content": True}
    orch.fakes.llm_script = [Reply(content="a draft to check", needs_review=True)]
    handle = await orch.start(review="auto", user_message="Summarise the outage.")
    await orch.wait_for_state(handle, "await_review")
    [span] = [
        span
        for span in transition_spans.get_finished_spans()
        if span.name == "transition invoke_llm->await_review"
        and (span.attributes or {}).get("aiorch.workflow_id") == handle.id
    ]
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.response.model"] == PRIMARY_MODEL
    assert (attributes["gen_ai.usage.input_tokens"], attributes["aiorch.tokens.total"]) == (7, 12)
    assert attributes["aiorch.prompt"] == "Summarise the outage."
    assert attributes["aiorch.reply"] == "a draft to check"
    await submit(handle, "approve")
    assert (await finished(handle)).state == "completed"


async def test_approve_during_escalation_completes(orch: Orchestration) -> None:
    """A run escalated by the review timeout still takes an approval: escalate -> approve ->
    generate_embedding -> completed, storing the reviewed content, with no dead letter."""
    handle = await orch.escalated(60, Reply(content="needs a look", needs_review=True))

    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "bob"})
    result = await finished(handle)

    assert result.state == "completed"
    assert path(result.history)[-4:] == [
        "await_review",
        "escalate",
        "generate_embedding",
        "completed",
    ]
    approval = entry_for(result.history, "approve")
    assert (approval.from_state, approval.detail) == ("escalate", "approve by bob")
    assert [e.content for e in orch.fakes.embedding_calls] == ["needs a look"]
    assert orch.fakes.dead_letters == []
    await orch.check_finished(handle, result)


async def test_reedit_passes_feedback_to_the_next_llm_call(orch: Orchestration) -> None:
    """reedit, by update or by review signal, sends the run back to invoke_llm with every
    reviewer's feedback so far; the revised answer is reviewed again, then approved."""
    orch.fakes.llm_script = [
        Reply(content="v1", needs_review=True),
        Reply(content="v2", needs_review=True),
        Reply(content="v3", needs_review=True),
    ]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")

    after_first = await submit(handle, "reedit", feedback="Cite your sources.")
    reedit = entry_for(after_first.history, "reedit")
    assert (reedit.detail, reedit.reviewer, reedit.feedback) == (
        "reedit by alice: Cite your sources.",
        "alice",
        "Cite your sources.",
    )
    await orch.wait_for_state(handle, "await_review")
    signalled = {"decision": "reedit", "reviewer": "bob", "feedback": "Simpler."}
    await handle.signal(contract.SIGNAL_REVIEW, signalled)
    await orch.wait_for_state(handle, "invoke_llm")
    await orch.wait_for_state(handle, "await_review")
    await submit(handle, "approve")
    result = await finished(handle)

    assert result.state == "completed"
    assert result.content == "v3"
    calls = orch.fakes.llm_calls
    assert [c.attempt for c in calls] == [1, 2, 3]
    assert [c.feedback for c in calls] == [
        [],
        ["Cite your sources."],
        ["Cite your sources.", "Simpler."],
    ]
    assert all(c.user_prompt == calls[0].user_prompt for c in calls)
    assert events(result.history).count("reedit") == 2
    assert [e.content for e in orch.fakes.embedding_calls] == ["v3"]
    await orch.check_finished(handle, result)


async def test_a_reedit_without_feedback_is_refused_by_the_update(orch: Orchestration) -> None:
    """A reedit sent through the submit_review update with no feedback, or only blanks, is
    refused with the reason, as the CLI and the inbox refuse it: the run stays in its round,
    records nothing and asks the model nothing; a reedit with feedback is then taken."""
    orch.fakes.llm_script = [
        Reply(content="v1", needs_review=True),
        Reply(content="v2", needs_review=False),
    ]
    handle = await orch.start(review="always")
    await orch.wait_for_state(handle, "await_review")

    for feedback in (None, "  \n "):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await submit(handle, "reedit", feedback=feedback)
        assert isinstance(refused.value.cause, ApplicationError)
        assert refused.value.cause.message == REEDIT_NEEDS_FEEDBACK
    waiting = await orch.status(handle)
    assert (waiting.state, waiting.review_round) == ("await_review", 1)
    assert "reedit" not in events(waiting.history)
    assert len(orch.fakes.llm_calls) == 1

    await submit(handle, "reedit", feedback="Shorter.")
    await orch.wait_for_state(handle, "await_review")
    assert [c.feedback for c in orch.fakes.llm_calls] == [[], ["Shorter."]]
    await submit(handle, "approve")
    assert (await finished(handle)).state == "completed"


async def test_reject_fails_the_run_naming_the_reviewer(orch: Orchestration) -> None:
    """reject ends the run in failed with last_error naming the reviewer; nothing is embedded
    or dead-lettered, and the rejected content is still in the result."""
    orch.fakes.llm_script = [Reply(content="dubious", needs_review=True)]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")

    status = await submit(handle, "reject", reviewer="carol", feedback="Made up numbers.")
    result = await finished(handle)

    assert (status.state, status.status) == ("failed", "Failed")
    assert status.last_error == "rejected by carol"
    assert result.state == "failed"
    assert result.content == "dubious"
    assert result.embedding_id is None
    assert step(result.history[-1]) == (
        "await_review",
        "reject",
        "failed",
        "reject by carol: Made up numbers.",
    )
    assert orch.fakes.embedding_calls == [] and orch.fakes.dead_letters == []
    assert (await orch.status(handle)).last_error == "rejected by carol"
    await orch.check_finished(handle, result)


async def test_reject_during_escalation_fails(orch: Orchestration) -> None:
    """The same decisions apply after escalation: reject there ends in failed, not dead_letter."""
    handle = await orch.escalated(review_timeout_s=5)

    status = await submit(handle, "reject", reviewer="dave")
    result = await finished(handle)

    assert status.state == "failed"
    assert path(result.history)[-3:] == ["await_review", "escalate", "failed"]
    assert orch.fakes.dead_letters == []
    await orch.check_finished(handle, result)


async def test_an_auto_approve_rule_approves_a_matching_result_with_no_reviewer(
    orch: Orchestration,
) -> None:
    """A reply the rule matches (confidence 0.95) is approved as its round begins: no reviewer
    acts, nobody is notified, and the history says which rule approved it, in which round."""
    orch.fakes.plan_overrides.update(
        {"review_policy": "auto-confident", "auto_approve": [CONFIDENT], "notify": True}
    )
    orch.fakes.llm_script = [Reply(confidence=0.95)]
    handle = await orch.start(review="always")

    result = await finished(handle)

    assert result.state == "completed"
    approval = entry_for(result.history, "approve")
    assert (approval.rule, approval.reviewer, approval.detail, approval.review_round) == (
        "confident",
        None,
        "approved by rule confident",
        1,
    )
    assert [e.event for e in result.history[-3:]] == ["needs_review", "approve", "embedded"]
    assert orch.fakes.notices == []
    await orch.check_finished(handle, result)


async def test_a_reedit_is_answered_by_the_result_the_run_completes_with(
    orch: Orchestration,
) -> None:
    """A reedit whose next reply needs no review (review ``auto``): the run completes without
    another round, and the reedit is kept with that reply as the one it led to."""
    handle = await orch.awaiting_review(
        Reply(content="v1", needs_review=True), Reply(content="v2", needs_review=False)
    )
    await submit(handle, "reedit", "ann", "shorter")
    result: PipelineResult = await finished(handle)

    assert result.state == "completed"
    kept = [(c.kind, c.before, c.after, c.answered) for c in result.corrections]
    assert kept == [("reedit", "v1", "v2", True)]


async def test_reedits_are_kept_as_data_with_the_reply_before_and_after(
    orch: Orchestration,
) -> None:
    """Two reedits, then an approval: the result carries both reedits with the reviewer, the
    round, the feedback, the reply each sent back and the one the model gave next, and the
    pipeline's version; the approval is no correction."""
    handle = await orch.awaiting_review(
        Reply(content="v1", needs_review=True),
        Reply(content="v2", needs_review=True),
        Reply(content="v3", needs_review=True),
    )
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        {"decision": "reedit", "reviewer": "ann", "feedback": "shorter"},
        result_type=RunStatus,
    )
    await orch.wait_for_state(handle, "await_review")
    while (await orch.status(handle)).review_round < 2:
        await orch.wait_for_state(handle, "await_review")
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        {"decision": "reedit", "reviewer": "bob", "feedback": "cite it", "review_round": 2},
        result_type=RunStatus,
    )
    while (await orch.status(handle)).review_round < 3:
        await orch.wait_for_state(handle, "await_review")
    await submit(handle, "approve", "ann")
    result: PipelineResult = await finished(handle)

    kept = [
        (c.kind, c.reviewer, c.review_round, c.feedback, c.before, c.after, c.answered)
        for c in result.corrections
    ]
    assert kept == [
        ("reedit", "ann", 1, "shorter", "v1", "v2", True),
        ("reedit", "bob", 2, "cite it", "v2", "v3", True),
    ]
    assert {c.pipeline for c in result.corrections} == {"llm"}
    assert all(c.pipeline_version.startswith("graph-") for c in result.corrections)
