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

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Final, NoReturn

from temporalio import workflow

import workflows.engine.commands as commands
import workflows.engine.continuation as continuation
import workflows.engine.observability as observability
import workflows.engine.policies as policies
import workflows.engine.record as record
from workflows.engine.graph import Event, Graph
from workflows.engine.pipeline import Context
from workflows.payloads import (
    NOTE_REVIEW_VOTE,
    Correction,
    LlmCallResult,
    OperatorRequest,
    ReviewDecision,
    ReviewProgress,
    Revocation,
    RunCore,
    RunPolicy,
    Vote,
    changed_fields,
)


def enter(
    ctx: Context[Any, Any],
    event: str,
    *,
    detail: str,
    answer: LlmCallResult | None = None,
    prompt: str | None = None,
) -> None:
    """Move on ``event`` into a review state: a new review round (``Context.enter_review``)."""
    ctx.enter_review(event, detail=detail, answer=answer, prompt=prompt)


def escalate(ctx: Context[Any, Any]) -> None:
    """The review wait timed out (or an operator ended it): escalate, with the escalation's
    deadline from the plan, and tell reviewers (unless an operator asked for the dead letter,
    which is no news to them)."""
    run, plan = ctx.run, ctx.policy
    detail = take_forced_reason(run) or f"no review in {plan.review_timeout_s:g}s"
    run.review_deadline = workflow.now() + timedelta(seconds=plan.escalation_timeout_s)
    escalation = escalation_detail(plan)
    ctx.move(
        Event.REVIEW_TIMEOUT,
        detail=f"{detail}; {escalation}" if escalation else detail,
        group=escalation_group(plan),
    )
    if run.dead_letter_requested is None:
        commands.notify_reviewers(run, plan, "escalated")


async def escalation_timed_out(ctx: Context[Any, Any]) -> None:
    """The escalation timed out (or an operator ended it): the run is dead-lettered."""
    run, plan = ctx.run, ctx.policy
    reason = take_forced_reason(run)
    detail = ctx.set_error(reason or f"no review after escalation ({plan.escalation_timeout_s:g}s)")
    run.review_deadline = None
    refused = await ctx.dead_letter(run.state)
    ctx.move(Event.ESCALATION_TIMEOUT, detail=detail + refused)


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
        # A reedit without feedback is refused now; runs recorded before
        # inbound.SIGNAL_SCREENED_PATCH took one by signal, and replay so.
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
        detail=decision_detail(decision, tally, before=ctx.subject().value),
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


def decision_detail(
    decision: ReviewDecision,
    tally: ReviewProgress | None = None,
    *,
    before: str | dict[str, Any] | None = None,
) -> str:
    """The one-line detail of an accepted decision: ``approve by alice: looks good``; under a
    review policy with the tally it completes (``approve by bob (2 of 2 approvals: alice,
    bob)``); with corrected fields, those that differ from ``before``, the result under review
    (``approve by ann with 1 changed field (total)``)."""
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
        detail += changes_text(changed_fields(before, decision.fields))
    if decision.feedback:
        detail += f": {decision.feedback}"
    return detail


# A correction's detail names at most this many changed fields (it is one line).
MAX_NAMED_CHANGES: Final = 5


def changes_text(changed: list[str]) -> str:
    """`` with 2 changed fields (total, tax)``: how many fields a correction changed, naming
    the first few."""
    if not changed:
        return " with no field changed"
    names = ", ".join(changed[:MAX_NAMED_CHANGES])
    more = len(changed) - MAX_NAMED_CHANGES
    if more > 0:
        names += f" and {more} more"
    noun = "field" if len(changed) == 1 else "fields"
    return f" with {len(changed)} changed {noun} ({names})"


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
