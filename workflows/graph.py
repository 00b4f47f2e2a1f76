"""The pipeline's state graph, as plain data plus pure functions.

This module is the single definition of the graph: the workflow asks it "what next?", the
validator refuses what it does not allow, and the DOT and Mermaid diagrams in ``docs/`` and the
README are generated from it. It imports nothing from temporalio so it can be unit-tested and
drawn anywhere, and the workflow sandbox can load it without pass-through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from workflows.errors import InvalidTransition


class State(StrEnum):
    """Every state a run can be in. The values are the contract's state names."""

    IDLE = "idle"
    FETCH_PROMPT = "fetch_prompt"
    INVOKE_LLM = "invoke_llm"
    AWAIT_CAPACITY = "await_capacity"
    AWAIT_BUDGET = "await_budget"
    RETRY_LLM = "retry_llm"
    AWAIT_REVIEW = "await_review"
    ESCALATE = "escalate"
    GENERATE_EMBEDDING = "generate_embedding"
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"
    CANCELLED = "cancelled"


class Status(StrEnum):
    """The contract's status categories, coarser than states."""

    PENDING = "Pending"
    PROCESSING = "Processing"
    WAITING_FOR_INPUT = "WaitingForInput"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class Event(StrEnum):
    """What happened to move a run from one state to the next."""

    START = "start"
    PROMPT_READY = "prompt_ready"
    LLM_OK = "llm_ok"
    NEEDS_REVIEW = "needs_review"
    RETRYABLE_ERROR = "retryable_error"
    PERMANENT_ERROR = "permanent_error"
    BACKOFF_ELAPSED = "backoff_elapsed"
    EXHAUSTED = "exhausted"
    APPROVE = "approve"
    REEDIT = "reedit"
    REJECT = "reject"
    REVIEW_TIMEOUT = "review_timeout"
    ESCALATION_TIMEOUT = "escalation_timeout"
    EMBEDDED = "embedded"
    CANCEL = "cancel"
    # Shared capacity and cost budgets (docs/capacity.md).
    CAPACITY_WAIT = "capacity_wait"
    CAPACITY_READY = "capacity_ready"
    OVER_BUDGET = "over_budget"
    BUDGET_EXCEEDED = "budget_exceeded"
    OVERSPEND_APPROVED = "overspend_approved"
    OVERSPEND_REJECTED = "overspend_rejected"
    BUDGET_TIMEOUT = "budget_timeout"


@dataclass(frozen=True)
class StateInfo:
    """What a state means to an observer: its status category and progress in percent."""

    status: Status
    progress: int
    description: str


@dataclass(frozen=True)
class Transition:
    """One allowed edge of the graph."""

    source: State
    event: Event
    target: State


STATES: Mapping[State, StateInfo] = MappingProxyType(
    {
        State.IDLE: StateInfo(Status.PENDING, 0, "accepted, not started"),
        State.FETCH_PROMPT: StateInfo(
            Status.PROCESSING, 10, "loading input and building the prompt"
        ),
        State.INVOKE_LLM: StateInfo(Status.PROCESSING, 30, "calling the LLM"),
        State.AWAIT_CAPACITY: StateInfo(
            Status.PENDING, 25, "queued for the model's shared capacity (rate limit)"
        ),
        State.AWAIT_BUDGET: StateInfo(
            Status.WAITING_FOR_INPUT,
            25,
            "the next call would cross a budget; waiting for an operator",
        ),
        State.RETRY_LLM: StateInfo(
            Status.PROCESSING, 30, "backing off before the next LLM attempt"
        ),
        State.AWAIT_REVIEW: StateInfo(Status.WAITING_FOR_INPUT, 60, "waiting for a reviewer"),
        State.ESCALATE: StateInfo(Status.WAITING_FOR_INPUT, 60, "review timed out; escalated"),
        State.GENERATE_EMBEDDING: StateInfo(
            Status.PROCESSING, 85, "embedding and storing the output"
        ),
        State.COMPLETED: StateInfo(Status.COMPLETED, 100, "done"),
        State.FAILED: StateInfo(Status.FAILED, 100, "failed permanently or rejected"),
        State.DEAD_LETTER: StateInfo(Status.FAILED, 100, "gave up; sent to the dead-letter queue"),
        State.CANCELLED: StateInfo(Status.CANCELLED, 100, "cancelled; compensation done"),
    }
)

TERMINAL_STATES: frozenset[State] = frozenset(
    {State.COMPLETED, State.FAILED, State.DEAD_LETTER, State.CANCELLED}
)
# The states in which a run waits for a reviewer (State is a str, so the names match too).
REVIEW_STATES: frozenset[State] = frozenset({State.AWAIT_REVIEW, State.ESCALATE})
# The states the AiState search attribute shows: every state a run can rest or wait in for
# long (a slow or throttled LLM, a reviewer, a document being loaded) and where it ends.
# A run passes through the others within one workflow task (idle; the inline fetch_prompt)
# or in moments (generate_embedding), and publishing them would cost a billable action each.
SHOWN_STATES: frozenset[State] = frozenset(
    {
        State.FETCH_PROMPT,
        State.INVOKE_LLM,
        State.AWAIT_CAPACITY,
        State.AWAIT_BUDGET,
        State.RETRY_LLM,
        *REVIEW_STATES,
        *TERMINAL_STATES,
    }
)


def first_shown_state(*, by_reference: bool) -> State:
    """The state a new run will first rest in: the one a starter sets as its initial
    ``AiState`` (free at start), so the run's first task need not publish it."""
    return State.FETCH_PROMPT if by_reference else State.INVOKE_LLM


_REVIEW_DECISIONS = (
    (Event.APPROVE, State.GENERATE_EMBEDDING),
    (Event.REEDIT, State.INVOKE_LLM),
    (Event.REJECT, State.FAILED),
)

TRANSITIONS: tuple[Transition, ...] = (
    Transition(State.IDLE, Event.START, State.FETCH_PROMPT),
    Transition(State.FETCH_PROMPT, Event.PROMPT_READY, State.INVOKE_LLM),
    Transition(State.FETCH_PROMPT, Event.PERMANENT_ERROR, State.FAILED),
    Transition(State.INVOKE_LLM, Event.LLM_OK, State.GENERATE_EMBEDDING),
    Transition(State.INVOKE_LLM, Event.NEEDS_REVIEW, State.AWAIT_REVIEW),
    Transition(State.INVOKE_LLM, Event.RETRYABLE_ERROR, State.RETRY_LLM),
    Transition(State.INVOKE_LLM, Event.PERMANENT_ERROR, State.FAILED),
    # No capacity for the call: wait (a timer) without calling or spending an attempt.
    Transition(State.INVOKE_LLM, Event.CAPACITY_WAIT, State.AWAIT_CAPACITY),
    Transition(State.AWAIT_CAPACITY, Event.CAPACITY_READY, State.INVOKE_LLM),
    # The call would cross a budget: an operator decides (BUDGET_POLICY=wait), or the run is
    # dead-lettered, to be redriven once the budget allows (BUDGET_POLICY=fail).
    Transition(State.INVOKE_LLM, Event.OVER_BUDGET, State.AWAIT_BUDGET),
    Transition(State.INVOKE_LLM, Event.BUDGET_EXCEEDED, State.DEAD_LETTER),
    Transition(State.AWAIT_BUDGET, Event.OVERSPEND_APPROVED, State.INVOKE_LLM),
    Transition(State.AWAIT_BUDGET, Event.OVERSPEND_REJECTED, State.FAILED),
    Transition(State.AWAIT_BUDGET, Event.BUDGET_TIMEOUT, State.DEAD_LETTER),
    Transition(State.RETRY_LLM, Event.BACKOFF_ELAPSED, State.INVOKE_LLM),
    Transition(State.RETRY_LLM, Event.EXHAUSTED, State.DEAD_LETTER),
    *(Transition(State.AWAIT_REVIEW, event, target) for event, target in _REVIEW_DECISIONS),
    Transition(State.AWAIT_REVIEW, Event.REVIEW_TIMEOUT, State.ESCALATE),
    *(Transition(State.ESCALATE, event, target) for event, target in _REVIEW_DECISIONS),
    Transition(State.ESCALATE, Event.ESCALATION_TIMEOUT, State.DEAD_LETTER),
    Transition(State.GENERATE_EMBEDDING, Event.EMBEDDED, State.COMPLETED),
    Transition(State.GENERATE_EMBEDDING, Event.EXHAUSTED, State.DEAD_LETTER),
    *(
        Transition(state, Event.CANCEL, State.CANCELLED)
        for state in State
        if state not in TERMINAL_STATES
    ),
)

_NEXT: Mapping[tuple[State, Event], State] = MappingProxyType(
    {(t.source, t.event): t.target for t in TRANSITIONS}
)


def next_state(state: State | str, event: Event | str) -> State:
    """Return the state that ``event`` moves ``state`` to.

    Raises:
        InvalidTransition: the graph has no such edge (or a name is unknown).
    """
    try:
        source, trigger = State(state), Event(event)
    except ValueError as err:
        raise InvalidTransition(str(state), str(event), f"unknown name: {err}") from None
    target = _NEXT.get((source, trigger))
    if target is None:
        allowed = ", ".join(sorted(e.value for e in allowed_events(source))) or "none"
        raise InvalidTransition(source, trigger, f"allowed events: {allowed}")
    return target


def allowed_events(state: State) -> list[Event]:
    """The events the graph accepts in ``state``, in definition order."""
    return [t.event for t in TRANSITIONS if t.source == state]


def is_terminal(state: State | str) -> bool:
    """True for states a run never leaves."""
    return State(state) in TERMINAL_STATES


def status_of(state: State | str) -> Status:
    """The status category the contract reports for ``state``."""
    return STATES[State(state)].status


def progress_of(state: State | str) -> int:
    """Progress in percent for ``state``."""
    return STATES[State(state)].progress


def reachable_from(start: State, transitions: Iterable[Transition] = TRANSITIONS) -> set[State]:
    """Every state reachable from ``start`` (including itself)."""
    edges = list(transitions)
    seen = {start}
    frontier = [start]
    while frontier:
        current = frontier.pop()
        for edge in edges:
            if edge.source == current and edge.target not in seen:
                seen.add(edge.target)
                frontier.append(edge.target)
    return seen


def to_dot() -> str:
    """The graph in Graphviz DOT, one edge per transition."""
    lines = [
        "digraph AiOrchestrator {",
        "  rankdir=LR;",
        '  node [shape=box, style=rounded, fontname="Helvetica"];',
    ]
    for state, info in STATES.items():
        shape = "doublecircle" if state in TERMINAL_STATES else "box"
        label = f"{state.value}\\n{info.status.value} {info.progress}%"
        lines.append(f'  {state.value} [label="{label}", shape={shape}];')
    for edge in TRANSITIONS:
        style = ", style=dashed, color=gray" if edge.event is Event.CANCEL else ""
        lines.append(
            f'  {edge.source.value} -> {edge.target.value} [label="{edge.event.value}"{style}];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid() -> str:
    """The graph as a Mermaid state diagram, one edge per transition."""
    lines = ["stateDiagram-v2", f"    [*] --> {State.IDLE.value}"]
    for edge in TRANSITIONS:
        lines.append(f"    {edge.source.value} --> {edge.target.value}: {edge.event.value}")
    for state in sorted(TERMINAL_STATES):
        lines.append(f"    {state.value} --> [*]")
    return "\n".join(lines) + "\n"
