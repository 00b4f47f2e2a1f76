"""Reviewer authority: who may decide, when, and only once per review round."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from aiorch.reviews import ReviewOutcome, decision_for_round, update_id
from workflows.graph import State
from workflows.payloads import (
    MAX_FEEDBACK_CHARS,
    NOTE_REVIEW_REFUSED,
    HistoryEntry,
    PromptPlan,
    ReviewDecision,
    RunOptions,
    RunStatus,
)
from workflows.review_rules import MAX_REFUSAL_DETAIL_CHARS, refusal, refusal_note

RUN = "0123456789abcdef01234567"
AT = datetime(2026, 1, 1, tzinfo=UTC)


def plan(allowed: list[str] | None = None, max_feedback: int = 100) -> PromptPlan:
    return PromptPlan(
        system_prompt="s",
        user_prompt="u",
        review_timeout_s=1,
        escalation_timeout_s=1,
        llm_max_attempts=1,
        model="m",
        allowed_reviewers=allowed,
        max_feedback_chars=max_feedback,
    )


def decide(reviewer: str = "alice", **fields: object) -> ReviewDecision:
    return ReviewDecision.model_validate({"decision": "approve", "reviewer": reviewer, **fields})


def why(
    decision: ReviewDecision,
    *,
    state: State = State.AWAIT_REVIEW,
    review_round: int = 1,
    pending: ReviewDecision | None = None,
    allowed: list[str] | None = None,
) -> str | None:
    return refusal(
        workflow_id=RUN,
        state=state,
        decision=decision,
        review_round=review_round,
        pending=pending,
        plan=plan(allowed),
    )


def test_allowed_reviewer_in_a_review_state_is_accepted() -> None:
    """In await_review and escalate, an allowed reviewer's first decision is taken."""
    assert why(decide("alice"), allowed=["alice", "bob"]) is None
    assert why(decide("bob"), state=State.ESCALATE, allowed=["alice", "bob"]) is None
    assert why(decide("anyone")) is None  # no list: anyone may review


def test_reviewer_outside_the_set_is_refused_by_name_and_run() -> None:
    """The refusal names the reviewer and the run (and not who else is allowed)."""
    message = why(decide("mallory"), allowed=["alice"])
    assert message == f"reviewer 'mallory' is not allowed to review run {RUN}"


def test_not_awaiting_review_keeps_the_contract_message() -> None:
    """Outside a review state the message is the contract's one, naming the state."""
    assert why(decide(), state=State.INVOKE_LLM) == "run is not awaiting review (state: invoke_llm)"


def test_second_decision_for_a_round_is_refused() -> None:
    """While a decision for the round is pending, another one (any reviewer) is refused."""
    message = why(decide("bob"), pending=decide("alice"))
    assert message is not None
    assert "already has a decision (approve by alice)" in message
    assert "applied once" in message


def test_decision_for_another_round_is_refused() -> None:
    """A decision naming a round that is over (or not begun) never lands on the current one."""
    assert why(decide(review_round=2), review_round=2) is None
    message = why(decide(review_round=1), review_round=2)
    assert message == f"review for round 1 refused: run {RUN} is at review round 2"


def test_feedback_over_the_runs_limit_is_refused() -> None:
    """Feedback longer than the run's MAX_FEEDBACK_CHARS is refused with both sizes."""
    message = why(decide(feedback="x" * 101))
    assert message == f"feedback is 101 characters; run {RUN} accepts at most 100"


def test_contract_caps_feedback_and_reviewer_names() -> None:
    """The payload itself caps feedback and reviewer names, whatever the run allows."""
    with pytest.raises(ValidationError, match="feedback"):
        decide(feedback="x" * (MAX_FEEDBACK_CHARS + 1))
    with pytest.raises(ValidationError, match="reviewer"):
        decide("r" * 201)
    with pytest.raises(ValidationError, match="allowed_reviewers"):
        RunOptions(allowed_reviewers=[])
    with pytest.raises(ValidationError, match="allowed_reviewers"):
        RunOptions(allowed_reviewers=[" "])


def test_refusal_note_is_not_a_transition_and_is_bounded() -> None:
    """A refused signal becomes a review_refused note: same state before and after, the
    reason in detail (cut to a bound, since the payload is untrusted)."""
    note = refusal_note(
        state=State.AWAIT_REVIEW,
        at=AT,
        attempt=2,
        reason="x" * 5000,
        reviewer="mallory",
        review_round=3,
    )
    assert note.event == NOTE_REVIEW_REFUSED
    assert note.from_state == note.to_state == "await_review"
    assert (note.reviewer, note.review_round, note.attempt) == ("mallory", 3, 2)
    assert note.detail is not None and len(note.detail) <= MAX_REFUSAL_DETAIL_CHARS
    assert note.detail.startswith("review from 'mallory' refused: ")


def test_update_id_is_per_run_round_and_reviewer() -> None:
    """Re-sending the same reviewer's review of the same round reuses the update id."""
    assert update_id(RUN, 2, "alice") == update_id(RUN, 2, "alice")
    assert (
        len({update_id(RUN, 2, "alice"), update_id(RUN, 3, "alice"), update_id(RUN, 2, "bob")}) == 3
    )


def test_outcome_says_when_the_round_was_decided_by_someone_else() -> None:
    """When the round's recorded decision differs from the one sent, the CLI says so."""
    recorded = HistoryEntry(
        from_state="await_review",
        to_state="generate_embedding",
        event="approve",
        at=AT,
        reviewer="alice",
        review_round=1,
    )
    status = RunStatus(state="generate_embedding", status="Processing", progress=85, attempts=1)
    assert decision_for_round([recorded], 1) == recorded
    assert decision_for_round([recorded], 2) is None
    mine = ReviewOutcome(decide("alice", review_round=1), status, recorded)
    theirs = ReviewOutcome(
        ReviewDecision(decision="reject", reviewer="bob", review_round=1), status, recorded
    )
    assert mine.applied_as_sent and "approve accepted (round 1)" in mine.describe(RUN)
    assert not theirs.applied_as_sent
    assert "round 1 was already decided (approve by alice)" in theirs.describe(RUN)
