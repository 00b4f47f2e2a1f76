"""The shared sub-graphs: each returns the states or the edges a pipeline adds to its graph
with one call (a review, a retry's backoff, the capacity, budget and batch waits, cancels).

Plain data, as the graph is (``workflows.engine.graph`` names them in its face).
"""

from __future__ import annotations

from collections.abc import Iterable

from workflows.engine.vocabulary import (
    AWAIT_BATCH,
    AWAIT_BUDGET,
    AWAIT_CAPACITY,
    AWAIT_REVIEW,
    CANCELLED,
    DEAD_LETTER,
    ESCALATE,
    FAILED,
    Event,
    Role,
    StateInfo,
    Status,
    Transition,
)


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
