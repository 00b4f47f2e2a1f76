"""Budget decisions, as functions over ``RunState``: one set of rules for the ``decide_budget``
update and the ``budget_decision`` signal, and what a call that would cross a budget does.

A run whose next LLM call would cross its cost ceiling or its tenant's daily budget
(``invoke_llm`` answers ``over_budget``, no call made) either waits in ``await_budget`` for an
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

from datetime import timedelta

from temporalio import workflow

import workflows.errors as errors
import workflows.review_desk as review_desk
import workflows.run_record as run_record
import workflows.steps as steps
from workflows.graph import Event, State
from workflows.payloads import BudgetDecision, PipelineRequest, PromptPlan, RunState


def refusal(run: RunState, pending: BudgetDecision | None) -> str | None:
    """Why a budget decision may not be applied now, or None when it may."""
    if run.state is not State.AWAIT_BUDGET:
        return f"run is not waiting for a budget decision (state: {run.state.value})"
    if pending is not None:
        return f"a decision by {pending.operator} is already being applied"
    return None


def count_refusal(run: RunState, reason: str) -> None:
    """Count a refused ``budget_decision`` signal (never stored one by one)."""
    run.budget_decisions_refused += 1
    run.last_refusal = run_record.bounded_text(reason, review_desk.MAX_REFUSAL_CHARS)


def apply(run: RunState, decision: BudgetDecision) -> None:
    """Move the run as an accepted decision says: on (approved) or to ``failed`` (rejected)."""
    run.budget_deadline = None
    why = f": {decision.reason}" if decision.reason else ""
    if decision.decision == "approve":
        run.budget_approved = True
        run_record.move(
            run,
            Event.OVERSPEND_APPROVED,
            detail=f"overspend approved by {decision.operator}{why}",
            reviewer=decision.operator,
        )
        return
    detail = run_record.set_error(
        run, f"{errors.BUDGET_EXCEEDED}: overspend rejected by {decision.operator}{why}"
    )
    run_record.move(run, Event.OVERSPEND_REJECTED, detail=detail, reviewer=decision.operator)


async def over_budget(
    run: RunState, plan: PromptPlan, request: PipelineRequest, budget: str
) -> None:
    """The next call would cross ``budget``: wait for an operator, or dead-letter the run (to
    be redriven once the budget allows), as the plan's policy says."""
    detail = run_record.set_error(run, f"{errors.BUDGET_EXCEEDED}: {budget}")
    if plan.budget_policy == "wait":
        run.budget_deadline = workflow.now() + timedelta(seconds=plan.budget_timeout_s)
        run_record.move(run, Event.OVER_BUDGET, detail=detail)
        return
    refused = await steps.dead_letter(run, request, State.INVOKE_LLM)
    run_record.move(run, Event.BUDGET_EXCEEDED, detail=detail + refused)


async def timed_out(run: RunState, plan: PromptPlan, request: PipelineRequest) -> None:
    """No operator decided in time: the run is dead-lettered with ``BudgetExceeded``."""
    run.budget_deadline = None
    detail = run_record.set_error(
        run, f"{errors.BUDGET_EXCEEDED}: no budget decision in {plan.budget_timeout_s:g}s"
    )
    refused = await steps.dead_letter(run, request, State.AWAIT_BUDGET)
    run_record.move(run, Event.BUDGET_TIMEOUT, detail=detail + refused)
