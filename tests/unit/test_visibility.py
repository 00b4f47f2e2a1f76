"""The search attributes and visibility queries every operator tool shares
(`aiorch.ops.visibility`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import get_args

import pytest

import workflows.llm.pipeline as llm
from aiorch.ops import pipelines
from aiorch.ops.visibility import (
    FINAL_STATES,
    initial_search_attributes,
    runs_query,
    search_attribute_types,
    state_in,
    state_is,
    visibility_time,
)
from aiorch_runtime.temporal import SEARCH_ATTRIBUTES
from workflows import contract
from workflows.llm.graph import State
from workflows.payloads import FinalState, PipelineRequest

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def test_visibility_time_is_utc() -> None:
    """Any timezone is written as UTC with a Z."""
    plus_two = T0.astimezone(timezone(timedelta(hours=2)))
    assert visibility_time(plus_two) == "2026-11-01T12:00:00Z"


QUEUE = f"TaskQueue = '{contract.DEFAULT_TASK_QUEUE}'"


def test_queries_name_the_workflow_types_and_skip_empty_clauses() -> None:
    """Every query is narrowed to the project's runs (of every pipeline, or of the one named)
    on the worker's task queue; clauses join with AND, empty ones drop; a state no pipeline has
    is refused."""
    every = ", ".join(f"'{name}'" for name in pipelines.workflow_types())
    assert "'AiOrchestrator'" in every
    assert runs_query() == f"WorkflowType IN ({every}) AND {QUEUE}"
    assert runs_query(state_is(State.ESCALATE), "") == (
        f"WorkflowType IN ({every}) AND {QUEUE} AND AiState = 'escalate'"
    )
    assert runs_query(pipeline="llm") == f"WorkflowType IN ('AiOrchestrator') AND {QUEUE}"
    assert state_in([State.FAILED, State.COMPLETED]) == "AiState IN ('completed', 'failed')"
    with pytest.raises(ValueError, match="no pipeline has a state"):
        state_is("x' OR WorkflowType != '")


@pytest.mark.parametrize("queue", ["evil' OR TaskQueue != '", 'a"b', "a\\b"])
def test_a_task_queue_no_query_can_name_is_refused(
    queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``TEMPORAL_TASK_QUEUE`` with a quote or backslash never reaches a query."""
    monkeypatch.setenv("TEMPORAL_TASK_QUEUE", queue)
    pipelines.reload()
    try:
        with pytest.raises(ValueError, match="TEMPORAL_TASK_QUEUE"):
            runs_query()
    finally:
        monkeypatch.delenv("TEMPORAL_TASK_QUEUE")
        pipelines.reload()


def test_final_states_are_the_results_states() -> None:
    """The states a run's result can name are the terminal states a run returns in."""
    assert set(FINAL_STATES) == set(get_args(FinalState))
    assert pipelines.terminal_states() - {State.CANCELLED} == FINAL_STATES


def test_search_attributes_match_what_the_worker_registers() -> None:
    """The dev server is started with the same attributes, of the same types, as the worker
    registers on a server that lacks them."""
    assert set(search_attribute_types()) == set(SEARCH_ATTRIBUTES)
    assert search_attribute_types() == {
        "AiState": "Keyword",
        "AiStateSince": "Datetime",
        "AiReviewRound": "Int",
        "AiPipelineVersion": "Keyword",
    }


def test_a_run_starts_visible_in_its_first_resting_state() -> None:
    """A run is started with AiState set to where it will first rest (invoke_llm for an inline
    message, fetch_prompt for a document by reference), so visibility lists it at once."""
    inline = PipelineRequest(request_id="a" * 24, user_message="hi")
    document = PipelineRequest(request_id="a" * 24, user_message="s3://docs/a.txt")
    first = initial_search_attributes
    assert first(llm.PIPELINE, inline).get(contract.AI_STATE) == "invoke_llm"
    assert first(llm.PIPELINE, document).get(contract.AI_STATE) == "fetch_prompt"
