"""A pipeline file's validate step on the engine: without ``of:`` it checks the output of the
step just before it (not the first step's), and with ``of:`` the step it names; problems with
review turned off fail the run."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle

from aiorch.ops.results import finished
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration
from tests.support.pipeline_files import write_pipeline
from tests.support.scripted_activities import Reply
from workflows.data import DataResult

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


async def run(orch: Orchestration, text: str, *replies: str) -> WorkflowHandle[Any, DataResult]:
    write_pipeline(orch.pipelines, text, "checked_reply.yaml")
    orch.fakes.llm_script = [Reply(content=reply) for reply in replies]
    request_id = new_request_id()
    handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
        "CheckedReply",
        {"request_id": request_id, "input": {"ticket": "Hello"}, "review": "never"},
        id=request_id,
        task_queue=orch.task_queue,
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
