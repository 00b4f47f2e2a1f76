"""A pipeline file's validate step on the engine: without ``of:`` it checks the output of the
step just before it (not the first step's), and with ``of:`` the step it names; problems go to
the review the file routes them to, fail the run when it routes them nowhere, and fail it with
``invalid`` when review is turned off; ``review: always`` sends even valid output to review."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.worker import Worker

from aiorch.ops.results import finished, result_of_failure
from aiorch_runtime.sandbox import workflow_runner
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration, data_plans
from tests.support.pipeline_files import write_pipeline
from tests.support.scripted_activities import Reply
from tests.workflows.data_workflows import PipelineWorkflowUnderTest
from workflows import contract
from workflows.data import DataResult
from workflows.payloads import ReviewDecision, RunStatus

PIPELINE = """\
name: CheckedReply
version: 1
input:
  type: object
  properties:
    ticket: {type: string}
  required: [ticket]
steps:
  - id: summary
    type: llm
    prompt: "Summarise: {{ input.ticket }}"
  - id: draft
    type: llm
    prompt: "Reply to: {{ input.ticket }}"
  - id: check
    type: validate
    rules:
      - {field: content, max_length: 5}
  - id: store
    type: store
    fields:
      reply: steps.draft.content
"""


async def run(
    orch: Orchestration,
    text: str,
    *replies: str,
    review: str = "never",
    task_queue: str | None = None,
) -> WorkflowHandle[Any, DataResult]:
    """Start the pipeline ``text`` names, its model steps answering ``replies`` in turn."""
    name = text.split("\n", 1)[0].removeprefix("name: ")
    write_pipeline(orch.pipelines, text, f"{name.lower()}.yaml")
    orch.fakes.llm_script = [Reply(content=reply) for reply in replies]
    request_id = new_request_id()
    handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
        name,
        {"request_id": request_id, "input": {"ticket": "Hello"}, "review": review},
        id=request_id,
        task_queue=task_queue or orch.task_queue,
        result_type=DataResult,
    )
    orch.handles.append(handle)
    return handle


async def test_a_validate_step_without_of_checks_the_step_just_before_it(
    orch: Orchestration,
) -> None:
    """With a short summary first and a long draft just before the check, the run fails on the
    draft's length; with the two the other way round, the draft passes and is stored."""
    failing = await finished(await run(orch, PIPELINE, "short", "a reply far too long"))
    last = failing.history[-1]
    assert (last.from_state, last.event, last.to_state) == ("check", "problems", "failed")
    assert last.detail == "1 problem(s)"
    assert orch.documents.stores == []

    passing = await finished(await run(orch, PIPELINE, "a summary far too long", "short"))
    assert passing.state == "completed"
    [row] = orch.documents.stores
    assert row.fields == {"reply": "short"}


async def test_a_validate_step_with_of_checks_the_step_it_names(orch: Orchestration) -> None:
    """``of: summary`` checks the summary, however the step before it answered."""
    named = PIPELINE.replace("    type: validate\n", "    type: validate\n    of: summary\n")
    result = await finished(await run(orch, named, "a summary far too long", "short"))
    assert result.state == "failed"
    assert orch.documents.stores == []


REVIEWED = """\
name: ReviewedReply
version: 1
input:
  type: object
  properties:
    ticket: {type: string}
  required: [ticket]
steps:
  - id: draft
    type: llm
    prompt: "Reply to: {{ input.ticket }}"
  - id: check
    type: validate
    rules:
      - {field: content, max_length: 5}
    next: store
    on: {problems: look}
  - id: look
    type: review
  - id: store
    type: store
    fields:
      reply: steps.draft.content
"""
TOO_LONG = {"valid": False, "problems": [{"field": "content", "message": "is longer than 5"}]}


async def failed(handle: WorkflowHandle[Any, DataResult]) -> DataResult:
    """The result a failed run carries, with each step's output."""
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    result = result_of_failure(failure.value, DataResult)
    assert isinstance(result, DataResult)
    return result


def transitions(status: RunStatus | DataResult) -> list[tuple[str, str, str, str | None]]:
    return [(e.from_state, e.event, e.to_state, e.detail) for e in status.history]


async def test_problems_go_to_the_review_the_file_routes_them_to(orch: Orchestration) -> None:
    """Problems take ``problems`` to the file's review (no error recorded: a person decides),
    and the check's output (valid or not, and each problem) is the step's; output without
    problems takes ``valid`` on."""
    handle = await run(orch, REVIEWED, "far too long", review="auto")
    status = await orch.wait_for_state(handle, "look")
    assert transitions(status)[-1] == ("check", "problems", "look", "1 problem(s)")
    assert status.last_error is None
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        ReviewDecision(decision="approve", reviewer="rita"),
        result_type=RunStatus,
    )
    reviewed = await handle.result()
    assert reviewed.state == "completed"
    assert reviewed.outputs["check"] == TOO_LONG

    valid = await finished(await run(orch, REVIEWED, "short", review="auto"))
    assert transitions(valid)[2] == ("check", "valid", "store", "no problems")
    assert valid.outputs["check"] == {"valid": True, "problems": []}


async def test_review_always_sends_valid_output_to_the_review(orch: Orchestration) -> None:
    """Under ``review: always`` a check that finds nothing still leads to the file's review."""
    status = await orch.wait_for_state(await run(orch, REVIEWED, "short", review="always"), "look")
    assert transitions(status)[-1] == ("check", "problems", "look", "no problems")
    assert status.last_error is None


async def test_problems_routed_nowhere_fail_the_run_with_their_count(orch: Orchestration) -> None:
    """Problems the file routes to no review fail the run: ``problems`` to ``failed``, and the
    run's error names the count and the step checked."""
    handle = await run(orch, PIPELINE, "short", "a reply far too long", review="auto")
    result = await finished(handle)
    assert transitions(result)[-1] == ("check", "problems", "failed", "1 problem(s)")
    status = await orch.status(handle)
    assert status.last_error == "InvalidOutput: 1 problem(s) in draft"


@asynccontextmanager
async def review_off(orch: Orchestration) -> AsyncIterator[str]:
    """A worker whose operator lets a request turn review off; yields its task queue."""
    queue = f"wf-{uuid.uuid4()}"
    plans = data_plans(orch.pipelines, review_min="never")
    async with Worker(
        orch.client,
        task_queue=queue,
        workflows=[PipelineWorkflowUnderTest],
        activities=[*orch.fakes.activities, *orch.documents.activities, plans.plan_pipeline],
        workflow_runner=workflow_runner(pass_workflows=True),
    ):
        yield queue


async def test_with_review_off_problems_are_invalid_though_the_file_routes_them(
    orch: Orchestration,
) -> None:
    """With review turned off, problems take ``invalid`` to ``failed`` rather than the file's
    review, and the run's error names them; valid output goes on."""
    async with review_off(orch) as queue:
        handle = await run(orch, REVIEWED, "far too long", task_queue=queue)
        result = await failed(handle)
        status = await orch.status(handle)
        valid = await finished(await run(orch, REVIEWED, "short", task_queue=queue))
    assert transitions(result)[-1] == ("check", "invalid", "failed", "1 problem(s)")
    assert result.outputs["check"] == TOO_LONG
    assert status.last_error == "InvalidOutput: 1 problem(s) in draft"
    assert valid.state == "completed"


THREE = """\
name: ThreeDrafts
version: 1
input:
  type: object
  properties:
    ticket: {type: string}
steps:
  - id: one
    type: llm
    prompt: "One: {{ input.ticket }}"
  - id: two
    type: llm
    prompt: "Two: {{ input.ticket }}"
  - id: three
    type: llm
    prompt: "Three: {{ input.ticket }}"
  - id: check
    type: validate
    rules:
      - {field: content, max_length: 5}
"""
FIRST = """\
name: CheckedFirst
version: 1
input:
  type: object
  properties:
    ticket: {type: string}
steps:
  - id: check
    type: validate
    rules:
      - {field: ticket, required: true}
  - id: store
    type: store
"""


async def test_the_step_checked_by_default_is_the_last_before_it_or_none(
    orch: Orchestration,
) -> None:
    """Of three model steps before it, a validate step checks the third's output; first in its
    file (no step before it, no ``of:``), it has no output to check, so a required field is
    missing and the run fails."""
    last = await finished(await run(orch, THREE, "short", "short", "far too long"))
    assert transitions(last)[-1] == ("check", "problems", "failed", "1 problem(s)")
    handle = await run(orch, FIRST, review="auto")
    first = await failed(handle)
    assert transitions(first)[-1] == ("check", "problems", "failed", "1 problem(s)")
    assert first.outputs["check"]["problems"] == [{"field": "ticket", "message": "is required"}]
    assert (await orch.status(handle)).last_error == "InvalidOutput: 1 problem(s) in check"
