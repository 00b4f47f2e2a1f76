"""The engine's graph value and pipeline registration: every rule a graph must keep is checked
when it is built, the shared sub-graphs give the edges they promise, and a pipeline whose
handlers do not cover its working states is refused when it is built."""

from __future__ import annotations

from typing import Any

import pytest

from workflows.engine.graph import (
    AWAIT_BATCH,
    AWAIT_REVIEW,
    CANCELLED,
    COMPLETED,
    DEAD_LETTER,
    END_INFOS,
    ESCALATE,
    FAILED,
    IDLE,
    Event,
    Graph,
    GraphError,
    GraphProblem,
    GraphRule,
    Role,
    StateInfo,
    Status,
    Transition,
    batch_edges,
    budget_edges,
    cancel_edges,
    capacity_edges,
    retry_edges,
    review_edges,
    review_states,
)
from workflows.engine.pipeline import Context, Pipeline
from workflows.errors import InvalidTransition
from workflows.payloads import PipelineRequest, PipelineResult, ReviewContent, RunState
from workflows.steps.llm_call import lane_for

WORK = StateInfo(Status.PROCESSING, 50, "working")


def tiny(*edges: Transition, states: dict[str, StateInfo] | None = None) -> Graph:
    """idle -> work -> completed, with cancel from both, plus ``edges``."""
    return Graph.of(
        "Tiny",
        states if states is not None else {"work": WORK},
        (Transition(IDLE, Event.START, "work"), Transition("work", "done", COMPLETED)),
        edges,
        cancel_edges([IDLE, "work"]),
    )


def test_a_valid_graph_adds_the_engine_states_and_answers_what_next() -> None:
    """Graph.of adds idle and the terminal states its edges lead to; next_state follows the
    edges and refuses any other pair with the events the state allows."""
    graph = tiny()
    assert set(graph.states) == {IDLE, "work", COMPLETED, CANCELLED}
    assert graph.next_state(IDLE, "start") == "work"
    assert graph.next_state("work", "done") == COMPLETED
    with pytest.raises(Exception, match="allowed events: cancel, done"):
        graph.next_state("work", "approve")
    assert graph.working_states == {"work"}
    assert graph.terminal_states == {COMPLETED, CANCELLED}
    assert graph.info(IDLE).role is Role.START


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (
            lambda: tiny(Transition("work", "oops", "nowhere")),
            "edge work -oops-> nowhere: no 'nowhere'",
        ),
        (
            lambda: tiny(Transition("work", "done", FAILED)),
            "work -done-> leads to two states",
        ),
        (
            lambda: tiny(states={"work": WORK, "orphan": WORK}),
            "orphan is not reachable from idle",
        ),
        (
            lambda: tiny(
                Transition("work", "loop", "spin"),
                Transition("spin", "again", "spin"),
                Transition("spin", Event.CANCEL, "stuck"),
                states={"work": WORK, "spin": WORK, "stuck": WORK},
            ),
            "stuck reaches no terminal state",
        ),
        (
            lambda: tiny(
                Transition("work", "aside", "side"),
                Transition("side", "back", COMPLETED),
                states={"work": WORK, "side": WORK},
            ),
            "side cannot be cancelled",
        ),
        (
            lambda: tiny(
                Transition("work", "back", "early"),
                Transition("early", "on", "work"),
                Transition("early", Event.CANCEL, CANCELLED),
                states={"work": WORK, "early": StateInfo(Status.PROCESSING, 20, "earlier")},
            ),
            "progress goes down along work -back-> early (50% to 20%)",
        ),
        (
            lambda: tiny(Transition(COMPLETED, "again", "work")),
            "terminal state completed has edges out",
        ),
    ],
)
def test_a_graph_that_breaks_a_rule_is_refused_naming_it(build: Any, problem: str) -> None:
    """Each rule, broken alone, makes Graph.of raise GraphError with a sentence naming the
    state or edge at fault."""
    with pytest.raises(GraphError) as info:
        build()
    assert problem in str(info.value)


def test_problems_name_the_rule_and_the_state_each_concerns() -> None:
    """``problems`` gives each broken rule as a value: the rule, the state at fault and the
    sentence; a loop that only a cancel leaves reaches no end, although it can be cancelled."""
    graph = Graph.unchecked(
        "Loop",
        {"work": WORK, "spin": WORK, "orphan": WORK},
        (
            Transition(IDLE, Event.START, "work"),
            Transition("work", "done", COMPLETED),
            Transition("work", "loop", "spin"),
            Transition("spin", "again", "spin"),
        ),
        cancel_edges([IDLE, "work", "spin"]),
    )
    assert graph.problems() == [
        GraphProblem(GraphRule.ENDS, "spin", "spin reaches no terminal state (a cancel aside)"),
        GraphProblem(GraphRule.REACHABLE, "orphan", "orphan is not reachable from idle"),
        GraphProblem(GraphRule.ENDS, "orphan", "orphan reaches no terminal state (a cancel aside)"),
        GraphProblem(GraphRule.CANCELLABLE, "orphan", "orphan cannot be cancelled"),
    ]
    with pytest.raises(GraphError, match="spin reaches no terminal state"):
        Graph.of("Loop", dict(graph.states), graph.transitions)


def test_shared_sub_graphs_give_their_edges() -> None:
    """review_edges, retry_edges, capacity_edges and budget_edges give the engine's edges for
    a step; review states and escalation are engine roles, and the resumable states are the
    review waits and the state a reedit leads to."""
    states = {
        "call": StateInfo(Status.PROCESSING, 60, "calling"),
        "call_retry": StateInfo(Status.PROCESSING, 60, "backing off", Role.RETRY),
        "await_capacity": StateInfo(Status.PENDING, 60, "queued", Role.CAPACITY),
        "await_budget": StateInfo(Status.WAITING_FOR_INPUT, 60, "over budget", Role.BUDGET),
        **review_states(60),
    }
    graph = Graph.of(
        "Calls",
        states,
        (
            Transition(IDLE, Event.START, "call"),
            Transition("call", "answered", AWAIT_REVIEW),
        ),
        retry_edges("call", "call_retry"),
        capacity_edges("call"),
        budget_edges("call"),
        review_edges(approve=COMPLETED, reedit="call", correct=COMPLETED),
        cancel_edges([IDLE, *states]),
    )
    assert graph.next_state("call", Event.RETRYABLE_ERROR) == "call_retry"
    assert graph.next_state("call_retry", Event.BACKOFF_ELAPSED) == "call"
    assert graph.next_state("call_retry", Event.EXHAUSTED) == DEAD_LETTER
    assert graph.next_state("await_capacity", Event.CAPACITY_READY) == "call"
    assert graph.next_state("await_budget", Event.OVERSPEND_REJECTED) == FAILED
    for waiting in (AWAIT_REVIEW, ESCALATE):
        assert graph.next_state(waiting, Event.CORRECT) == COMPLETED
        assert graph.next_state(waiting, Event.REJECT) == FAILED
    assert graph.next_state(ESCALATE, Event.ESCALATION_TIMEOUT) == DEAD_LETTER
    assert graph.review_states == {AWAIT_REVIEW, ESCALATE}
    assert graph.resumable_states == {AWAIT_REVIEW, ESCALATE, "call"}
    assert graph.working_states == {"call"}


def test_a_batch_wait_leads_back_to_its_step_and_only_it_takes_the_batch_lane() -> None:
    """batch_edges: the step's batched call waits in the batch state (an engine role), whose
    outcome leads back to the step; a step in a graph without them calls synchronously even
    when the plan asks for the batch lane."""
    batch = StateInfo(Status.PENDING, 50, "in a batch", Role.BATCH)
    graph = tiny(
        *batch_edges("work"),
        *cancel_edges([AWAIT_BATCH]),
        states={"work": WORK, AWAIT_BATCH: batch},
    )
    assert graph.next_state("work", Event.BATCH_SUBMITTED) == AWAIT_BATCH
    assert graph.next_state(AWAIT_BATCH, Event.BATCH_DONE) == "work"
    assert graph.with_role(Role.BATCH) == {AWAIT_BATCH}
    assert lane_for(graph, "work", "batch") == "batch"
    assert lane_for(tiny(), "work", "batch") == "sync"
    assert lane_for(graph, "work", "sync") == "sync"


async def _work(ctx: Context[Any, Any]) -> None:
    ctx.move("done")


def _result(ctx: Context[Any, Any]) -> Any:
    raise NotImplementedError


def _view(ctx: Context[Any, Any]) -> ReviewContent:
    raise NotImplementedError


def test_a_pipeline_without_a_handler_for_a_working_state_is_refused() -> None:
    """Building a Pipeline checks its handlers cover exactly its graph's working states: a
    missing handler and a handler for a state the graph has no work in are both named."""
    graph = tiny()
    Pipeline(
        "tiny", graph, PipelineRequest, RunState, {"work": _work}, PipelineResult, _result, _view
    )
    with pytest.raises(GraphError, match="no handler for work"):
        Pipeline("tiny", graph, PipelineRequest, RunState, {}, PipelineResult, _result, _view)
    with pytest.raises(GraphError, match="await_review is not a working state"):
        Pipeline(
            "tiny",
            graph,
            PipelineRequest,
            RunState,
            {"work": _work, AWAIT_REVIEW: _work},
            PipelineResult,
            _result,
            _view,
        )


async def test_a_state_without_a_failure_edge_cannot_fail_quietly() -> None:
    """``Context.fail`` takes a failure edge of the current state: in a state that has neither
    ``permanent_error`` nor ``exhausted`` it raises InvalidTransition (a bug in the pipeline),
    with the error recorded and the run left where it was."""
    graph = tiny()
    run = RunState(state="work")
    ctx: Context[Any, Any] = Context(
        graph, PipelineRequest(request_id="0" * 24, user_message="hi"), run
    )
    with pytest.raises(InvalidTransition, match="no failure edge"):
        await ctx.fail("it broke")
    assert (run.state, run.last_error, run.history) == ("work", "it broke", [])


def test_the_dot_export_draws_ends_as_double_circles_and_cancels_dashed() -> None:
    """``to_dot`` writes the Graphviz text the docs commit: left to right, one box per state
    labelled with its status and progress (end states double circles), then one labelled edge
    per transition in definition order, cancels dashed and gray."""
    assert tiny().to_dot() == (
        "digraph Tiny {\n"
        "  rankdir=LR;\n"
        '  node [shape=box, style=rounded, fontname="Helvetica"];\n'
        '  idle [label="idle\\nPending 0%", shape=box];\n'
        '  work [label="work\\nProcessing 50%", shape=box];\n'
        '  completed [label="completed\\nCompleted 100%", shape=doublecircle];\n'
        '  cancelled [label="cancelled\\nCancelled 100%", shape=doublecircle];\n'
        '  idle -> work [label="start"];\n'
        '  work -> completed [label="done"];\n'
        '  idle -> cancelled [label="cancel", style=dashed, color=gray];\n'
        '  work -> cancelled [label="cancel", style=dashed, color=gray];\n'
        "}\n"
    )


def test_the_mermaid_export_starts_at_the_initial_state_and_leaves_from_each_end() -> None:
    """``to_mermaid`` enters at the initial state, draws every transition in definition order
    and leaves from each end state in name order; the short form notes the cancel once on its
    target instead of its edges."""
    head = (
        "stateDiagram-v2\n    [*] --> idle\n    idle --> work: start\n"
        "    work --> completed: done\n"
    )
    tail = "    cancelled --> [*]\n    completed --> [*]\n"
    assert tiny().to_mermaid() == (
        head + "    idle --> cancelled: cancel\n    work --> cancelled: cancel\n" + tail
    )
    assert tiny().to_mermaid(cancel_edges=False) == (
        head + "    note left of cancelled: cancel, from every open state\n" + tail
    )


def test_an_unknown_pair_or_state_is_refused_naming_what_the_graph_allows() -> None:
    """``next_state`` refuses a pair the graph lacks with the state, the event and the events
    the state allows (``none`` in an end state); ``info`` refuses a state the graph lacks,
    naming the graph."""
    graph = tiny()
    with pytest.raises(InvalidTransition) as lacking:
        graph.next_state("work", Event.APPROVE)
    assert (lacking.value.state, lacking.value.event) == ("work", "approve")
    assert str(lacking.value) == (
        "invalid transition: event 'approve' in state 'work' (allowed events: cancel, done)"
    )
    with pytest.raises(InvalidTransition, match=r"in state 'completed' \(allowed events: none\)"):
        graph.next_state(COMPLETED, Event.START)
    with pytest.raises(InvalidTransition) as unknown:
        graph.info("nowhere")
    assert str(unknown.value) == (
        "invalid transition: event '(lookup)' in state 'nowhere' (Tiny has no such state)"
    )


def test_each_state_answers_its_status_progress_and_whether_it_ends() -> None:
    """A state's status, progress and end come from its ``StateInfo``; the start state is not
    shown, every other state here is; where an event leads is None off the graph's edges."""
    side = StateInfo(Status.PENDING, 50, "aside", Role.CAPACITY, shown=False)
    graph = tiny(
        Transition("work", Event.CAPACITY_WAIT, "side"),
        Transition("side", Event.CAPACITY_READY, "work"),
        *cancel_edges(["side"]),
        states={"work": WORK, "side": side},
    )
    assert [graph.is_terminal(s) for s in (IDLE, "work", "side", COMPLETED, CANCELLED)] == [
        False,
        False,
        False,
        True,
        True,
    ]
    assert (graph.status_of("work"), graph.progress_of("work")) == (Status.PROCESSING, 50)
    assert (graph.status_of(COMPLETED), graph.progress_of(COMPLETED)) == (Status.COMPLETED, 100)
    assert (graph.status_of(IDLE), graph.progress_of(IDLE)) == (Status.PENDING, 0)
    assert graph.shown_states == {"work", COMPLETED, CANCELLED}
    assert graph.with_role(Role.CAPACITY, Role.START) == {"side", IDLE}
    assert graph.target_of("work", "done") == COMPLETED
    assert graph.target_of("work", Event.CAPACITY_READY) is None
    assert graph.reedit_target("work") is None
    assert graph.reachable_from("side") == {"side", "work", COMPLETED, CANCELLED}
    assert graph.reachable_from("side", cancels=False) == {"side", "work", COMPLETED}


def test_a_reedit_leads_back_to_the_step_it_names() -> None:
    """``reedit_target`` is where a reedit decision leads from a review state (the step to do
    again), and nothing from a state without one."""
    states = {"call": WORK, **review_states(50)}
    graph = Graph.of(
        "Reviewed",
        states,
        (Transition(IDLE, Event.START, "call"), Transition("call", "answered", AWAIT_REVIEW)),
        review_edges(approve=COMPLETED, reedit="call"),
        cancel_edges([IDLE, *states]),
    )
    assert graph.reedit_target(AWAIT_REVIEW) == "call"
    assert graph.reedit_target(ESCALATE) == "call"
    assert graph.reedit_target("call") is None


def test_edge_problems_name_their_source_and_stop_the_check_there() -> None:
    """An edge to an unknown state, or a second target for one (state, event), is named with
    the edge's source; either stops the check there (the other rules would only echo it), and
    Graph.of's message joins every problem with ``; `` after the graph's name."""
    graph = Graph.unchecked(
        "Broken",
        {"work": WORK},
        (
            Transition(IDLE, Event.START, "work"),
            Transition("ghost", "haunt", "work"),
            Transition("work", "done", COMPLETED),
            Transition("work", "done", FAILED),
            Transition("work", "lost", "nowhere"),
        ),
    )
    assert graph.problems() == [
        GraphProblem(GraphRule.KNOWN_STATES, "ghost", "edge ghost -haunt-> work: no 'ghost'"),
        GraphProblem(GraphRule.ONE_TARGET, "work", "work -done-> leads to two states"),
        GraphProblem(GraphRule.KNOWN_STATES, "work", "edge work -lost-> nowhere: no 'nowhere'"),
    ]
    with pytest.raises(GraphError) as info:
        Graph.of("Broken", {"work": WORK}, graph.transitions)
    assert str(info.value) == (
        "graph 'Broken' is invalid: edge ghost -haunt-> work: no 'ghost'; "
        "work -done-> leads to two states; edge work -lost-> nowhere: no 'nowhere'"
    )


def test_every_state_is_checked_past_an_end_and_a_drop_in_progress_names_its_edge() -> None:
    """The checks go on past an end state to the states after it (an end with edges out is
    named, and so is an open state after it that cannot be cancelled), and a drop in progress
    is named at its edge's source with both percentages."""
    graph = Graph.unchecked(
        "Late",
        {
            "work": WORK,
            COMPLETED: END_INFOS[COMPLETED],
            "late": StateInfo(Status.PROCESSING, 49, "later"),
        },
        (
            Transition(IDLE, Event.START, "work"),
            Transition("work", "done", COMPLETED),
            Transition(COMPLETED, "again", "late"),
            Transition("late", "on", COMPLETED),
        ),
        cancel_edges([IDLE, "work"]),
    )
    assert graph.problems() == [
        GraphProblem(GraphRule.FINAL_ENDS, COMPLETED, "terminal state completed has edges out"),
        GraphProblem(GraphRule.CANCELLABLE, "late", "late cannot be cancelled"),
        GraphProblem(
            GraphRule.PROGRESS,
            COMPLETED,
            "progress goes down along completed -again-> late (100% to 49%)",
        ),
    ]


def test_an_edge_given_twice_is_no_conflict() -> None:
    """Two groups of edges may give the same edge (a state cancelled by two sub-graphs): only
    a second target for one (state, event) is a problem."""
    graph = tiny(*cancel_edges(["work"]))
    assert graph.problems() == []
    assert graph.next_state("work", Event.CANCEL) == CANCELLED
