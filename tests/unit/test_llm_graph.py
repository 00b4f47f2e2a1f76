"""The LLM pipeline's state graph: structure, validator and diagram exports."""

from __future__ import annotations

import itertools

import pydot
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflows.engine.graph import Event, Status
from workflows.errors import InvalidTransition
from workflows.llm.graph import GRAPH, LlmEvent, State

REVIEW_STATES = GRAPH.review_states
SHOWN_STATES = GRAPH.shown_states
STATES = GRAPH.states
TERMINAL_STATES = GRAPH.terminal_states
TRANSITIONS = GRAPH.transitions
EVENTS = [*Event, *LlmEvent]
allowed_events = GRAPH.allowed_events
is_terminal = GRAPH.is_terminal
next_state = GRAPH.next_state
reachable_from = GRAPH.reachable_from


def test_review_states_are_the_states_waiting_for_a_reviewer() -> None:
    """REVIEW_STATES (used by the workflow, its metrics and `starter.py stuck`) are the states
    waiting for input besides await_budget (an operator's, not a reviewer's), and each takes the
    three review decisions."""
    waiting = {state for state, info in STATES.items() if info.status is Status.WAITING_FOR_INPUT}
    assert waiting == REVIEW_STATES | {State.AWAIT_BUDGET}
    for state in REVIEW_STATES:
        assert {Event.APPROVE, Event.REEDIT, Event.REJECT} <= set(allowed_events(state))
    assert "await_review" in REVIEW_STATES  # a state name read from visibility matches too


def test_every_state_has_info_and_terminal_states_are_final() -> None:
    """Each state has a status and progress; terminal states have no outgoing edges."""
    assert set(STATES) == set(State)
    for state in TERMINAL_STATES:
        assert allowed_events(state) == []
        assert STATES[state].progress == 100
    assert STATES[State.AWAIT_REVIEW].status is Status.WAITING_FOR_INPUT


def test_every_state_is_reachable_from_idle() -> None:
    """No state is dead weight: idle reaches all of them."""
    assert reachable_from(State.IDLE) == set(State)


def test_every_non_terminal_state_can_finish() -> None:
    """From every non-terminal state some terminal state is reachable."""
    for state in State:
        if not is_terminal(state):
            assert reachable_from(state) & TERMINAL_STATES, state


def test_transitions_are_unique_per_state_and_event() -> None:
    """The graph is deterministic: one target per (state, event)."""
    keys = [(t.source, t.event) for t in TRANSITIONS]
    assert len(keys) == len(set(keys))


def test_contract_edges_exist() -> None:
    """The edges docs/contract.md names are all in the graph."""
    expected = {
        (State.IDLE, Event.START): State.FETCH_PROMPT,
        (State.FETCH_PROMPT, LlmEvent.PROMPT_READY): State.INVOKE_LLM,
        (State.INVOKE_LLM, LlmEvent.LLM_OK): State.GENERATE_EMBEDDING,
        (State.INVOKE_LLM, LlmEvent.NEEDS_REVIEW): State.AWAIT_REVIEW,
        (State.INVOKE_LLM, Event.RETRYABLE_ERROR): State.RETRY_LLM,
        (State.INVOKE_LLM, Event.PERMANENT_ERROR): State.FAILED,
        (State.RETRY_LLM, Event.BACKOFF_ELAPSED): State.INVOKE_LLM,
        (State.RETRY_LLM, Event.EXHAUSTED): State.DEAD_LETTER,
        (State.AWAIT_REVIEW, Event.APPROVE): State.GENERATE_EMBEDDING,
        (State.AWAIT_REVIEW, Event.REEDIT): State.INVOKE_LLM,
        (State.AWAIT_REVIEW, Event.REJECT): State.FAILED,
        (State.AWAIT_REVIEW, Event.REVIEW_TIMEOUT): State.ESCALATE,
        (State.ESCALATE, Event.APPROVE): State.GENERATE_EMBEDDING,
        (State.ESCALATE, Event.REEDIT): State.INVOKE_LLM,
        (State.ESCALATE, Event.REJECT): State.FAILED,
        (State.ESCALATE, Event.ESCALATION_TIMEOUT): State.DEAD_LETTER,
        (State.GENERATE_EMBEDDING, LlmEvent.EMBEDDED): State.COMPLETED,
        (State.GENERATE_EMBEDDING, Event.EXHAUSTED): State.DEAD_LETTER,
    }
    for (state, event), target in expected.items():
        assert next_state(state, event) == target
    for state in State:
        if not is_terminal(state):
            assert next_state(state, Event.CANCEL) == State.CANCELLED


def test_every_pair_is_either_an_edge_or_invalid() -> None:
    """Exhaustively: every (state, event) pair not in the graph raises InvalidTransition."""
    edges = {(t.source, t.event): t.target for t in TRANSITIONS}
    for state, event in itertools.product(State, EVENTS):
        if (state, event) in edges:
            assert next_state(state, event) == edges[(state, event)]
        else:
            with pytest.raises(InvalidTransition) as info:
                next_state(state, event)
            assert state.value in str(info.value)
            assert event.value in str(info.value)


@given(st.text(max_size=20), st.text(max_size=20))
def test_unknown_names_raise_invalid_transition(state: str, event: str) -> None:
    """Arbitrary strings never slip through: either a real edge or InvalidTransition."""
    try:
        target = next_state(state, event)
    except InvalidTransition:
        return
    assert (state, event, target) in {(t.source, t.event, t.target) for t in TRANSITIONS}


def test_dot_parses_with_one_edge_per_transition() -> None:
    """The DOT export is valid Graphviz (parsed by pydot) with every state and transition."""
    graphs = pydot.graph_from_dot_data(GRAPH.to_dot())
    assert graphs is not None and len(graphs) == 1
    graph = graphs[0]
    assert {node.get_name() for node in graph.get_nodes()} >= {s.value for s in State}
    edges = {
        (e.get_source(), e.get_destination(), str(e.get("label")).strip('"'))
        for e in graph.get_edges()
    }
    assert len(graph.get_edges()) == len(TRANSITIONS)
    assert edges == {(t.source, t.target, t.event) for t in TRANSITIONS}


def test_mermaid_has_one_edge_per_transition() -> None:
    """The Mermaid export lists each transition exactly once, labelled with its event."""
    lines = GRAPH.to_mermaid().splitlines()
    assert lines[0] == "stateDiagram-v2"
    edge_lines = [line.strip() for line in lines if ": " in line]
    assert len(edge_lines) == len(TRANSITIONS)
    for t in TRANSITIONS:
        assert f"{t.source} --> {t.target}: {t.event}" in edge_lines


def test_waiting_for_capacity_or_budget_is_shown_and_leads_back_or_out() -> None:
    """await_capacity (Pending) and await_budget (WaitingForInput) are shown in AiState;
    capacity only ever leads back to invoke_llm (or a cancel); a budget wait ends in invoke_llm
    (approved), failed (rejected) or dead_letter (timeout, redrivable), and policy fail goes
    from invoke_llm straight to dead_letter."""
    assert {State.AWAIT_CAPACITY, State.AWAIT_BUDGET} <= SHOWN_STATES
    assert STATES[State.AWAIT_CAPACITY].status is Status.PENDING
    assert STATES[State.AWAIT_BUDGET].status is Status.WAITING_FOR_INPUT
    assert set(allowed_events(State.AWAIT_CAPACITY)) == {Event.CAPACITY_READY, Event.CANCEL}
    assert next_state(State.INVOKE_LLM, Event.CAPACITY_WAIT) == State.AWAIT_CAPACITY
    assert next_state(State.AWAIT_CAPACITY, Event.CAPACITY_READY) == State.INVOKE_LLM
    assert next_state(State.INVOKE_LLM, Event.OVER_BUDGET) == State.AWAIT_BUDGET
    assert next_state(State.INVOKE_LLM, Event.BUDGET_EXCEEDED) == State.DEAD_LETTER
    assert next_state(State.AWAIT_BUDGET, Event.OVERSPEND_APPROVED) == State.INVOKE_LLM
    assert next_state(State.AWAIT_BUDGET, Event.OVERSPEND_REJECTED) == State.FAILED
    assert next_state(State.AWAIT_BUDGET, Event.BUDGET_TIMEOUT) == State.DEAD_LETTER
    assert next_state(State.AWAIT_BUDGET, Event.CANCEL) == State.CANCELLED


def test_a_short_mermaid_diagram_notes_cancel_once_instead_of_its_edges() -> None:
    """Without cancel edges, the diagram keeps every other transition and says once, on
    `cancelled`, that every open state can be cancelled."""
    lines = [line.strip() for line in GRAPH.to_mermaid(cancel_edges=False).splitlines()]
    kept = [t for t in TRANSITIONS if t.event != Event.CANCEL]
    assert [line for line in lines if ": " in line and "note" not in line] == [
        f"{t.source} --> {t.target}: {t.event}" for t in kept
    ]
    assert lines.count("note left of cancelled: cancel, from every open state") == 1
    assert "cancelled --> [*]" in lines
