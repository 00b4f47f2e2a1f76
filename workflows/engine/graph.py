"""A pipeline's state graph as a value: states, the edges between them, and what each state
means to an observer, with pure methods to walk, check and draw it.

A ``Graph`` is plain data (as pydantic_graph's ``Graph``): the engine asks it "what next?" and
refuses what it does not allow; DOT and Mermaid diagrams come from it. It imports nothing from
temporalio, so it can be unit-tested and drawn anywhere.

Every pipeline shares the engine's own states and events (start, reviews, retries, capacity,
budget and batch waits, dead letters, cancel) and adds its working states with one call per
sub-graph (``review_edges``, ``retry_edges``, ``capacity_edges``, ``budget_edges``,
``batch_edges``, ``cancel_edges``). A
state's ``Role`` says who handles it: the pipeline (``WORK``) or the engine (everything else).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from workflows.errors import InvalidTransition, OrchestratorError


class Status(StrEnum):
    """The contract's status categories, coarser than states."""

    PENDING = "Pending"
    PROCESSING = "Processing"
    WAITING_FOR_INPUT = "WaitingForInput"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class Role(StrEnum):
    """Who handles a state: the pipeline's handler (``WORK``), or the engine.

    Compared by value (``==``), never by identity: a pipeline built outside the workflow
    sandbox and an engine module re-imported inside it hold different copies of this enum.
    """

    START = "start"
    WORK = "work"
    REVIEW = "review"
    ESCALATION = "escalation"
    RETRY = "retry"
    CAPACITY = "capacity"
    BUDGET = "budget"
    BATCH = "batch"
    END = "end"


class Event(StrEnum):
    """The events every pipeline shares; a pipeline names its own as plain strings."""

    START = "start"
    RETRYABLE_ERROR = "retryable_error"
    PERMANENT_ERROR = "permanent_error"
    BACKOFF_ELAPSED = "backoff_elapsed"
    EXHAUSTED = "exhausted"
    APPROVE = "approve"
    REEDIT = "reedit"
    REJECT = "reject"
    CORRECT = "correct"
    REVIEW_TIMEOUT = "review_timeout"
    ESCALATION_TIMEOUT = "escalation_timeout"
    CANCEL = "cancel"
    CAPACITY_WAIT = "capacity_wait"
    CAPACITY_READY = "capacity_ready"
    OVER_BUDGET = "over_budget"
    BUDGET_EXCEEDED = "budget_exceeded"
    OVERSPEND_APPROVED = "overspend_approved"
    OVERSPEND_REJECTED = "overspend_rejected"
    BUDGET_TIMEOUT = "budget_timeout"
    BATCH_SUBMITTED = "batch_submitted"
    BATCH_DONE = "batch_done"


# The states every pipeline shares: where a run starts and where it can end.
IDLE = "idle"
COMPLETED = "completed"
FAILED = "failed"
DEAD_LETTER = "dead_letter"
CANCELLED = "cancelled"
TERMINAL_STATES: frozenset[str] = frozenset({COMPLETED, FAILED, DEAD_LETTER, CANCELLED})
# The states a run's result names (a cancelled run has none: it is cancelled).
FINAL_STATES: frozenset[str] = frozenset({COMPLETED, FAILED, DEAD_LETTER})
# The names the engine's review sub-graph uses unless a pipeline names its own.
AWAIT_REVIEW = "await_review"
ESCALATE = "escalate"
AWAIT_CAPACITY = "await_capacity"
AWAIT_BUDGET = "await_budget"
AWAIT_BATCH = "await_batch"


@dataclass(frozen=True)
class StateInfo:
    """What a state means: its status category, progress in percent, a description, who
    handles it, and whether visibility shows it (``AiState``: each upsert is a billable action,
    so states a run only passes through are not shown)."""

    status: Status
    progress: int
    description: str
    role: Role = Role.WORK
    shown: bool = True


@dataclass(frozen=True)
class Transition:
    """One allowed edge of the graph."""

    source: str
    event: str
    target: str


class GraphError(OrchestratorError):
    """A graph that breaks the engine's rules; the message lists every problem."""


# The engine's states with the meaning they have in every pipeline.
START_INFO = StateInfo(Status.PENDING, 0, "accepted, not started", Role.START, shown=False)
END_INFOS: Mapping[str, StateInfo] = MappingProxyType(
    {
        COMPLETED: StateInfo(Status.COMPLETED, 100, "done", Role.END),
        FAILED: StateInfo(Status.FAILED, 100, "failed permanently or rejected", Role.END),
        DEAD_LETTER: StateInfo(
            Status.FAILED, 100, "gave up; sent to the dead-letter queue", Role.END
        ),
        CANCELLED: StateInfo(Status.CANCELLED, 100, "cancelled; compensation done", Role.END),
    }
)


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
        transitions = tuple(
            Transition(str(t.source), str(t.event), str(t.target)) for group in edges for t in group
        )
        every = {IDLE: START_INFO, **{str(state): info for state, info in states.items()}}
        targets = {t.target for t in transitions}
        every.update((end, info) for end, info in END_INFOS.items() if end in targets)
        graph = cls(name, MappingProxyType(every), transitions)
        found = graph.problems()
        if found:
            raise GraphError(f"graph {name!r} is invalid: " + "; ".join(found))
        return graph

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

    def reachable_from(self, start: str) -> set[str]:
        """Every state reachable from ``start`` (including itself)."""
        seen = {start}
        frontier = [start]
        while frontier:
            current = frontier.pop()
            for edge in self.transitions:
                if edge.source == current and edge.target not in seen:
                    seen.add(edge.target)
                    frontier.append(edge.target)
        return seen

    # Checking it.

    def problems(self) -> list[str]:
        """Every rule the graph breaks, one sentence each (none: it is valid).

        Every edge joins known states and no (state, event) pair leads two ways; every state
        is reachable from the initial one; every non-terminal state reaches a terminal one and
        has an edge out, terminal states none; every non-terminal state can be cancelled; and
        progress never goes down along an edge (states on one loop share their progress).
        """
        found: list[str] = []
        seen: dict[tuple[str, str], str] = {}
        for edge in self.transitions:
            for end in (edge.source, edge.target):
                if end not in self.states:
                    found.append(f"edge {edge.source} -{edge.event}-> {edge.target}: no {end!r}")
            key = (edge.source, edge.event)
            if seen.get(key, edge.target) != edge.target:
                found.append(f"{edge.source} -{edge.event}-> leads to two states")
            seen[key] = edge.target
        if found:
            return found
        reachable = self.reachable_from(self.initial)
        ends = self.terminal_states
        for name, info in self.states.items():
            outgoing = self.allowed_events(name)
            if name not in reachable:
                found.append(f"{name} is not reachable from {self.initial}")
            if info.role == Role.END:
                if outgoing:
                    found.append(f"terminal state {name} has edges out")
                continue
            if not self.reachable_from(name) & ends:
                found.append(f"{name} reaches no terminal state")
            if Event.CANCEL.value not in outgoing:
                found.append(f"{name} cannot be cancelled")
        for edge in self.transitions:
            if self.progress_of(edge.target) < self.progress_of(edge.source):
                found.append(
                    f"progress goes down along {edge.source} -{edge.event}-> {edge.target} "
                    f"({self.progress_of(edge.source)}% to {self.progress_of(edge.target)}%)"
                )
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


# The shared sub-graphs: each returns the edges a pipeline adds with one call.


def review_edges(
    *,
    approve: str,
    reedit: str,
    reject: str = FAILED,
    correct: str | None = None,
    review: str = AWAIT_REVIEW,
    escalation: str = ESCALATE,
) -> tuple[Transition, ...]:
    """A review: from ``review`` and, after its timeout, ``escalation``, each decision leads on
    (``correct``: approved with corrected fields, when the pipeline takes them); the
    escalation's timeout dead-letters the run."""
    decisions = [(Event.APPROVE, approve), (Event.REEDIT, reedit), (Event.REJECT, reject)]
    if correct is not None:
        decisions.append((Event.CORRECT, correct))
    return (
        *(Transition(review, event, target) for event, target in decisions),
        Transition(review, Event.REVIEW_TIMEOUT, escalation),
        *(Transition(escalation, event, target) for event, target in decisions),
        Transition(escalation, Event.ESCALATION_TIMEOUT, DEAD_LETTER),
    )


def review_states(
    progress: int,
    *,
    review: str = AWAIT_REVIEW,
    escalation: str = ESCALATE,
    shown: str | None = None,
    escalated: str | None = None,
) -> dict[str, StateInfo]:
    """The two states of a review (``review_edges``), at ``progress``, described by ``shown``
    and ``escalated`` where given."""
    return {
        review: StateInfo(
            Status.WAITING_FOR_INPUT, progress, shown or "waiting for a reviewer", Role.REVIEW
        ),
        escalation: StateInfo(
            Status.WAITING_FOR_INPUT,
            progress,
            escalated or "review timed out; escalated",
            Role.ESCALATION,
        ),
    }


def retry_edges(step: str, retry: str) -> tuple[Transition, ...]:
    """Retry with backoff: a retryable failure of ``step`` waits in ``retry``, then tries
    again, until the attempts run out and the run is dead-lettered."""
    return (
        Transition(step, Event.RETRYABLE_ERROR, retry),
        Transition(retry, Event.BACKOFF_ELAPSED, step),
        Transition(retry, Event.EXHAUSTED, DEAD_LETTER),
    )


def capacity_edges(step: str, wait: str = AWAIT_CAPACITY) -> tuple[Transition, ...]:
    """No capacity for ``step``'s call: wait (a timer) without calling or spending an attempt."""
    return (
        Transition(step, Event.CAPACITY_WAIT, wait),
        Transition(wait, Event.CAPACITY_READY, step),
    )


def budget_edges(step: str, wait: str = AWAIT_BUDGET) -> tuple[Transition, ...]:
    """``step``'s call would cross a budget: an operator decides (policy ``wait``), or the run is
    dead-lettered, to be redriven once the budget allows (policy ``fail``)."""
    return (
        Transition(step, Event.OVER_BUDGET, wait),
        Transition(step, Event.BUDGET_EXCEEDED, DEAD_LETTER),
        Transition(wait, Event.OVERSPEND_APPROVED, step),
        Transition(wait, Event.OVERSPEND_REJECTED, FAILED),
        Transition(wait, Event.BUDGET_TIMEOUT, DEAD_LETTER),
    )


def batch_edges(step: str, wait: str = AWAIT_BATCH) -> tuple[Transition, ...]:
    """``step``'s call went into the provider's batch API: wait for its answer, then the step
    takes up the outcome (an answer or a failure) as it would a synchronous call's."""
    return (
        Transition(step, Event.BATCH_SUBMITTED, wait),
        Transition(wait, Event.BATCH_DONE, step),
    )


def cancel_edges(states: Iterable[str]) -> tuple[Transition, ...]:
    """Cancel from each of ``states`` (give it every non-terminal state)."""
    return tuple(Transition(state, Event.CANCEL, CANCELLED) for state in states)
