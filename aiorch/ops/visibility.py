"""Where runs are, as Temporal's visibility store sees them.

Every run carries the search attributes the contract names (``workflows.contract``):
``AiState`` (Keyword, the state the run rests in), ``AiStateSince`` (Datetime, since when) and
``AiReviewRound`` (Int, the review round it waits on). This module is the one place the
operator's tools use them: the queries built from them, and starting a run that visibility
shows in its first resting state from its first moment (set at start, where it costs nothing;
a worker sets the rest), and whose tasks leave the task queue fairly among tenants
(``task_priority``). A run that no worker has picked up yet has no ``AiStateSince``; its start
time stands in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from temporalio.client import Client, WorkflowExecution
from temporalio.common import (
    Priority,
    SearchAttributeIndexedValueType,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)

from aiorch.ops import pipelines
from aiorch_runtime.config import BudgetSettings
from workflows import contract
from workflows.engine.graph import FINAL_STATES as FINAL_STATES
from workflows.engine.pipeline import Pipeline
from workflows.payloads import DEFAULT_TENANT, RequestBase

SEARCH_ATTRIBUTE_KEYS = (
    contract.AI_STATE,
    contract.AI_STATE_SINCE,
    contract.AI_REVIEW_ROUND,
    contract.AI_PIPELINE_VERSION,
)

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


def runs_query(*clauses: str, pipeline: str | None = None) -> str:
    """The project's runs (of every pipeline, or of the one named ``pipeline``) on the worker's
    task queue, narrowed by every non-empty clause (joined with AND).

    The task queue is part of what makes a run ours: a look-alike (a pipeline's workflow type
    on a worker of someone else's, on another task queue) is never listed, counted or acted on.

    Raises:
        ValueError: ``TEMPORAL_TASK_QUEUE`` holds a quote or a backslash (no query can name it).
    """
    types = [pipelines.named(pipeline).workflow_type] if pipeline else pipelines.workflow_types()
    listed = ", ".join(f"'{name}'" for name in types)
    queue = pipelines.task_queue()
    if any(character in queue for character in "'\"\\"):
        raise ValueError("TEMPORAL_TASK_QUEUE holds a quote or a backslash: no query can name it")
    clause = f"TaskQueue = '{queue}'"
    return " AND ".join([f"WorkflowType IN ({listed})", clause, *filter(None, clauses)])


def waiting_for_review(pipeline: str | None = None) -> str:
    """Open runs (of every pipeline, or of the one named ``pipeline``) that wait in any review
    state of any pipeline, pipeline files' too: the inbox's list and ``list --waiting``."""
    return runs_query(OPEN, state_in(pipelines.review_states()), pipeline=pipeline)


def state_is(state: str) -> str:
    """Runs whose ``AiState`` is ``state``."""
    return f"{contract.AI_STATE.name} = '{_known(state)}'"


def state_in(states: Iterable[str]) -> str:
    """Runs whose ``AiState`` is one of ``states``."""
    listed = ", ".join(f"'{_known(state)}'" for state in sorted(states))
    return f"{contract.AI_STATE.name} IN ({listed})"


def _known(state: str) -> str:
    """``state``, once it is a state of some pipeline (so it is safe in a query).

    Raises:
        ValueError: no pipeline has that state.
    """
    if state not in pipelines.all_states():
        raise ValueError(f"no pipeline has a state {state[:64]!r}")
    return str(state)


def since_before(cutoff: datetime) -> str:
    """Runs that entered their current state before ``cutoff``, or started before it and have
    no ``AiStateSince`` yet (no worker has picked them up)."""
    since, at = contract.AI_STATE_SINCE.name, visibility_time(cutoff)
    return f"({since} < '{at}' OR ({since} IS NULL AND StartTime < '{at}'))"


def state_of(execution: WorkflowExecution) -> str | None:
    """The run's ``AiState`` as visibility shows it (None: not set yet)."""
    return execution.typed_search_attributes.get(contract.AI_STATE)


def version_of(execution: WorkflowExecution) -> str | None:
    """The version of its pipeline file a run follows (``AiPipelineVersion``; None for a
    pipeline written in Python, or before the run first rests in a state)."""
    return execution.typed_search_attributes.get(contract.AI_PIPELINE_VERSION)


def since_of(execution: WorkflowExecution) -> datetime:
    """When the run entered its current state (its start time while it has no
    ``AiStateSince``)."""
    attributes = execution.typed_search_attributes
    return attributes.get(contract.AI_STATE_SINCE) or execution.start_time


def initial_search_attributes(
    pipeline: Pipeline[Any, Any], request: RequestBase
) -> TypedSearchAttributes:
    """What a run is started with: ``AiState`` set to the state it will first rest in, so
    visibility shows it at once and its first workflow task need not publish it (a billable
    upsert)."""
    first = pipeline.first_state(request)
    return TypedSearchAttributes([SearchAttributePair(contract.AI_STATE, str(first))])


def task_priority(request: RequestBase, settings: BudgetSettings) -> Priority:
    """How the run's tasks (its workflow tasks and, inherited, its activities') leave the task
    queue: its tenant as the fairness key, with the tenant's ``TENANT_WEIGHTS`` weight, so one
    tenant's backlog of tasks does not hold up another's (on a server with task queue fairness
    on: ``matching.enableFairness``), and its priority as planning narrows it."""
    tenant = request.tenant or DEFAULT_TENANT
    return Priority(
        priority_key=settings.run_priority(tenant, request.options.priority),
        fairness_key=tenant,
        fairness_weight=settings.tenant_weight(tenant),
    )


async def start_run(
    client: Client,
    request: RequestBase,
    *,
    task_queue: str,
    pipeline: Pipeline[Any, Any] | None = None,
    summary: str | None = None,
    priority: Priority = Priority.default,
) -> str:
    """Start ``request`` as a run of ``pipeline`` (default: the LLM pipeline) with its request
    id as workflow id; returns that id. ``priority``: how its tasks leave the task queue
    (``task_priority``; by default as the server's defaults say).

    The same request id twice is refused by the server, never run twice.

    Raises:
        temporalio.exceptions.WorkflowAlreadyStartedError: a run with this id was started before.
    """
    chosen = pipeline or pipelines.named(pipelines.DEFAULT_PIPELINE)
    handle = await client.start_workflow(
        chosen.workflow_type,
        request.model_dump(mode="json"),
        id=request.request_id,
        task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=initial_search_attributes(chosen, request),
        static_summary=summary or f"{chosen.name} pipeline run (review: {request.review})",
        static_details=request.describe(),
        priority=priority,
    )
    return handle.id
