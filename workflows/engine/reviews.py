"""Reviews and operator actions, as functions over a run's graph and ``RunCore``: one set of
rules for the ``submit_review`` update and the ``review`` signal, and how an accepted decision
moves the run.

A review is taken only while the run awaits one (a review state: ``await_review`` or
``escalate``), for the round it is at, once per round, from a reviewer the run's plan allows
(the operator's ``ALLOWED_REVIEWERS``, possibly narrowed by the request) who is not the run's
requester, with feedback within the limit, and, when the operator turned reviewer authentication
on, with a token that proves who sent it (``workflows.engine.identity``). The update's validator
refuses anything else with the reason (nothing enters history); the signal, which cannot be
refused, counts the refusal (``RunCore.reviews_refused`` and ``last_refusal``) and does not act
on it. Refusals are never stored one by one, so a flood of junk signals cannot grow the run.

A *review round* is one result waiting for a decision: it starts when the run enters a review
state and ends with the decision (an escalation stays in the same round). A decision approves,
asks for another try with feedback (reedit), rejects, or, where the pipeline takes them,
approves with corrected fields (``ReviewDecision.fields``: the ``correct`` event).

Under a review policy (``workflows.engine.policies``) the stage decides who may review (its
group's members), and an approval or a rejection short of its quorum is a *vote*: counted
(``count_vote``: a ``review_vote`` note in the history, the tally in ``status``) without moving
the run, one per reviewer a round (a second is refused). An auto-approve rule that matches the
result approves it as the round begins (``enter``), with no reviewer.

Every reedit and every correction is also kept as data (``RunCore.corrections``): the
reviewer, the round, the pipeline's version, the feedback, and the result before and after.

Operator actions (``expire_review``, ``dead_letter`` signals) end review waits early; they have
the power of a cancel, which Temporal's namespace permissions govern (docs/security.md).

Workflow code, passed through the sandbox; deterministic (``now`` is workflow time).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, NoReturn

from temporalio import workflow

import workflows.engine.commands as commands
import workflows.engine.continuation as continuation
import workflows.engine.identity as identity
import workflows.engine.observability as observability
import workflows.engine.policies as policies
import workflows.engine.record as record
from workflows.engine.graph import Event, Graph
from workflows.engine.pipeline import Context
from workflows.payloads import (
    NOTE_REVIEW_VOTE,
    Correction,
    FactValue,
    LlmCallResult,
    OperatorRequest,
    ReviewDecision,
    ReviewProgress,
    Revocation,
    RunCore,
    RunPolicy,
    Vote,
)

MAX_REFUSAL_CHARS = 300


@dataclass(frozen=True)
class Refusal:
    """Why a review was refused: a stable ``code`` (a metric label) and a sentence."""

    code: str
    reason: str


def refusal(
    graph: Graph,
    run: RunCore[Any],
    decision: ReviewDecision,
    *,
    workflow_id: str,
    pending: ReviewDecision | None,
    now: datetime,
    chain_id: str | None = None,
    digest: Callable[[], str] | None = None,
) -> Refusal | None:
    """Why ``decision`` may not be applied now, or None when it may (``chain_id``: the run
    chain's first run id, which a token must name where the plan says so; ``digest``: of what
    the run shows a reviewer, which a token that names one must match)."""
    if run.state not in graph.review_states:
        return Refusal("not_awaiting_review", f"run is not awaiting review (state: {run.state})")
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
    plan = run.plan
    if plan is None:
        return Refusal("not_awaiting_review", "run has no plan yet")
    if decision.reviewer in run.revoked_reviewers:
        return Refusal(
            "reviewer_revoked",
            f"reviewer {decision.reviewer[:80]!r} was revoked for run {workflow_id}",
        )
    if plan.allowed_reviewers is not None and decision.reviewer not in plan.allowed_reviewers:
        return Refusal(
            "reviewer_not_allowed",
            f"reviewer {decision.reviewer[:80]!r} is not allowed to review run {workflow_id}",
        )
    if plan.requested_by is not None and decision.reviewer == plan.requested_by:
        return Refusal("own_run", f"{decision.reviewer[:80]!r} requested this run")
    current = policies.stage(plan, policies.stage_index(graph, run.state))
    if not policies.eligible(plan, current, decision.reviewer):
        return Refusal(
            "not_in_group",
            f"reviewer {decision.reviewer[:80]!r} is not in group {current.group}, which "
            f"decides run {workflow_id} now",
        )
    earlier = next((v for v in run.votes if v.reviewer == decision.reviewer), None)
    if earlier is not None:
        return Refusal(
            "already_voted",
            f"{decision.reviewer[:80]!r} already voted {earlier.decision} in round "
            f"{run.review_round} of run {workflow_id}; a reviewer counts once a round",
        )
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
    if plan.review_keys:
        ttl = plan.review_token_ttl_s
        expected = identity.Expected(
            workflow_id=workflow_id,
            review_round=run.review_round,
            now=now,
            run_id=chain_id if plan.review_token_binds_run else None,
            digest=digest,
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
            f"run {workflow_id}; a key counts once a round",
        )
    return None


def enter(
    ctx: Context[Any, Any],
    event: str,
    *,
    detail: str,
    answer: LlmCallResult | None = None,
    prompt: str | None = None,
) -> None:
    """Move on ``event`` into a review state: a new review round, with its deadline from the
    plan, and the reviewers told when the plan says so (``answer``: the model's reply the move
    reports, answering ``prompt``). An auto-approve rule of the plan that the result matches
    approves it at once instead, with no reviewer told.

    The result under review is the one the run's open reedits asked for (their ``after``).
    """
    run, plan = ctx.run, ctx.policy
    subject = ctx.subject()
    record.complete_reedits(run, subject.value)
    run.review_round += 1
    run.votes = []
    run.round_started_at = workflow.now()
    run.review_deadline = workflow.now() + timedelta(seconds=plan.review_timeout_s)
    ctx.move(event, detail=detail, review_round=run.review_round, answer=answer, prompt=prompt)
    rule = policies.matching_rule(plan.auto_approve, facts(ctx, subject.facts))
    if rule is not None:
        run.review_deadline = None
        ctx.move(
            Event.APPROVE,
            detail=f"approved by rule {rule.name}",
            review_round=run.review_round,
            rule=rule.name,
        )
        observability.count_auto_approval(ctx.pipeline_name, rule.name)
        return
    commands.notify_reviewers(run, plan, "review_needed")


def facts(ctx: Context[Any, Any], given: Mapping[str, FactValue]) -> dict[str, FactValue]:
    """What auto-approve rules read: the pipeline's facts about its result, and the engine's
    (the round, the model attempts so far, the model)."""
    run = ctx.run
    return {
        **given,
        "review_round": run.review_round,
        "attempts": run.attempts,
        "model": run.model,
    }


def finished(ctx: Context[Any, Any]) -> None:
    """A run that completed: its last result is what its open reedits led to."""
    record.complete_reedits(ctx.run, ctx.subject().value)


def escalation_group(plan: RunPolicy) -> str | None:
    """The group the escalation stage hands the round to (None without a policy's group)."""
    return policies.stage(plan, 1).group if plan.review_stages else None


def escalation_detail(plan: RunPolicy) -> str | None:
    """What the escalation changes under a review policy (``escalated to group leads, 1
    approval``), for its history entry; None without a policy."""
    if not plan.review_stages:
        return None
    escalated = policies.stage(plan, 1)
    needed = f"{escalated.approvals} approval{'s' if escalated.approvals != 1 else ''}"
    to = f"group {escalated.group}" if escalated.group else "any allowed reviewer"
    return f"escalated to {to}, {needed}, until the deadline in {plan.escalation_timeout_s:g}s"


def invalid(reason: str) -> Refusal:
    """The refusal of a review payload that does not even decode or validate."""
    return Refusal("invalid_payload", f"invalid review: {reason}")


def count_refusal(run: RunCore[Any], refused: Refusal) -> None:
    """A refused review signal is counted, never stored: the run's state stays bounded."""
    run.reviews_refused += 1
    run.last_refusal = record.bounded_text(refused.reason, MAX_REFUSAL_CHARS)


def count_vote(graph: Graph, run: RunCore[Any], decision: ReviewDecision) -> bool:
    """Count ``decision`` (accepted by the rules) as a vote when it does not end the round: an
    approval or a rejection short of the stage's or the policy's quorum. True when it was
    counted (the run does not move); False when it decides the round (``apply`` moves it).

    Without a policy every decision decides, so a run planned before policies never votes.
    The rules refuse a second decision of a reviewer who voted (or of a key that voted under
    another of its names); one that passed validation before the first was counted (two
    updates validated in one workflow task, before their handlers run) is taken without
    effect: a reviewer, and a key, counts once a round.
    """
    if any(vote.reviewer == decision.reviewer for vote in run.votes):
        return True
    if run.plan is not None and policies.same_voter(run.plan, run, decision) is not None:
        return True
    current = policies.progress(graph, run)
    if current is None or policies.decides(current, event_of(decision), decision.reviewer):
        return False
    assert decision.decision in ("approve", "reject")
    run.votes.append(
        Vote(
            reviewer=decision.reviewer,
            decision=decision.decision,
            at=workflow.now(),
            key_id=policies.signing_key(decision),
        )
    )
    tally = policies.progress(graph, run)
    assert tally is not None
    record.note(
        run,
        NOTE_REVIEW_VOTE,
        f"{decision.decision} by {decision.reviewer}: {tally.describe()}",
        reviewer=decision.reviewer,
        group=tally.group,
        vote=decision.decision,
    )
    workflow.set_current_details(record.details(graph, run))
    return True


def event_of(decision: ReviewDecision) -> Event:
    """The graph event an accepted decision takes: its own, or ``correct`` for an approval
    with corrected fields."""
    if decision.fields is not None:
        return Event.CORRECT
    return Event(decision.decision)


def apply(ctx: Context[Any, Any], decision: ReviewDecision) -> None:
    """Move the run on an accepted decision that ends the round: approve (with corrected
    fields, kept in ``run.corrected`` for the state the correction leads to), reedit (with
    feedback) or reject. A reedit and a correction are also kept as data
    (``record_correction``)."""
    graph, run = ctx.graph, ctx.run
    tally = policies.progress(graph, run)
    if decision.decision == "reedit":
        run.feedback.append(decision.feedback or "Please revise the answer.")
        run.feedback = continuation.bounded_feedback(run.feedback)
    elif decision.decision == "reject":
        record.set_error(run, f"rejected by {decision.reviewer}")
    if decision.decision == "reedit" or decision.fields is not None:
        record_correction(ctx, decision)
    if run.round_started_at is not None:
        observability.record_approval_delay(
            ctx.pipeline_name,
            tally.group if tally is not None else None,
            event_of(decision),
            (workflow.now() - run.round_started_at).total_seconds(),
        )
    run.corrected = decision.fields
    run.review_deadline = None
    run.votes = []
    record.move(
        graph,
        run,
        event_of(decision),
        detail=decision_detail(decision, tally),
        reviewer=decision.reviewer,
        feedback=decision.feedback,
        review_round=run.review_round,
        group=tally.group if tally is not None else None,
    )


def record_correction(ctx: Context[Any, Any], decision: ReviewDecision) -> None:
    """Keep a reedit (the feedback, the result it sends back; the next result once there is
    one) or a correction (the fields before and after) as evaluation data."""
    run = ctx.run
    corrected = decision.fields is not None
    record.add_correction(
        run,
        Correction(
            kind="correct" if corrected else "reedit",
            reviewer=decision.reviewer,
            review_round=run.review_round,
            at=workflow.now(),
            pipeline=ctx.pipeline_name,
            pipeline_version=ctx.pipeline_version,
            feedback=decision.feedback,
            before=ctx.subject().value,
            after=decision.fields,
            answered=corrected,
        ),
    )


def decision_detail(decision: ReviewDecision, tally: ReviewProgress | None = None) -> str:
    """The one-line detail of an accepted decision: ``approve by alice: looks good``; under a
    review policy with the tally it completes (``approve by bob (2 of 2 approvals: alice,
    bob)``)."""
    detail = f"{decision.decision} by {decision.reviewer}"
    if tally is not None and tally.policy is not None and decision.fields is None:
        if decision.decision == "approve":
            voted, needed, noun = tally.approvals, tally.approvals_needed, "approvals"
        elif decision.decision == "reject":
            voted, needed, noun = tally.rejections, tally.rejections_needed, "rejections"
        else:
            voted, needed, noun = [], 0, ""
        if noun:
            names = [*voted, decision.reviewer]
            detail += f" ({len(names)} of {needed} {noun}: {', '.join(names)})"
    if decision.fields is not None:
        detail += f" with {len(decision.fields)} corrected field(s)"
    if decision.feedback:
        detail += f": {decision.feedback}"
    return detail


def operator_reason(
    graph: Graph, run: RunCore[Any], request: OperatorRequest, action: str
) -> str | None:
    """The reason an operator action records, or None when the run is not in a review state."""
    if run.state not in graph.review_states:
        return None
    reason = f"{action} by {request.operator}"
    return f"{reason}: {request.reason}" if request.reason else reason


MAX_REVOKED: Final = 100


def revoke(run: RunCore[Any], revocation: Revocation) -> None:
    """Stop accepting the revoked keys and reviewers (the newest ``MAX_REVOKED`` of each)."""
    run.revoked_keys = _merged(run.revoked_keys, revocation.key_ids)
    run.revoked_reviewers = _merged(run.revoked_reviewers, revocation.reviewers)


def _merged(kept: list[str], added: list[str]) -> list[str]:
    merged = [*kept, *(name for name in added if name not in kept)]
    return merged[-MAX_REVOKED:]


def take_forced_reason(run: RunCore[Any]) -> str | None:
    """The operator's reason for ending this review wait now, if any (consumed, except a
    dead-letter request, which ends every wait until the run is dead-lettered)."""
    reason = run.forced_timeout or run.dead_letter_requested
    run.forced_timeout = None
    return reason


async def wait_for_decision(
    run: RunCore[Any],
    pending: Callable[[], ReviewDecision | None],
    summary: str,
    hand_over: Callable[[str], Awaitable[NoReturn]],
) -> ReviewDecision | None:
    """The decision for this review wait (``pending`` reads it), or None when the wait timed
    out at ``run.review_deadline`` or an operator ended it.

    A flood of signals cannot make the wait outlive Temporal's history limits: when the history
    grows large (and no update is in flight, which must finish on this run) the run continues
    as new (``hand_over``), and the new run resumes this wait with the same deadline.
    """
    deadline = run.review_deadline or workflow.now()
    while True:
        remaining = deadline - workflow.now()
        if remaining <= timedelta(0):
            return None
        try:
            await workflow.wait_condition(
                lambda: (
                    pending() is not None
                    or run.forced_timeout is not None
                    or run.dead_letter_requested is not None
                    or (workflow.all_handlers_finished() and continuation.due())
                ),
                timeout=remaining,
                timeout_summary=summary,
            )
        except TimeoutError:
            return None
        decision = pending()
        if decision is not None:
            run.forced_timeout = None  # a review that came with it wins
            return decision
        if run.forced_timeout is not None or run.dead_letter_requested is not None:
            return None
        await hand_over("while waiting for review")
