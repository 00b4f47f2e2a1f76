"""A pipeline's state graph as a value: states, the edges between them, and what each state
means to an observer, with pure methods to walk, check and draw it.

A ``Graph`` is plain data (as pydantic_graph's ``Graph``): the engine asks it "what next?" and
refuses what it does not allow; DOT and Mermaid diagrams come from it. It imports nothing from
temporalio, so it can be unit-tested and drawn anywhere.

Every pipeline shares the engine's own states and events (start, reviews, retries, capacity,
budget and batch waits, dead letters, cancel) and adds its working states with one call per
sub-graph (``review_edges``, ``retry_edges``, ``capacity_edges``, ``budget_edges``,
``batch_edges``, ``cancel_edges``: ``workflows.engine.subgraphs``; the words they are written
in are ``workflows.engine.vocabulary``). A state's ``Role`` says who handles it: the pipeline
(``WORK``) or the engine (everything else). ``problems`` names each rule a graph breaks as a
``GraphProblem`` (the rule, the state, a sentence), for a caller that places it in a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from workflows.engine.subgraphs import (
    batch_edges,
    budget_edges,
    cancel_edges,
    capacity_edges,
    retry_edges,
    review_edges,
    review_states,
)
from workflows.engine.vocabulary import (
    AWAIT_BATCH,
    AWAIT_BUDGET,
    AWAIT_CAPACITY,
    AWAIT_REVIEW,
    CANCELLED,
    COMPLETED,
    DEAD_LETTER,
    END_INFOS,
    ESCALATE,
    FAILED,
    FINAL_STATES,
    IDLE,
    START_INFO,
    TERMINAL_STATES,
    Event,
    Role,
    StateInfo,
    Status,
    Transition,
)
from workflows.errors import InvalidTransition, OrchestratorError

# The vocabulary and the shared sub-graphs are part of this module's face: pipelines import
# them from here with the graph.
__all__ = (
    "AWAIT_BATCH",
    "AWAIT_BUDGET",
    "AWAIT_CAPACITY",
    "AWAIT_REVIEW",
    "CANCELLED",
    "COMPLETED",
    "DEAD_LETTER",
    "END_INFOS",
    "ESCALATE",
    "FAILED",
    "FINAL_STATES",
    "IDLE",
    "START_INFO",
    "TERMINAL_STATES",
    "Event",
    "Graph",
    "GraphError",
    "GraphProblem",
    "GraphRule",
    "Role",
    "StateInfo",
    "Status",
    "Transition",
    "batch_edges",
    "budget_edges",
    "cancel_edges",
    "capacity_edges",
    "retry_edges",
    "review_edges",
    "review_states",
)


class GraphRule(StrEnum):
    """The rules a graph must keep (``Graph.problems``)."""

    KNOWN_STATES = "known_states"  # every edge joins states of the graph
    ONE_TARGET = "one_target"  # no (state, event) pair leads two ways
    REACHABLE = "reachable"  # every state is reachable from the initial one
    ENDS = "ends"  # every open state reaches an end other than by a cancel
    FINAL_ENDS = "final_ends"  # an end state has no edge out
    CANCELLABLE = "cancellable"  # every open state can be cancelled
    PROGRESS = "progress"  # progress never goes down along an edge


@dataclass(frozen=True)
class GraphProblem:
    """A rule a graph breaks: which, the state it concerns (an edge's source for an edge's
    problem), and a sentence naming the state or edge at fault."""

    rule: GraphRule
    state: str
    text: str


class GraphError(OrchestratorError):
    """A graph that breaks the engine's rules; the message lists every problem."""


@dataclass(frozen=True)
class Graph:
    """A pipeline's state graph. Build it with ``Graph.of`` (which validates it)."""

    name: str
    states: Mapping[str, StateInfo]
    transitions: tuple[Transition, ...]
    initial: str = IDLE
    _next: Mapping[tuple[str, str], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_next",
            MappingProxyType({(t.source, t.event): t.target for t in self.transitions}),
        )

    @classmethod
    def of(cls, name: str, states: Mapping[str, StateInfo], *edges: Iterable[Transition]) -> Graph:
        """The graph named ``name`` over ``states`` (the engine's start state is added, and
        each of its end states an edge leads to), with every group of ``edges`` in order.

        Raises:
            GraphError: the graph breaks a rule (see ``problems``).
        """
        graph = cls.unchecked(name, states, *edges)
        found = graph.problems()
        if found:
            raise GraphError(f"graph {name!r} is invalid: " + "; ".join(p.text for p in found))
        return graph

    @classmethod
    def unchecked(
        cls, name: str, states: Mapping[str, StateInfo], *edges: Iterable[Transition]
    ) -> Graph:
        """The graph ``Graph.of`` builds, without checking it (to ask it for its
        ``problems``)."""
        transitions = tuple(
            Transition(str(t.source), str(t.event), str(t.target)) for group in edges for t in group
        )
        every = {IDLE: START_INFO, **{str(state): info for state, info in states.items()}}
        targets = {t.target for t in transitions}
        every.update((end, info) for end, info in END_INFOS.items() if end in targets)
        return cls(name, MappingProxyType(every), transitions)

    # Walking it.

    def next_state(self, state: str, event: str) -> str:
        """The state that ``event`` moves ``state`` to.

        Raises:
            InvalidTransition: the graph has no such edge.
        """
        target = self._next.get((str(state), str(event)))
        if target is None:
            allowed = ", ".join(sorted(self.allowed_events(state))) or "none"
            raise InvalidTransition(str(state), str(event), f"allowed events: {allowed}")
        return target

    def allowed_events(self, state: str) -> list[str]:
        """The events the graph accepts in ``state``, in definition order."""
        return [t.event for t in self.transitions if t.source == state]

    def info(self, state: str) -> StateInfo:
        """What ``state`` means (its status, progress, role).

        Raises:
            InvalidTransition: the graph has no such state.
        """
        found = self.states.get(str(state))
        if found is None:
            raise InvalidTransition(str(state), "(lookup)", f"{self.name} has no such state")
        return found

    def is_terminal(self, state: str) -> bool:
        """True for states a run never leaves."""
        return self.info(state).role == Role.END

    def status_of(self, state: str) -> Status:
        """The status category the contract reports for ``state``."""
        return self.info(state).status

    def progress_of(self, state: str) -> int:
        """Progress in percent for ``state``."""
        return self.info(state).progress

    def with_role(self, *roles: Role) -> frozenset[str]:
        """The states whose role is one of ``roles``."""
        return frozenset(name for name, info in self.states.items() if info.role in roles)

    @property
    def terminal_states(self) -> frozenset[str]:
        """The states a run ends in."""
        return self.with_role(Role.END)

    @property
    def review_states(self) -> frozenset[str]:
        """The states in which a run waits for a reviewer."""
        return self.with_role(Role.REVIEW, Role.ESCALATION)

    @property
    def working_states(self) -> frozenset[str]:
        """The states a pipeline's handlers do the work of."""
        return self.with_role(Role.WORK)

    @property
    def shown_states(self) -> frozenset[str]:
        """The states visibility (``AiState``) shows."""
        return frozenset(name for name, info in self.states.items() if info.shown)

    @property
    def resumable_states(self) -> frozenset[str]:
        """Where a continued run may resume: a review wait, or the state a reedit leads to
        (the safe points at which a run continues as new)."""
        reedited = {t.target for t in self.transitions if t.event == Event.REEDIT}
        return self.review_states | reedited

    def reedit_target(self, state: str) -> str | None:
        """The state a reedit decision leads to from ``state``, if it takes one."""
        return self._next.get((str(state), Event.REEDIT.value))

    def target_of(self, state: str, event: str) -> str | None:
        """Where ``event`` leads from ``state``, or None when the graph has no such edge."""
        return self._next.get((str(state), str(event)))

    def reachable_from(self, start: str, *, cancels: bool = True) -> set[str]:
        """Every state reachable from ``start`` (including itself); without ``cancels``,
        along the edges other than ``cancel``."""
        seen = {start}
        frontier = [start]
        edges = [t for t in self.transitions if cancels or t.event != Event.CANCEL]
        while frontier:
            current = frontier.pop()
            for edge in edges:
                if edge.source == current and edge.target not in seen:
                    seen.add(edge.target)
                    frontier.append(edge.target)
        return seen

    # Checking it.

    def problems(self) -> list[GraphProblem]:
        """Every rule the graph breaks (none: it is valid), each with the state it concerns.

        Every edge joins known states and no (state, event) pair leads two ways; every state
        is reachable from the initial one; every non-terminal state reaches a terminal one
        other than by a cancel and has an edge out, terminal states none; every non-terminal
        state can be cancelled; and progress never goes down along an edge (states on one
        loop share their progress).
        """
        found: list[GraphProblem] = []
        seen: dict[tuple[str, str], str] = {}
        for edge in self.transitions:
            arrow = f"{edge.source} -{edge.event}->"
            for end in (edge.source, edge.target):
                if end not in self.states:
                    text = f"edge {arrow} {edge.target}: no {end!r}"
                    found.append(GraphProblem(GraphRule.KNOWN_STATES, edge.source, text))
            key = (edge.source, edge.event)
            if seen.get(key, edge.target) != edge.target:
                text = f"{arrow} leads to two states"
                found.append(GraphProblem(GraphRule.ONE_TARGET, edge.source, text))
            seen[key] = edge.target
        if found:
            return found
        reachable = self.reachable_from(self.initial)
        ends = self.terminal_states
        for name, info in self.states.items():
            outgoing = self.allowed_events(name)
            if name not in reachable:
                text = f"{name} is not reachable from {self.initial}"
                found.append(GraphProblem(GraphRule.REACHABLE, name, text))
            if info.role == Role.END:
                if outgoing:
                    text = f"terminal state {name} has edges out"
                    found.append(GraphProblem(GraphRule.FINAL_ENDS, name, text))
                continue
            if not self.reachable_from(name, cancels=False) & ends:
                text = f"{name} reaches no terminal state (a cancel aside)"
                found.append(GraphProblem(GraphRule.ENDS, name, text))
            if Event.CANCEL.value not in outgoing:
                text = f"{name} cannot be cancelled"
                found.append(GraphProblem(GraphRule.CANCELLABLE, name, text))
        for edge in self.transitions:
            source, target = self.progress_of(edge.source), self.progress_of(edge.target)
            if target < source:
                text = (
                    f"progress goes down along {edge.source} -{edge.event}-> {edge.target} "
                    f"({source}% to {target}%)"
                )
                found.append(GraphProblem(GraphRule.PROGRESS, edge.source, text))
        return found

    # Drawing it.

    def to_dot(self) -> str:
        """The graph in Graphviz DOT, one edge per transition."""
        lines = [
            f"digraph {self.name} {{",
            "  rankdir=LR;",
            '  node [shape=box, style=rounded, fontname="Helvetica"];',
        ]
        for state, info in self.states.items():
            shape = "doublecircle" if info.role == Role.END else "box"
            label = f"{state}\\n{info.status.value} {info.progress}%"
            lines.append(f'  {state} [label="{label}", shape={shape}];')
        for edge in self.transitions:
            style = ", style=dashed, color=gray" if edge.event == Event.CANCEL else ""
            lines.append(f'  {edge.source} -> {edge.target} [label="{edge.event}"{style}];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def to_mermaid(self, *, cancel_edges: bool = True) -> str:
        """The graph as a Mermaid state diagram, one edge per transition; without
        ``cancel_edges`` the ``cancel`` edges give way to one note on their target (every open
        state has one), for a page where the diagram must stay short."""
        lines = ["stateDiagram-v2", f"    [*] --> {self.initial}"]
        cancelled = {e.target for e in self.transitions if e.event == Event.CANCEL}
        for edge in self.transitions:
            if cancel_edges or edge.event != Event.CANCEL:
                lines.append(f"    {edge.source} --> {edge.target}: {edge.event}")
        if not cancel_edges:
            lines += [
                f"    note left of {state}: cancel, from every open state"
                for state in sorted(cancelled)
            ]
        for state in sorted(self.terminal_states):
            lines.append(f"    {state} --> [*]")
        return "\n".join(lines) + "\n"
