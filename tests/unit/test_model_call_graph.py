"""The model call's sub-graph (``workflows.steps.model_call``): the wait states any pipeline's
model call gets, with the engine's meaning, and the edges that join them to the step."""

from __future__ import annotations

from workflows.engine.graph import (
    AWAIT_BATCH,
    AWAIT_BUDGET,
    AWAIT_CAPACITY,
    DEAD_LETTER,
    FAILED,
    Event,
    Graph,
    Role,
    StateInfo,
    Status,
    Transition,
    cancel_edges,
)
from workflows.steps import CallStates, model_call_edges, model_call_states
from workflows.steps.model_call import DESCRIPTIONS

CALL = CallStates(retry="retry_call")


def test_the_waits_take_the_steps_progress_and_the_engines_meaning() -> None:
    """Retry, capacity, budget and batch waits, in that order, at the step's progress, each
    with its role, status and the shared description unless the pipeline gives its own."""
    states = model_call_states(40, CALL, descriptions={"retry": "waiting to try again"})
    assert states == {
        "retry_call": StateInfo(Status.PROCESSING, 40, "waiting to try again", Role.RETRY),
        AWAIT_CAPACITY: StateInfo(Status.PENDING, 40, DESCRIPTIONS["capacity"], Role.CAPACITY),
        AWAIT_BUDGET: StateInfo(Status.WAITING_FOR_INPUT, 40, DESCRIPTIONS["budget"], Role.BUDGET),
        AWAIT_BATCH: StateInfo(Status.PENDING, 40, DESCRIPTIONS["batch"], Role.BATCH),
    }
    assert list(states) == ["retry_call", AWAIT_CAPACITY, AWAIT_BUDGET, AWAIT_BATCH]


def test_named_waits_join_their_step_and_make_a_valid_graph() -> None:
    """A step with waits of its own names gets every edge to and from them: a graph of the
    step alone with its sub-graph is valid, and each wait leads back to the step or ends."""
    call = CallStates(retry="r", capacity="c", budget="b", batch="q")
    graph = Graph.of(
        "Call",
        {"ask": StateInfo(Status.PROCESSING, 50, "asking"), **model_call_states(50, call)},
        (Transition("idle", Event.START, "ask"), Transition("ask", "answered", "completed")),
        model_call_edges("ask", call),
        cancel_edges(["idle", "ask", "r", "c", "b", "q"]),
    )
    assert graph.next_state("ask", Event.RETRYABLE_ERROR) == "r"
    assert graph.next_state("r", Event.BACKOFF_ELAPSED) == "ask"
    assert graph.next_state("r", Event.EXHAUSTED) == DEAD_LETTER
    assert graph.next_state("ask", Event.CAPACITY_WAIT) == "c"
    assert graph.next_state("c", Event.CAPACITY_READY) == "ask"
    assert graph.next_state("ask", Event.OVER_BUDGET) == "b"
    assert graph.next_state("ask", Event.BUDGET_EXCEEDED) == DEAD_LETTER
    assert graph.next_state("b", Event.OVERSPEND_APPROVED) == "ask"
    assert graph.next_state("b", Event.OVERSPEND_REJECTED) == FAILED
    assert graph.next_state("b", Event.BUDGET_TIMEOUT) == DEAD_LETTER
    assert graph.next_state("ask", Event.BATCH_SUBMITTED) == "q"
    assert graph.next_state("q", Event.BATCH_DONE) == "ask"
    assert len(model_call_edges("ask", call)) == 12
