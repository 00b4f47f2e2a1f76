"""Where runs are, as Temporal's visibility store sees them.

Every run carries the search attributes the contract names (``workflows.contract``):
``AiState`` (Keyword, the state the run rests in), ``AiStateSince`` (Datetime, since when) and
``AiReviewRound`` (Int, the review round it waits on). This module is the one place the
operator's tools use them: the queries built from them, and starting a run that visibility
shows in its first resting state from its first moment (set at start, where it costs nothing;
a worker sets the rest). A run that no worker has picked up yet has no ``AiStateSince``; its
start time stands in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import get_args

from temporalio.client import Client, WorkflowExecution
from temporalio.common import (
    SearchAttributeIndexedValueType,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)

from workflows import contract
from workflows.graph import State, first_shown_state
from workflows.payloads import FinalState, PipelineRequest

SEARCH_ATTRIBUTE_KEYS = (contract.AI_STATE, contract.AI_STATE_SINCE, contract.AI_REVIEW_ROUND)
# The states a run's result can name (`PipelineResult.state`): it returned in one of them.
FINAL_STATES: frozenset[State] = frozenset(State(name) for name in get_args(FinalState))

OPEN = "ExecutionStatus = 'Running'"
CLOSED = "ExecutionStatus != 'Running'"
# Closed with a result: completed, or failed with its result in the failure (failed and
# dead_letter runs close that way); not terminated, cancelled or timed out.
ENDED_WITH_RESULT = "ExecutionStatus IN ('Completed', 'Failed')"

_TYPE_NAMES: Mapping[SearchAttributeIndexedValueType, str] = MappingProxyType(
    {
        SearchAttributeIndexedValueType.KEYWORD: "Keyword",
        SearchAttributeIndexedValueType.DATETIME: "Datetime",
        SearchAttributeIndexedValueType.INT: "Int",
    }
)


def search_attribute_types() -> dict[str, str]:
    """The project's search attributes as ``name: type`` in the ``temporal`` CLI's words (what
    ``temporal server start-dev --search-attribute NAME=TYPE`` takes)."""
    return {key.name: _TYPE_NAMES[key.indexed_value_type] for key in SEARCH_ATTRIBUTE_KEYS}


def visibility_time(moment: datetime) -> str:
    """A datetime as a visibility query literal (RFC 3339, UTC)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def runs_query(*clauses: str) -> str:
    """The project's runs, narrowed by every non-empty clause (joined with AND)."""
    return " AND ".join([f"WorkflowType = '{contract.WORKFLOW_TYPE}'", *filter(None, clauses)])


def state_is(state: State | str) -> str:
    """Runs whose ``AiState`` is ``state``."""
    return f"{contract.AI_STATE.name} = '{State(state).value}'"


def state_in(states: Iterable[State]) -> str:
    """Runs whose ``AiState`` is one of ``states``."""
    listed = ", ".join(f"'{state.value}'" for state in sorted(states))
    return f"{contract.AI_STATE.name} IN ({listed})"


def since_before(cutoff: datetime) -> str:
    """Runs that entered their current state before ``cutoff``, or started before it and have
    no ``AiStateSince`` yet (no worker has picked them up)."""
    since, at = contract.AI_STATE_SINCE.name, visibility_time(cutoff)
    return f"({since} < '{at}' OR ({since} IS NULL AND StartTime < '{at}'))"


def state_of(execution: WorkflowExecution) -> str | None:
    """The run's ``AiState`` as visibility shows it (None: not set yet)."""
    return execution.typed_search_attributes.get(contract.AI_STATE)


def since_of(execution: WorkflowExecution) -> datetime:
    """When the run entered its current state (its start time while it has no
    ``AiStateSince``)."""
    attributes = execution.typed_search_attributes
    return attributes.get(contract.AI_STATE_SINCE) or execution.start_time


def initial_search_attributes(request: PipelineRequest) -> TypedSearchAttributes:
    """What a run is started with: ``AiState`` set to the state it will first rest in, so
    visibility shows it at once and its first workflow task need not publish it (a billable
    upsert)."""
    first = first_shown_state(by_reference=request.is_reference)
    return TypedSearchAttributes([SearchAttributePair(contract.AI_STATE, first.value)])


async def start_run(
    client: Client, request: PipelineRequest, *, task_queue: str, summary: str | None = None
) -> str:
    """Start ``request`` as a run with its request id as workflow id; returns that id.

    The same request id twice is refused by the server, never run twice.

    Raises:
        temporalio.exceptions.WorkflowAlreadyStartedError: a run with this id was started before.
    """
    handle = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        request.model_dump(mode="json"),
        id=request.request_id,
        task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=initial_search_attributes(request),
        static_summary=summary or f"AI pipeline run (review: {request.review})",
        static_details=f"request {request.request_id}: {request.user_message[:200]}",
    )
    return handle.id
