"""Input that breaks the contract fails the run at once, before any activity runs."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration
from tests.support.run_history import step
from workflows import errors
from workflows.payloads import PipelineResult


async def invalid_request_error(handle: WorkflowHandle[Any, PipelineResult]) -> ApplicationError:
    """The run's failure, checked to be a non-retryable InvalidRequest ApplicationError."""
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert cause.type == errors.INVALID_REQUEST
    assert cause.non_retryable
    return cause


async def event_types(handle: WorkflowHandle[Any, PipelineResult]) -> list[int]:
    return [event.event_type for event in (await handle.fetch_history()).events]


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ({"request_id": "BAD", "user_message": "x"}, "request_id: String should match pattern"),
        ("please summarise this", "(payload): Input should be a valid dictionary"),
        (None, "(payload): Input should be a valid dictionary"),
        ({"user_message": "x"}, "request_id: Field required"),
        ({"request_id": "a" * 24, "user_message": "  "}, "user_message: Value error"),
        ({"request_id": "a" * 24, "user_message": "x", "colour": "red"}, "colour: Extra inputs"),
        (
            {"request_id": "a" * 24, "user_message": "x", "review": "sometimes"},
            "review: Input should be 'auto', 'always' or 'never'",
        ),
        (
            {"request_id": "a" * 24, "user_message": "x", "options": {"review_timeout_s": 0}},
            "options.review_timeout_s: Input should be greater than 0",
        ),
        (
            {"request_id": "a" * 24, "user_message": "x", "options": {"retries": 3}},
            "options.retries: Extra inputs are not permitted",
        ),
    ],
)
async def test_invalid_request_fails_the_run_at_once(
    orch: Orchestration, raw: Any, names: str
) -> None:
    """A request that breaks the contract fails the workflow (not the workflow task, which
    would be retried forever) with a non-retryable InvalidRequest naming the field, in the
    first workflow task, before any activity runs."""
    handle = await orch.start(raw=raw, workflow_id=new_request_id())

    cause = await invalid_request_error(handle)

    assert cause.message.startswith("invalid request: "), cause.message
    assert names in cause.message
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    history = await event_types(handle)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in history
    assert history.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 1
    assert history[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in history
    assert orch.fakes.prompt_inputs == [] and orch.fakes.llm_calls == []
    # It never entered the graph, so it never published a state.
    assert await orch.ai_state(handle) == (None, None)


@pytest.mark.parametrize(
    ("error_type", "problem", "user_message"),
    [
        (
            errors.INVALID_REQUEST,
            "options.allowed_reviewers names nobody the operator allows",
            "inline text",
        ),
        (
            errors.INPUT_UNAVAILABLE,
            "cannot read /data/missing.txt: No such file or directory",
            "file:///data/missing.txt",
        ),
    ],
    ids=["refused-inline-request", "unavailable-input"],
)
async def test_a_permanent_fetch_prompt_error_fails_the_run(
    orch: Orchestration, error_type: str, problem: str, user_message: str
) -> None:
    """A permanent fetch_prompt error ends the run in failed after one attempt, not as a
    crashed run: fetch_prompt -> failed in history, the error as last_error, no LLM call and no
    dead letter. An inline request it refuses (its local activity raises InvalidRequest, e.g.
    for reviewers the operator does not allow) ends the way an unreadable input does."""
    orch.fakes.prompt_error = ApplicationError(problem, type=error_type, non_retryable=True)
    handle = await orch.start(user_message=user_message)

    result = await finished(handle)

    assert result.state == "failed"
    assert [sent.request.user_message for sent in orch.fakes.prompt_inputs] == [user_message]
    expected = f"{error_type}: {problem}"
    assert step(result.history[-1]) == ("fetch_prompt", "permanent_error", "failed", expected)
    status = await orch.status(handle)
    assert (status.last_error, status.attempts) == (expected, 0)
    assert orch.fakes.llm_calls == [] and orch.fakes.dead_letters == []
    await orch.check_finished(handle, result)
