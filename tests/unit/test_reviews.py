"""What counts as an applied review: the run's record of the round, not the update's answer;
and what an exported correction says changed."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowExecution, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, CancelledError

from aiorch.ops.corrections import ended_query, example, exported, field_changes
from aiorch.ops.reviews import (
    ReviewOutcome,
    decision_for_round,
    for_each_round,
    refusal_reason,
    repeated_decision,
    update_id,
    vote_in_round,
)
from tests.support.builders import AT, history_entry
from workflows.payloads import (
    Correction,
    HistoryEntry,
    ReviewDecision,
    ReviewProgress,
    RunStatus,
)


def decided(event: str, reviewer: str, review_round: int) -> HistoryEntry:
    target = "invoke_llm" if event == "reedit" else "generate_embedding"
    return history_entry(
        "await_review", target, event, reviewer=reviewer, review_round=review_round
    )


def outcome(sent: ReviewDecision, history: list[HistoryEntry]) -> ReviewOutcome:
    status = RunStatus(state="invoke_llm", status="running", progress=40, attempts=1)
    assert sent.review_round is not None
    return ReviewOutcome(sent, status, decision_for_round(history, sent.review_round))


def test_applied_only_when_the_round_records_this_decision() -> None:
    """Applied means the round's recorded decision is this one (decision, reviewer, round);
    another reviewer's or another decision on that round, or no record at all, is not (and the
    line for the reviewer says the run shows none)."""
    approve = ReviewDecision(decision="approve", reviewer="ann", review_round=2)
    history = [decided("reedit", "ann", 1)]

    assert not outcome(approve, history).applied
    assert "shows no decision for it" in outcome(approve, history).describe("w1")
    assert outcome(approve, [*history, decided("approve", "ann", 2)]).applied
    assert not outcome(approve, [*history, decided("approve", "bob", 2)]).applied
    assert not outcome(approve, [*history, decided("reject", "ann", 2)]).applied


def test_an_approval_with_corrected_fields_is_applied_as_the_correct_event() -> None:
    """An approval carrying corrected fields is recorded as the ``correct`` event: that record
    is this approval applied (not "no decision for it"); a plain approval of the same round
    is not, nor is the corrected one when the round recorded a plain approval."""
    corrected = ReviewDecision(
        decision="approve", reviewer="ann", review_round=1, fields={"total": "22.20"}
    )
    plain = corrected.model_copy(update={"fields": None})
    correct = history_entry("await_review", "validate", "correct", reviewer="ann", review_round=1)

    assert outcome(corrected, [correct]).applied
    assert "approve accepted (round 1)" in outcome(corrected, [correct]).describe("w1")
    assert not outcome(plain, [correct]).applied
    assert not outcome(corrected, [decided("approve", "ann", 1)]).applied


def test_each_round_gets_its_own_decision_and_update_id() -> None:
    """A batch decision is rebuilt per run with that run's round, so the update id differs per
    round and a later round is never answered from an earlier round's cache."""
    decide = for_each_round(ReviewDecision(decision="approve", reviewer="cli"))

    first, second = decide("w1", 1), decide("w1", 2)

    assert (first.review_round, second.review_round) == (1, 2)
    assert update_id("w1", first.review_round, "cli") != update_id("w1", second.review_round, "cli")
    assert decide("w1", None).review_round is None


def test_a_repeat_is_the_latest_decision_sent_again_to_the_same_review() -> None:
    """A reedit sent again once the run waits in round 2 of the same review repeats round 1's;
    the same approval in a pipeline's next review state (another question), another feedback
    or another reviewer does not."""
    reedit = ReviewDecision(decision="reedit", reviewer="ann", feedback="Shorter")
    history = [
        history_entry(
            "await_review",
            "invoke_llm",
            "reedit",
            reviewer="ann",
            feedback="Shorter",
            review_round=1,
        )
    ]
    assert repeated_decision(history, reedit, 2, "await_review") == history[0]
    assert repeated_decision(history, reedit, 1, "await_review") is None
    other = reedit.model_copy(update={"feedback": "Longer"})
    assert repeated_decision(history, other, 2, "await_review") is None
    assert (
        repeated_decision(history, reedit.model_copy(update={"reviewer": "bob"}), 2, "await_review")
        is None
    )

    approve = ReviewDecision(decision="approve", reviewer="rita")
    two_reviews = [
        history_entry("urgent_review", "draft", "approve", reviewer="rita", review_round=1)
    ]
    assert repeated_decision(two_reviews, approve, 2, "reply_review") is None
    assert repeated_decision(two_reviews, approve, 2, "urgent_review") == two_reviews[0]


def test_a_vote_counted_under_a_quorum_is_applied_and_says_what_remains() -> None:
    """A vote the round counted (a review_vote note for this reviewer, decision and round) is
    applied and described with the tally; another reviewer's vote or another decision is not
    this one's; once the round is decided by someone else, the vote still counted."""
    approve = ReviewDecision(decision="approve", reviewer="ann", review_round=1)
    vote = history_entry(
        "await_review",
        "await_review",
        "review_vote",
        reviewer="ann",
        review_round=1,
        vote="approve",
    )
    tally = ReviewProgress(policy="p", approvals=["ann"], approvals_needed=2)
    status = RunStatus(
        state="await_review", status="WaitingForInput", progress=60, history=[vote], review=tally
    )
    counted = ReviewOutcome(approve, status, None, vote_in_round([vote], 1, "ann"))
    assert counted.applied and counted.applied_as_sent
    assert counted.describe("w1", where=False) == (
        "w1: approve counted (round 1): 1 of 2 approvals: ann; the round waits for more reviewers"
    )
    assert vote_in_round([vote], 1, "bob") is None and vote_in_round([vote], 2, "ann") is None
    reject = ReviewDecision(decision="reject", reviewer="ann", review_round=1)
    assert not ReviewOutcome(reject, status, None, vote).applied
    bob = decided("approve", "bob", 1)
    later = ReviewOutcome(approve, status, bob, vote_in_round([vote, bob], 1, "ann"))
    assert later.applied and "then decided" in later.describe("w1")


def test_an_approval_with_corrected_fields_is_applied_as_a_correction() -> None:
    """An approval carrying fields records the event ``correct``: that is this decision, applied;
    a plain approval of the same round by the same reviewer is not it."""
    fields = ReviewDecision(decision="approve", reviewer="ann", review_round=1, fields={"a": 1})
    corrected = history_entry("await_review", "validate", "correct", reviewer="ann", review_round=1)
    assert decision_for_round([corrected], 1) == corrected
    assert outcome(fields, [corrected]).applied
    plain = ReviewDecision(decision="approve", reviewer="ann", review_round=1)
    assert not outcome(plain, [corrected]).applied


def test_an_example_lists_the_fields_a_reviewer_changed() -> None:
    """Corrected fields become changes: each top-level field whose value differs, in the order
    the fields came; identical objects, or anything but two objects, change nothing."""
    before = {"total": "25.00", "vendor": "Acme", "tax": "1"}
    after = {"total": "22.20", "vendor": "Acme", "note": "fixed"}
    assert [(c.field, c.before, c.after) for c in field_changes(before, after)] == [
        ("total", "25.00", "22.20"),
        ("tax", "1", None),
        ("note", None, "fixed"),
    ]
    assert field_changes(before, dict(before)) == []
    assert field_changes("v1", "v2") == []


def listed_run(workflow_id: str, run_id: str) -> WorkflowExecution:
    """A run as a visibility listing gives it, with only its ids set."""
    fields: dict[str, Any] = {field.name: None for field in dataclasses.fields(WorkflowExecution)}
    return WorkflowExecution(**{**fields, "id": workflow_id, "run_id": run_id})


def correction(kind: str, **fields: Any) -> Correction:
    """A correction by ann in round 2 of a documents run (version v3), at ``AT``."""
    return Correction.model_validate(
        {
            "kind": kind,
            "reviewer": "ann",
            "review_round": 2,
            "at": AT,
            "pipeline": "documents",
            "pipeline_version": "v3",
            **fields,
        }
    )


def test_an_example_carries_the_correction_its_run_and_request() -> None:
    """An example of corrected fields holds the run's ids, the correction's reviewer, round,
    pipeline, time, feedback, before and after, whether it was answered or cut, the request the
    run was started with, and the fields that changed; its id names run, round, reviewer and
    kind."""
    made = correction(
        "correct",
        feedback="the total is wrong",
        before={"total": "25.00", "vendor": "Acme"},
        after={"total": "13.50", "vendor": "Acme"},
        answered=True,
        cut=True,
    )
    request = {"request_id": "r", "document": "INVOICE"}
    found = example(listed_run("wf-1", "run-1"), made, request)
    assert found.model_dump() == {
        "id": "wf-1:round-2:ann:correct",
        "kind": "correct",
        "workflow_id": "wf-1",
        "run_id": "run-1",
        "pipeline": "documents",
        "pipeline_version": "v3",
        "review_round": 2,
        "reviewer": "ann",
        "at": AT,
        "input": request,
        "feedback": "the total is wrong",
        "before": {"total": "25.00", "vendor": "Acme"},
        "after": {"total": "13.50", "vendor": "Acme"},
        "answered": True,
        "cut": True,
        "changes": [{"field": "total", "before": "25.00", "after": "13.50"}],
    }


def test_a_reedit_example_lists_no_field_changes() -> None:
    """A reedit's before and after are two results of the model, not a reviewer's edit: its
    example lists no changed fields even when both are objects that differ."""
    reedit = correction(
        "reedit", feedback="read the total again", before={"total": "1"}, after={"total": "2"}
    )
    found = example(listed_run("wf-1", "run-1"), reedit, None)
    assert found.id == "wf-1:round-2:ann:reedit"
    assert (found.before, found.after, found.changes) == ({"total": "1"}, {"total": "2"}, [])


def test_the_export_query_names_the_window_and_the_pipeline() -> None:
    """The runs listed are those of the named pipeline only (every pipeline's without one)
    that ended with a result from ``since``, and before ``until`` when it is given."""
    query = ended_query(AT, AT + timedelta(days=1), "documents")
    assert "WorkflowType IN ('DocumentPipeline')" in query
    assert "CloseTime >= '2026-01-01T00:00:00Z'" in query
    assert query.endswith("AND CloseTime < '2026-01-02T00:00:00Z'")
    open_ended = ended_query(AT, None, None)
    assert "'AiOrchestrator', 'DocumentPipeline'" in open_ended
    assert "CloseTime <" not in open_ended


def test_a_reedit_without_feedback_is_no_example() -> None:
    """The export takes the reedits with feedback and the corrections made in its window; a
    reedit a run took with no feedback (or only blanks) is left out, as is one made before
    the window."""

    def kept(kind: str, feedback: str | None, at_offset: int = 0) -> Correction:
        return Correction.model_validate(
            {
                "kind": kind,
                "reviewer": "ann",
                "review_round": 1,
                "at": AT + timedelta(minutes=at_offset),
                "pipeline": "llm",
                "pipeline_version": "v1",
                "feedback": feedback,
            }
        )

    useful = [kept("reedit", "shorter"), kept("correct", None)]
    useless = [kept("reedit", None), kept("reedit", " \n"), kept("reedit", "early", -10)]

    assert exported([*useless, *useful], AT, None) == useful


def test_a_refusal_reads_as_the_run_said_it_without_its_type_name() -> None:
    """The reason a run gives for refusing an update is its error's message: the type name it
    was raised with (what the error's text starts with) is left out."""
    refused = ApplicationError("round 2 is over", type="ReviewRefused", non_retryable=True)
    assert str(refused).startswith("ReviewRefused")
    assert refusal_reason(WorkflowUpdateFailedError(refused)) == "round 2 is over"


def test_a_refusal_that_is_no_application_error_reads_as_its_text() -> None:
    """An update that failed for another reason (cancelled, say) reads as that failure's text."""
    cancelled = CancelledError("the update was cancelled")
    assert refusal_reason(WorkflowUpdateFailedError(cancelled)) == "the update was cancelled"
