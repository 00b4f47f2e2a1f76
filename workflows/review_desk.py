"""Reviews and operator actions: the ``review`` signal and the ``submit_review`` update (the
contract's names), the ``expire_review`` and ``dead_letter`` operator signals, and the wait for
a decision in ``await_review`` and ``escalate``.

A signal cannot be refused, so one that the rules refuse (``workflows.review_rules``) is
recorded as a ``review_refused`` note and not acted on; the update's validator refuses the same
reviews with an error the caller sees.

Workflow code, passed through the sandbox like ``workflows.run_record`` (see there).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow

import workflows.continuation as continuation
import workflows.contract as contract
import workflows.review_rules as review_rules
from workflows.graph import REVIEW_STATES, Event
from workflows.payloads import (
    OperatorRequest,
    ReviewDecision,
    RunStatus,
    describe_validation_error,
)
from workflows.run_record import RunRecord


class ReviewDesk(RunRecord):
    """Where reviews and operator actions arrive, and where a review state waits for them."""

    _pending_review: ReviewDecision | None
    _reviews_applied: int
    # Operator actions (expire_review: one wait; dead_letter: every wait until dead_letter).
    _forced_timeout: str | None
    _dead_letter_requested: str | None

    @workflow.signal(name=contract.SIGNAL_REVIEW)
    def review(self, raw_decision: Any) -> None:
        # A signal cannot be refused, so one the rules refuse (see workflows.review_rules) is
        # recorded as a review_refused note, with the state unchanged, and not acted on; callers
        # that need an answer use the submit_review update instead.
        try:
            decision = ReviewDecision.model_validate(raw_decision)
        except ValidationError as err:
            reviewer = raw_decision.get("reviewer") if isinstance(raw_decision, dict) else None
            self._refuse_signal(
                f"invalid review: {describe_validation_error(err)}",
                reviewer if isinstance(reviewer, str) else None,
            )
            return
        problem = self._review_refusal(decision)
        if problem:
            self._refuse_signal(problem, decision.reviewer)
            return
        self._pending_review = decision

    @workflow.signal(name=contract.SIGNAL_EXPIRE_REVIEW)
    def expire_review(self, raw_request: Any = None) -> None:
        """Operator action: end the current review wait now, exactly as its timeout would."""
        reason = self._operator_reason(raw_request, "review timeout forced")
        if reason:
            self._forced_timeout = reason

    @workflow.signal(name=contract.SIGNAL_DEAD_LETTER)
    def request_dead_letter(self, raw_request: Any = None) -> None:
        """Operator action: time out every review wait now, so the run takes its normal
        escalate -> dead_letter path (and sends its dead-letter message)."""
        reason = self._operator_reason(raw_request, "dead-lettered")
        if reason:
            self._dead_letter_requested = reason

    def _operator_reason(self, raw_request: Any, action: str) -> str | None:
        # Signals cannot be refused: an invalid or untimely one is logged and dropped.
        try:
            request = OperatorRequest.model_validate(raw_request or {})
        except ValidationError as err:
            workflow.logger.warning("ignored %s: %s", action, describe_validation_error(err))
            return None
        if self._state not in REVIEW_STATES:
            workflow.logger.warning(
                "ignored %s: run is not awaiting review (state: %s)", action, self._state.value
            )
            return None
        reason = f"{action} by {request.operator}"
        return f"{reason}: {request.reason}" if request.reason else reason

    def _take_forced_reason(self) -> str | None:
        reason = self._forced_timeout or self._dead_letter_requested
        self._forced_timeout = None
        return reason

    @workflow.update(name=contract.UPDATE_SUBMIT_REVIEW)
    async def submit_review(self, raw_decision: Any) -> RunStatus:
        decision = ReviewDecision.model_validate(raw_decision)
        applied_before = self._reviews_applied
        self._pending_review = decision
        await workflow.wait_condition(lambda: self._reviews_applied > applied_before)
        return self._status()

    @submit_review.validator
    def _validate_review(self, raw_decision: Any) -> None:
        try:
            decision = ReviewDecision.model_validate(raw_decision)
        except ValidationError as err:
            raise ValueError(f"invalid review: {describe_validation_error(err)}") from None
        problem = self._review_refusal(decision)
        if problem:
            raise ValueError(problem)

    def _review_refusal(self, decision: ReviewDecision) -> str | None:
        return review_rules.refusal(
            workflow_id=workflow.info().workflow_id,
            state=self._state,
            decision=decision,
            review_round=self._review_round,
            pending=self._pending_review,
            plan=self._plan,
        )

    def _refuse_signal(self, reason: str, reviewer: str | None) -> None:
        workflow.logger.warning("review signal refused: %s", reason)
        self._history.append(
            review_rules.refusal_note(
                state=self._state,
                at=workflow.now(),
                attempt=self._attempts,
                reason=reason,
                reviewer=reviewer,
                review_round=self._review_round,
            )
        )

    async def _wait_for_review(self, timeout_s: float, summary: str) -> ReviewDecision | None:
        try:
            await workflow.wait_condition(
                lambda: (
                    self._pending_review is not None
                    or self._forced_timeout is not None
                    or self._dead_letter_requested is not None
                ),
                timeout=timedelta(seconds=timeout_s),
                timeout_summary=summary,
            )
        except TimeoutError:
            return None
        decision = self._pending_review
        if decision is None:
            return None  # an operator forced the timeout (expire_review or dead_letter)
        self._forced_timeout = None  # a review that came with it wins
        return decision

    def _apply_review(self, decision: ReviewDecision) -> None:
        if decision.decision == "reedit":
            self._feedback.append(decision.feedback or "Please revise the answer.")
            self._feedback = continuation.bounded_feedback(self._feedback)
            self._rounds_this_run += 1
        elif decision.decision == "reject":
            self._last_error = f"rejected by {decision.reviewer}"
        self._pending_review = None
        self._reviews_applied += 1
        self._move(
            Event(decision.decision),
            detail=review_rules.decision_detail(decision),
            reviewer=decision.reviewer,
            feedback=decision.feedback,
            review_round=self._review_round,
        )
