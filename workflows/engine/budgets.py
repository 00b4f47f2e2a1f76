"""Budget decisions, as functions over a run (``Context``): one set of rules for the
``decide_budget`` update and the ``budget_decision`` signal, and what a call that would cross a
budget does.

A run whose next LLM call would cross its cost ceiling or its tenant's daily budget
(``invoke_llm`` answers ``over_budget``, no call made) either waits in its budget state
(``await_budget``) for an
operator (``BUDGET_POLICY=wait``, until ``BUDGET_DECISION_TIMEOUT_S``) or is dead-lettered with
``BudgetExceeded`` at once (``fail``), to be redriven (``dlq redrive``) once the budget allows.
An operator approves the overspend (the run goes on, and no budget stops it again) or rejects it
(the run fails with ``BudgetExceeded``). A decision is taken only while the run waits for one,
once; the update's validator refuses anything else with the reason, the signal counts the
refusal (``budget_decisions_refused``, ``last_refusal``), as reviews are.

Deciding has the power of a cancel (or of spending money): Temporal's namespace permissions
govern who may send it (docs/security.md), and the operator's name is recorded in history.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

import workflows.engine.budget_tokens as budget_tokens
import workflows.engine.identity as identity
import workflows.engine.record as record
import workflows.errors as errors
from workflows.engine.graph import Event, Role
from workflows.engine.inbound import NOT_STARTED, DecisionInbox
from workflows.engine.pipeline import Context
from workflows.payloads import BudgetDecision, RunCore


def refusal(
    ctx: Context[Any, Any],
    decision: BudgetDecision,
    pending: BudgetDecision | None,
    *,
    workflow_id: str,
    chain_id: str,
    now: datetime,
) -> str | None:
    """Why a budget decision may not be applied now, or None when it may: only while the run
    waits for one, once, never by its requester, and, for runs planned with reviewer keys
    since budget decisions are signed, with a token signed for its operator and this run
    chain."""
    run = ctx.run
    if ctx.graph.info(run.state).role != Role.BUDGET:
        return f"run is not waiting for a budget decision (state: {run.state})"
    if pending is not None:
        return f"a decision by {pending.operator} is already being applied"
    plan = run.plan
    if plan is None or not plan.budget_decisions_signed:
        return None
    if plan.requested_by is not None and decision.operator == plan.requested_by:
        return f"{decision.operator[:80]!r} requested this run and may not decide its budget"
    if plan.review_keys:
        keys = [key for key in plan.review_keys if key.key_id not in run.revoked_keys]
        expected = identity.Expected(
            workflow_id=workflow_id, review_round=0, now=now, run_id=chain_id
        )
        return budget_tokens.budget_token_problem(decision, keys=keys, expected=expected)
    return None


def count_refusal(run: RunCore[Any], reason: str) -> None:
    """Count a refused ``budget_decision`` signal (never stored one by one)."""
    run.budget_decisions_refused += 1
    run.last_refusal = record.bounded_text(reason, record.MAX_REFUSAL_CHARS)


class BudgetRules:
    """The budget inbox's rules (``inbound.DecisionRules``) for the run ``context`` returns
    (None: the run never started, so every decision is refused and counted nowhere). A
    budget decision always moves the run: none settles without it."""

    def __init__(self, context: Callable[[], Context[Any, Any] | None]) -> None:
        self._context = context

    def refusal(self, decision: BudgetDecision, pending: BudgetDecision | None) -> str | None:
        """Why ``decision`` may not be applied now (`refusal`), against the run's own ids and
        workflow time."""
        ctx = self._context()
        if ctx is None:
            return NOT_STARTED
        info = workflow.info()
        return refusal(
            ctx,
            decision,
            pending,
            workflow_id=info.workflow_id,
            chain_id=info.first_execution_run_id,
            now=workflow.now(),
        )

    def invalid(self, problem: str) -> str:
        """The refusal of a budget decision that does not decode."""
        return f"invalid budget decision: {problem}"

    def count(self, refused: str) -> None:
        """Count a refused budget-decision signal on the run, when it started."""
        ctx = self._context()
        if ctx is not None:
            count_refusal(ctx.run, refused)

    def reason(self, refused: str) -> str:
        """The refusal is its own sentence."""
        return refused

    def settle(self, decision: BudgetDecision) -> bool:
        """Never: a budget decision is applied by the run's budget wait."""
        return False


def apply(ctx: Context[Any, Any], decision: BudgetDecision) -> None:
    """Move the run as an accepted decision says: on (approved) or to ``failed`` (rejected)."""
    run = ctx.run
    run.budget_deadline = None
    why = f": {decision.reason}" if decision.reason else ""
    if decision.decision == "approve":
        run.budget_approved = True
        ctx.move(
            Event.OVERSPEND_APPROVED,
            detail=f"overspend approved by {decision.operator}{why}",
            reviewer=decision.operator,
        )
        return
    detail = ctx.set_error(
        f"{errors.BUDGET_EXCEEDED}: overspend rejected by {decision.operator}{why}"
    )
    ctx.move(Event.OVERSPEND_REJECTED, detail=detail, reviewer=decision.operator)


async def over_budget(ctx: Context[Any, Any], budget: str) -> None:
    """The next call would cross ``budget``: wait for an operator, or dead-letter the run (to
    be redriven once the budget allows), as the plan's policy says."""
    run, plan = ctx.run, ctx.policy
    detail = ctx.set_error(f"{errors.BUDGET_EXCEEDED}: {budget}")
    if plan.budget_policy == "wait":
        run.budget_deadline = workflow.now() + timedelta(seconds=plan.budget_timeout_s)
        ctx.move(Event.OVER_BUDGET, detail=detail)
        return
    refused = await ctx.dead_letter(run.state)
    ctx.move(Event.BUDGET_EXCEEDED, detail=detail + refused)


async def wait_for_decision(
    ctx: Context[Any, Any], inbox: DecisionInbox[BudgetDecision, str]
) -> None:
    """The budget state's handler: wait for an operator's decision from ``inbox`` until the
    plan's timeout, then apply it, or dead-letter the run (`timed_out`)."""
    run = ctx.run
    remaining = (run.budget_deadline or workflow.now()) - workflow.now()
    if remaining > timedelta(0):
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: inbox.pending is not None,
                timeout=remaining,
                timeout_summary="budget decision timeout",
            )
    decision = inbox.take()
    if decision is not None:
        apply(ctx, decision)
        return
    await timed_out(ctx)


async def timed_out(ctx: Context[Any, Any]) -> None:
    """No operator decided in time: the run is dead-lettered with ``BudgetExceeded``."""
    run, plan = ctx.run, ctx.policy
    run.budget_deadline = None
    detail = ctx.set_error(
        f"{errors.BUDGET_EXCEEDED}: no budget decision in {plan.budget_timeout_s:g}s"
    )
    refused = await ctx.dead_letter(run.state)
    ctx.move(Event.BUDGET_TIMEOUT, detail=detail + refused)
