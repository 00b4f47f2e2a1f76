"""Who may review a run, and when: one set of rules for the ``submit_review`` update and the
``review`` signal.

A review is taken only while the run awaits one (``await_review`` or ``escalate``), only from a
reviewer the run allows (``RunOptions.allowed_reviewers``, else the worker's
``ALLOWED_REVIEWERS``, else anyone), only once per review round, and only with feedback within
the run's limit. The update's validator refuses anything else (nothing enters history); the
signal, which cannot be refused, records a ``review_refused`` note instead of acting on it.

A *review round* is one LLM answer waiting for a decision: it starts when the run enters
``await_review`` and ends with the decision (an escalation stays in the same round). A decision
may name its round (``ReviewDecision.review_round``) so a re-sent decision can never land on a
later round. Pure functions of plain values: deterministic and unit-testable.
"""

from __future__ import annotations

from datetime import datetime

from workflows.graph import REVIEW_STATES, State
from workflows.payloads import NOTE_REVIEW_REFUSED, HistoryEntry, PromptPlan, ReviewDecision

# A refused signal's payload is untrusted: only this much of it reaches history.
MAX_REFUSAL_DETAIL_CHARS = 500


def refusal(
    *,
    workflow_id: str,
    state: State,
    decision: ReviewDecision,
    review_round: int,
    pending: ReviewDecision | None,
    plan: PromptPlan | None,
) -> str | None:
    """Why ``decision`` may not be applied now, or None when it may."""
    if state not in REVIEW_STATES:
        return f"run is not awaiting review (state: {state.value})"
    if decision.review_round is not None and decision.review_round != review_round:
        return (
            f"review for round {decision.review_round} refused: run {workflow_id} is at review "
            f"round {review_round}"
        )
    if pending is not None:
        return (
            f"review round {review_round} of run {workflow_id} already has a decision "
            f"({pending.decision} by {pending.reviewer}); a decision is applied once"
        )
    allowed = plan.allowed_reviewers if plan is not None else None
    if allowed is not None and decision.reviewer not in allowed:
        return f"reviewer {decision.reviewer!r} is not allowed to review run {workflow_id}"
    limit = plan.max_feedback_chars if plan is not None else None
    if limit is not None and decision.feedback and len(decision.feedback) > limit:
        return (
            f"feedback is {len(decision.feedback)} characters; run {workflow_id} accepts at "
            f"most {limit}"
        )
    return None


def refusal_note(
    *,
    state: State,
    at: datetime,
    attempt: int,
    reason: str,
    reviewer: str | None,
    review_round: int,
) -> HistoryEntry:
    """The history note for a review signal the run did not act on; the state is unchanged."""
    who = f"review from {reviewer!r}" if reviewer else "review"
    detail = f"{who} refused: {reason}"
    if len(detail) > MAX_REFUSAL_DETAIL_CHARS:
        detail = detail[: MAX_REFUSAL_DETAIL_CHARS - 6] + " [cut]"
    return HistoryEntry(
        from_state=state.value,
        to_state=state.value,
        event=NOTE_REVIEW_REFUSED,
        at=at,
        attempt=attempt,
        detail=detail,
        reviewer=reviewer[:200] if reviewer else None,
        review_round=review_round or None,
    )


def decision_detail(decision: ReviewDecision) -> str:
    """The one-line detail of an accepted decision: ``approve by alice: looks good``."""
    detail = f"{decision.decision} by {decision.reviewer}"
    if decision.feedback:
        detail += f": {decision.feedback}"
    return detail
