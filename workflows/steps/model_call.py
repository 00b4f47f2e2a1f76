"""The model call's sub-graph, for any pipeline's graph: the states a call waits in (its
retry's backoff, the model's shared capacity, an operator's budget decision, the provider's
batch) with what each means, and the edges between them and the calling step.

A pipeline adds both with one call each, next to its calling step's own state and edges
(``workflows.steps.llm_call`` runs the step and moves the run along these edges)::

    CALL = CallStates(retry="retry_llm")
    GRAPH = Graph.of(
        NAME,
        {State.INVOKE_LLM: StateInfo(...), **model_call_states(60, CALL)},
        ...,
        model_call_edges(State.INVOKE_LLM, CALL),
    )
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from workflows.engine.graph import (
    AWAIT_BATCH,
    AWAIT_BUDGET,
    AWAIT_CAPACITY,
    Role,
    StateInfo,
    Status,
    Transition,
    batch_edges,
    budget_edges,
    capacity_edges,
    retry_edges,
)

Wait = Literal["retry", "capacity", "budget", "batch"]
# The kinds of wait, in the order their states are listed.
WAITS: Final[tuple[Wait, ...]] = ("retry", "capacity", "budget", "batch")
DESCRIPTIONS: Final[Mapping[Wait, str]] = MappingProxyType(
    {
        "retry": "backing off before the next model attempt",
        "capacity": "queued for the model's shared capacity (rate limit)",
        "budget": "the next call would cross a budget; waiting for an operator",
        "batch": "the call is in the provider's batch; waiting for its answer",
    }
)
_STATUS: Final[Mapping[Wait, Status]] = MappingProxyType(
    {
        "retry": Status.PROCESSING,
        "capacity": Status.PENDING,
        "budget": Status.WAITING_FOR_INPUT,
        "batch": Status.PENDING,
    }
)
_ROLE: Final[Mapping[Wait, Role]] = MappingProxyType(
    {"retry": Role.RETRY, "capacity": Role.CAPACITY, "budget": Role.BUDGET, "batch": Role.BATCH}
)


@dataclass(frozen=True)
class CallStates:
    """The names of one model call's wait states. The retry state is the calling step's own;
    a graph with one model call keeps the engine's names for the other three."""

    retry: str
    capacity: str = AWAIT_CAPACITY
    budget: str = AWAIT_BUDGET
    batch: str = AWAIT_BATCH

    def named(self, wait: Wait) -> str:
        """The name of the state of ``wait``."""
        name: str = getattr(self, wait)
        return name


def model_call_states(
    progress: int, names: CallStates, *, descriptions: Mapping[Wait, str] | None = None
) -> dict[str, StateInfo]:
    """The wait states of a model call (``model_call_edges``), at the calling step's
    ``progress`` (the call and its waits form one loop, so they share one figure), described
    by ``descriptions`` where given, else by ``DESCRIPTIONS``."""
    given = descriptions or {}
    return {
        names.named(wait): StateInfo(
            _STATUS[wait], progress, given.get(wait) or DESCRIPTIONS[wait], _ROLE[wait]
        )
        for wait in WAITS
    }


def model_call_edges(step: str, names: CallStates) -> tuple[Transition, ...]:
    """The edges between the model call ``step`` and its wait states: a retryable failure
    backs off (``retry_edges``), a call without capacity waits for it (``capacity_edges``), a
    call over budget waits for an operator or dead-letters the run (``budget_edges``), and a
    batched call waits for the batch (``batch_edges``)."""
    return (
        *retry_edges(step, names.retry),
        *capacity_edges(step, names.capacity),
        *budget_edges(step, names.budget),
        *batch_edges(step, names.batch),
    )
