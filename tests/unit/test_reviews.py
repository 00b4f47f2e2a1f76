"""What counts as an applied review: the run's record of the round, not the update's answer;
and what an exported correction says changed."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, CancelledError

from aiorch.ops.corrections import exported, field_changes
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
