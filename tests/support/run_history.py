"""A run's own history (its ``HistoryEntry`` list, as the result and the ``status`` query
report it), read and checked against the LLM pipeline's graph (``workflows.llm.graph.GRAPH``):
every transition is an edge, notes keep the state, and time never runs back.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from workflows.llm.graph import GRAPH, State
from workflows.payloads import NOTE_CONTINUED_AS_NEW, NOTE_REVIEW_VOTE, HistoryEntry

# The states a run without review walks through, in order.
HAPPY_PATH = ["idle", "fetch_prompt", "invoke_llm", "generate_embedding", "completed"]

GRAPH_EDGES = frozenset((t.source, t.event, t.target) for t in GRAPH.transitions)
# History entries that record something without moving the run (see workflows.payloads).
NOTES = frozenset({NOTE_CONTINUED_AS_NEW, NOTE_REVIEW_VOTE})


def transitions(history: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """The entries that are graph transitions, leaving out notes (``continued_as_new``)."""
    return [entry for entry in history if entry.event not in NOTES]


def assert_follows_graph(history: Sequence[HistoryEntry]) -> None:
    """Every transition is an edge of the graph, they chain from ``idle``, notes stay in the
    state the run was in, and time never runs back."""
    assert history, "the run recorded no history"
    assert history[0].from_state == State.IDLE.value, history[0]
    state = State.IDLE.value
    for entry in history:
        if entry.event in NOTES:
            assert entry.from_state == entry.to_state == state, f"note moved the run: {entry}"
            continue
        edge = (entry.from_state, entry.event, entry.to_state)
        assert edge in GRAPH_EDGES, f"history entry {edge} is not an edge of the graph"
        assert entry.from_state == state, f"history jumps from {state!r}: {entry}"
        state = entry.to_state
    for before, after in pairwise(history):
        assert before.at <= after.at, f"history runs back in time: {before} then {after}"


def events(history: Sequence[HistoryEntry]) -> list[str]:
    """The events of the transitions, in order (notes left out)."""
    return [entry.event for entry in transitions(history)]


def path(history: Sequence[HistoryEntry]) -> list[str]:
    """The states visited, starting with ``idle`` (notes left out)."""
    moves = transitions(history)
    return [moves[0].from_state, *(entry.to_state for entry in moves)] if moves else []


def step(entry: HistoryEntry) -> tuple[str, str, str, str | None]:
    """``entry`` as (from_state, event, to_state, detail), so one assert checks a whole step."""
    return (entry.from_state, entry.event, entry.to_state, entry.detail)


def notes(history: Sequence[HistoryEntry], kind: str = NOTE_CONTINUED_AS_NEW) -> list[HistoryEntry]:
    return [entry for entry in history if entry.event == kind]


def entry_for(history: Sequence[HistoryEntry], event: str, nth: int = 0) -> HistoryEntry:
    matching = [entry for entry in history if entry.event == event]
    assert len(matching) > nth, f"no {event!r} entry #{nth} in {events(history)}"
    return matching[nth]
