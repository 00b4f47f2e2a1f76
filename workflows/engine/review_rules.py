"""Whether a review decision may be taken now: the rules the ``submit_review`` update's
validator and the ``review`` signal share (``ReviewRules``, the review inbox's
``DecisionRules``), as functions over a run's graph and ``RunCore``.

A review is taken only while the run awaits one, for the round it is at, once per round, from a
reviewer the run's plan allows (and its review policy's current stage) who is not the run's
requester, with feedback within the limit (and some, for a reedit), and, when the operator
turned reviewer authentication on, with a token that proves who sent it
(``workflows.engine.identity``). The update's validator refuses anything else with the reason;
the signal counts the refusal (``RunCore.reviews_refused`` and ``last_refusal``), never storing
refusals one by one.

Workflow code, passed through the sandbox; deterministic (``now`` is workflow time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from temporalio import workflow

import workflows.engine.identity as identity
import workflows.engine.observability as observability
import workflows.engine.policies as policies
import workflows.engine.record as record
import workflows.engine.reviews as reviews
from workflows.engine.graph import Event, Graph
from workflows.engine.inbound import NOT_STARTED
from workflows.engine.pipeline import Context
from workflows.payloads import REEDIT_NEEDS_FEEDBACK, ReviewDecision, RunCore, lacks_feedback

# The refusal code of a review sent while the run awaits none (also when the run never
# started): a metric label and part of the contract, so it never changes.
NOT_AWAITING_REVIEW: Final = "not_awaiting_review"


@dataclass(frozen=True)
class Refusal:
    """Why a review was refused: a stable ``code`` (a metric label) and a sentence."""

    code: str
    reason: str


@dataclass(frozen=True)
class Asked:
    """Which run judges a decision, and when: its workflow id, workflow time, its chain's first
    run id (which a token must name where the plan says so) and a digest of what the run shows
    a reviewer (which a token that names one must match)."""

    workflow_id: str
    now: datetime
    chain_id: str | None = None
    digest: Callable[[], str] | None = None


def refusal(
    graph: Graph,
    run: RunCore[Any],
    decision: ReviewDecision,
    pending: ReviewDecision | None,
    asked: Asked,
) -> Refusal | None:
    """Why ``decision`` may not be applied now, given the decision ``pending``, or None when
    it may."""
    workflow_id = asked.workflow_id
    return (
        _untimely(graph, run, decision, workflow_id, pending)
        or _unauthorised(graph, run, decision, workflow_id)
        or _ill_formed(graph, run, decision, workflow_id)
        or _unproven(run, decision, asked)
    )


def _untimely(
    graph: Graph,
    run: RunCore[Any],
    decision: ReviewDecision,
    workflow_id: str,
    pending: ReviewDecision | None,
) -> Refusal | None:
    """Refused for when it came: no review awaited, another round, or the round decided."""
    if run.state not in graph.review_states:
        return Refusal(NOT_AWAITING_REVIEW, f"run is not awaiting review (state: {run.state})")
    if decision.review_round is not None and decision.review_round != run.review_round:
        return Refusal(
            "wrong_round",
            f"review for round {decision.review_round} refused: run {workflow_id} is at "
            f"review round {run.review_round}",
        )
    if pending is not None:
        return Refusal(
            "already_decided",
            f"review round {run.review_round} of run {workflow_id} already has a decision; "
            "a decision is applied once",
        )
    if run.plan is None:
        return Refusal(NOT_AWAITING_REVIEW, "run has no plan yet")
    return None


def _unauthorised(
    graph: Graph, run: RunCore[Any], decision: ReviewDecision, workflow_id: str
) -> Refusal | None:
    """Refused for who sent it: revoked, not allowed, the requester, outside the stage's
    group, or a reviewer who already voted this round."""
    plan, reviewer = run.plan, decision.reviewer[:80]
    assert plan is not None
    if decision.reviewer in run.revoked_reviewers:
        return Refusal(
            "reviewer_revoked", f"reviewer {reviewer!r} was revoked for run {workflow_id}"
        )
    if plan.allowed_reviewers is not None and decision.reviewer not in plan.allowed_reviewers:
        return Refusal(
            "reviewer_not_allowed",
            f"reviewer {reviewer!r} is not allowed to review run {workflow_id}",
        )
    if plan.requested_by is not None and decision.reviewer == plan.requested_by:
        return Refusal("own_run", f"{reviewer!r} requested this run")
    current = policies.stage(plan, policies.stage_index(graph, run.state))
    if not policies.eligible(plan, current, decision.reviewer):
        return Refusal(
            "not_in_group",
            f"reviewer {reviewer!r} is not in group {current.group}, which decides run "
            f"{workflow_id} now",
        )
    earlier = next((v for v in run.votes if v.reviewer == decision.reviewer), None)
    if earlier is not None:
        return Refusal(
            "already_voted",
            f"{reviewer!r} already voted {earlier.decision} in round {run.review_round} of "
            f"run {workflow_id}; a reviewer counts once a round",
        )
    return None


def _ill_formed(
    graph: Graph, run: RunCore[Any], decision: ReviewDecision, workflow_id: str
) -> Refusal | None:
    """Refused for what it says: feedback past the plan's limit, or corrected fields the run
    does not take (or that do not come with an approval)."""
    plan = run.plan
    assert plan is not None
    if decision.feedback and len(decision.feedback) > plan.max_feedback_chars:
        return Refusal(
            "feedback_too_long",
            f"feedback is {len(decision.feedback)} characters; run {workflow_id} accepts at "
            f"most {plan.max_feedback_chars}",
        )
    if decision.fields is not None and (
        decision.decision != "approve" or graph.target_of(run.state, Event.CORRECT) is None
    ):
        return Refusal(
            "no_corrections",
            f"run {workflow_id} takes no corrected fields"
            if decision.decision == "approve"
            else "corrected fields come with an approval only",
        )
    return None


def _unproven(run: RunCore[Any], decision: ReviewDecision, asked: Asked) -> Refusal | None:
    """Refused for its proof, when the plan has reviewer keys: no valid token for this round
    (and chain, and content, where the plan says so), or a key that already voted."""
    plan = run.plan
    assert plan is not None
    if plan.review_keys:
        ttl = plan.review_token_ttl_s
        expected = identity.Expected(
            workflow_id=asked.workflow_id,
            review_round=run.review_round,
            now=asked.now,
            run_id=asked.chain_id if plan.review_token_binds_run else None,
            digest=asked.digest,
            max_ttl=timedelta(seconds=ttl) if ttl is not None else None,
        )
        keys = [key for key in plan.review_keys if key.key_id not in run.revoked_keys]
        problem = identity.review_token_problem(decision, keys=keys, expected=expected)
        if problem is not None:
            return Refusal("unauthenticated", problem)
    same_key = policies.same_voter(plan, run, decision)
    if same_key is not None:
        return Refusal(
            "already_voted",
            f"the key that signed for {decision.reviewer[:80]!r} already voted "
            f"{same_key.decision} for {same_key.reviewer[:80]!r} in round {run.review_round} of "
            f"run {asked.workflow_id}; a key counts once a round",
        )
    return None


def content_refusal(decision: ReviewDecision) -> Refusal | None:
    """Why ``decision`` may never be applied, whatever the run's state, or None: a reedit with
    no feedback (``workflows.payloads.review_rules``, which the command line and the inbox
    apply before sending).

    The ``DecisionInbox``'s ``screen``: the update's validator refuses such a decision; a
    ``review`` signal, which cannot be refused to its sender, is counted as refused
    (``inbound.SIGNAL_SCREENED_PATCH``) and the run does not act on it."""
    if lacks_feedback(decision.decision, decision.feedback):
        return Refusal("feedback_missing", REEDIT_NEEDS_FEEDBACK)
    return None


def invalid(reason: str) -> Refusal:
    """The refusal of a review payload that does not even decode or validate."""
    return Refusal("invalid_payload", f"invalid review: {reason}")


def count_refusal(run: RunCore[Any], refused: Refusal) -> None:
    """A refused review signal is counted, never stored: the run's state stays bounded."""
    run.reviews_refused += 1
    run.last_refusal = record.bounded_text(refused.reason, record.MAX_REFUSAL_CHARS)


class ReviewRules:
    """The review inbox's rules (``inbound.DecisionRules``) for the run ``context`` returns
    (None: the run never started, its input refused, so every review is refused and counted
    nowhere)."""

    def __init__(self, context: Callable[[], Context[Any, Any] | None]) -> None:
        self._context = context

    def refusal(self, decision: ReviewDecision, pending: ReviewDecision | None) -> Refusal | None:
        """Why ``decision`` may not be applied now (`refusal`), against the run's own ids,
        workflow time and what the run shows a reviewer."""
        ctx = self._context()
        if ctx is None:
            return Refusal(NOT_AWAITING_REVIEW, NOT_STARTED)
        info, pipeline = workflow.info(), ctx.pipeline

        def digest() -> str:
            assert pipeline is not None
            return pipeline.review_view(ctx).digest()

        asked = Asked(
            info.workflow_id,
            workflow.now(),
            chain_id=info.first_execution_run_id,
            digest=digest if pipeline is not None else None,
        )
        return refusal(ctx.graph, ctx.run, decision, pending, asked)

    def invalid(self, problem: str) -> Refusal:
        """The refusal of a review that does not decode (`invalid`)."""
        return invalid(problem)

    def count(self, refused: Refusal) -> None:
        """Count a refused review signal on the run (when it started) and in the metrics."""
        ctx = self._context()
        if ctx is not None:
            count_refusal(ctx.run, refused)
        observability.count_refused_review(refused.code)

    def reason(self, refused: Refusal) -> str:
        """The refusal's sentence, for the update's caller."""
        return refused.reason

    def settle(self, decision: ReviewDecision) -> bool:
        """Count ``decision`` as a vote short of its quorum (``reviews.count_vote``); True when
        it was, so the run does not move."""
        ctx = self._context()
        return ctx is not None and reviews.count_vote(ctx.graph, ctx.run, decision)
