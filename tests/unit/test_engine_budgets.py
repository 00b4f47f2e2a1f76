"""Budget decisions: taken only while the run waits for one, and only one at a time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiorch.ops.signing import SigningKey
from tests.support.builders import REQUEST_ID, prompt_plan
from workflows.engine.budgets import count_refusal, refusal
from workflows.engine.identity import parse_review_keys
from workflows.engine.pipeline import Context
from workflows.engine.record import MAX_REFUSAL_CHARS
from workflows.llm.graph import GRAPH, State
from workflows.payloads import BudgetDecision, PipelineRequest, RunState


def context(state: State, **plan: Any) -> Context[Any, Any]:
    """A run of the LLM pipeline in ``state``, planned with ``plan``'s fields."""
    request = PipelineRequest(request_id=REQUEST_ID, user_message="Summarise the report.")
    return Context(GRAPH, request, RunState(state=state, plan=prompt_plan(**plan)))


def refused(
    ctx: Context[Any, Any], pending: BudgetDecision | None, operator: str = "olga"
) -> str | None:
    """Why the desk refuses ``operator``'s unsigned approval now, with ``pending`` being
    applied."""
    return refusal(
        ctx,
        decide("approve", operator),
        pending,
        workflow_id=REQUEST_ID,
        chain_id="run-1",
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )


def decide(verdict: str = "approve", operator: str = "olga") -> BudgetDecision:
    return BudgetDecision.model_validate({"decision": verdict, "operator": operator})


def test_a_run_waiting_for_a_budget_decision_takes_the_first() -> None:
    """In await_budget, with no decision being applied, an operator's decision is taken."""
    assert refused(context(State.AWAIT_BUDGET), None) is None


def test_a_second_decision_while_one_is_being_applied_is_refused() -> None:
    """Two decisions that reach the run in one moment (say, olga's approval and bob's
    rejection): the second is refused, naming whose decision is being applied, so a run is
    never approved and rejected at once, and the first decision's sender is answered."""
    why = refused(context(State.AWAIT_BUDGET), decide("reject", "bob"))
    assert why == "a decision by bob is already being applied"


def test_outside_await_budget_a_decision_is_refused_naming_the_state() -> None:
    """A run that is not waiting for a budget decision refuses one, naming its state."""
    for state in (State.AWAIT_REVIEW, State.INVOKE_LLM, State.COMPLETED):
        why = refused(context(state), None)
        assert why == f"run is not waiting for a budget decision (state: {state.value})"


def test_a_refused_signal_is_counted_and_its_reason_bounded() -> None:
    """A refused budget_decision signal adds nothing to the run's history: a count and the last
    reason, cut short."""
    run = RunState(state=State.AWAIT_REVIEW)
    for _ in range(1000):
        count_refusal(run, "x" * 5000)
    assert run.budget_decisions_refused == 1000 and run.history == []
    assert run.last_refusal is not None and len(run.last_refusal) <= MAX_REFUSAL_CHARS


def test_a_run_planned_before_budget_decisions_were_signed_takes_an_unsigned_one() -> None:
    """A run whose plan carries reviewer keys but predates signed budget decisions keeps the
    rules it started under: an unsigned decision, even its requester's, is taken."""
    keys = parse_review_keys(SigningKey.generate("cfo").public_entry())
    ctx = context(State.AWAIT_BUDGET, review_keys=keys, requested_by="olga")
    assert refused(ctx, None) is None


def test_the_requester_may_not_decide_her_runs_budget_and_her_name_is_cut_short() -> None:
    """With signed budget decisions, the run's requester is refused before her token is even
    read, and the refusal quotes at most 80 characters of her name."""
    name = "o" * 150
    ctx = context(State.AWAIT_BUDGET, requested_by=name, budget_decisions_signed=True)
    why = refused(ctx, None, operator=name)
    assert why == f"{'o' * 80!r} requested this run and may not decide its budget"
