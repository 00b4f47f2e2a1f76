"""How fetch_prompt runs and how the state reaches visibility: an inline message is fetched by a
local activity inside the first workflow task, a referenced document by a regular activity, and
``AiState`` is upserted at most once per workflow task, with the state the task ends in, only
for the states a run rests in (``graph.SHOWN_STATES``), and not at all for the state a starter
already set at start."""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from aiorch.ops.results import finished
from tests.support.history_events import scheduled_activities
from tests.support.orchestration import Orchestration
from tests.support.run_history import HAPPY_PATH, path
from tests.support.scripted_activities import Reply
from workflows import contract
from workflows.payloads import RunStatus


def _events(history: Any, event_type: EventType.ValueType) -> list[Any]:
    return [event for event in history.events if event.event_type == event_type]


async def _published_states(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Every AiState value the run upserted, in order (the patch upserts carry none)."""
    history = await handle.fetch_history()
    states = []
    for event in _events(history, EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES):
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        if contract.SEARCH_ATTRIBUTE_STATE in fields.indexed_fields:
            states.append(json.loads(fields.indexed_fields[contract.SEARCH_ATTRIBUTE_STATE].data))
    return states


async def test_inline_message_is_fetched_locally(orch: Orchestration) -> None:
    """An inline message's fetch_prompt runs as a local activity (a marker, no activity task),
    and the run still walks fetch_prompt in its own history and completes."""
    handle = await orch.start(review="never", user_message="Inline text")

    result = await finished(handle)

    assert result.state == "completed"
    assert "fetch_prompt" in path(result.history)
    assert [p.request.user_message for p in orch.fakes.prompt_inputs] == ["Inline text"]
    assert await scheduled_activities(handle) == [
        contract.ACTIVITY_INVOKE_LLM,
        contract.ACTIVITY_GENERATE_EMBEDDING,
    ]
    history = await handle.fetch_history()
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in _events(history, EventType.EVENT_TYPE_MARKER_RECORDED)
    ]
    assert "core_local_activity" in markers
    await orch.check_finished(handle, result)


async def test_referenced_document_is_fetched_by_a_regular_activity(orch: Orchestration) -> None:
    """A file:// or s3:// reference is loaded with real I/O, so its fetch_prompt stays a regular
    activity: retried and timed out by the server, visible as a pending activity."""
    handle = await orch.start(review="never", user_message="s3://docs/report.txt")

    result = await finished(handle)

    assert result.state == "completed"
    assert await scheduled_activities(handle) == [
        contract.ACTIVITY_FETCH_PROMPT,
        contract.ACTIVITY_INVOKE_LLM,
        contract.ACTIVITY_GENERATE_EMBEDDING,
    ]
    assert await _published_states(handle) == ["fetch_prompt", "invoke_llm", "completed"]
    await orch.check_finished(handle, result)


async def test_state_is_upserted_once_per_workflow_task(orch: Orchestration) -> None:
    """Moves made within one workflow task (idle -> fetch_prompt -> invoke_llm, with the local
    fetch) publish only the state the task ends in, and generate_embedding (passed through in
    moments) is not published: invoke_llm, then completed."""
    handle = await orch.start(review="never")

    result = await finished(handle)

    assert path(result.history) == HAPPY_PATH
    assert await _published_states(handle) == ["invoke_llm", "completed"]
    await orch.check_finished(handle, result)


async def test_the_state_a_starter_set_at_start_is_not_published_again(
    orch: Orchestration,
) -> None:
    """A starter sets the state the run will first rest in as its initial AiState (free at
    start): the happy path then upserts only its final state, one billable action."""
    handle = await orch.start(review="never", initial_ai_state="invoke_llm")

    result = await finished(handle)

    assert await _published_states(handle) == ["completed"]
    await orch.check_finished(handle, result)


async def test_the_review_round_is_published_with_the_review_state(orch: Orchestration) -> None:
    """Waiting for review, the run's AiReviewRound says which round to sign a review for, in
    the same upsert as AiState (one action), so a reviewer needs no query."""
    handle = await orch.awaiting_review(Reply(needs_review=True), Reply(needs_review=True))
    first = (await handle.describe()).typed_search_attributes.get(contract.AI_REVIEW_ROUND)
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        {"decision": "reedit", "reviewer": "ann", "feedback": "again", "review_round": 1},
        result_type=RunStatus,
    )
    await orch.wait_for_state(handle, "await_review")
    second = (await handle.describe()).typed_search_attributes.get(contract.AI_REVIEW_ROUND)

    assert (first, second) == (1, 2)


async def test_review_states_are_published_while_waiting(orch: Orchestration) -> None:
    """A run waiting for review has await_review in visibility (AiState and AiStateSince equal
    the last history entry), so `AiState='await_review'` finds it while it waits."""
    handle = await orch.start(review="always")

    status = await orch.wait_for_state(handle, "await_review")

    await orch.check_history(handle, status.history)
    assert (await _published_states(handle))[-1] == "await_review"
