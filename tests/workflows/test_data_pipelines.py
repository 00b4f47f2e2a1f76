"""Pipeline files on the engine: the support-triage example run on the time-skipping server,
with the real ``plan_pipeline`` reading the test's pipeline folder and fakes for the model and
the store."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowFailureError, WorkflowHandle

from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, TRIAGE_V2, V2_PROMPT, write_pipeline
from tests.support.scripted_activities import Reply, batched
from workflows import contract
from workflows.data import CATALOG, DataResult, compile_spec
from workflows.data.spec import PipelineSpec
from workflows.payloads import LlmCallResult, ReviewDecision, RunStatus


def graph_of(text: str) -> Any:
    return compile_spec(PipelineSpec.model_validate(yaml.safe_load(text)), CATALOG).graph


def category(name: str) -> LlmCallResult:
    """What the fake model answers the classify step (a JSON object)."""
    return LlmCallResult(model="", content=f'{{"category": "{name}"}}', data={"category": name})


async def start(
    orch: Orchestration, ticket: str = "I was charged twice this month.", **fields: Any
) -> WorkflowHandle[Any, DataResult]:
    request_id = new_request_id()
    payload = {
        "request_id": request_id,
        "input": {"ticket": ticket, **fields.pop("input", {})},
        **fields,
    }
    handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
        TRIAGE, payload, id=request_id, task_queue=orch.task_queue, result_type=DataResult
    )
    orch.handles.append(handle)
    return handle


async def review(
    handle: WorkflowHandle[Any, Any], decision: str = "approve", **extra: Any
) -> RunStatus:
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        ReviewDecision(decision=decision, reviewer="rita", **extra),
        result_type=RunStatus,
    )
    return status


async def test_a_ticket_runs_through_the_triage_file_end_to_end(orch: Orchestration) -> None:
    """A billing ticket: classified, routed past the urgent review, a reply drafted, reviewed,
    stored; every move is an edge of the file's graph and progress never goes down."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    orch.fakes.llm_script = [category("billing"), Reply(content="Sorry about that: refunded.")]
    handle = await start(orch)
    status = await orch.wait_for_state(handle, "reply_review")
    assert status.pipeline == TRIAGE
    assert status.pipeline_version is not None and status.pipeline_version.startswith("1@")
    await review(handle)
    result = await handle.result()
    assert result.state == "completed"
    graph = graph_of(TRIAGE_V1)
    edges = {(t.source, t.event, t.target) for t in graph.transitions}
    moves = [(e.from_state, e.event, e.to_state) for e in result.history]
    assert all(move in edges for move in moves), moves
    assert [m[2] for m in moves] == [
        "classify",
        "route",
        "draft",
        "reply_review",
        "store",
        "completed",
    ]
    progress = [graph.progress_of(state) for _, _, state in moves]
    assert all(a <= b for a, b in pairwise(progress)), progress
    [row] = orch.documents.stores
    assert row.fields == {
        "ticket": "I was charged twice this month.",
        "category": "billing",
        "reply": "Sorry about that: refunded.",
    }
    assert row.pipeline == TRIAGE and row.schema_name == "SupportTriage@1"
    assert (row.workflow_id, row.chain_id) == (handle.id, handle.first_execution_run_id)
    assert (row.tenant, row.requested_by) == ("default", None)
    assert result.outputs["classify"] == {"category": "billing"}


async def test_a_file_s_model_steps_wait_in_their_batch_states(orch: Orchestration) -> None:
    """A request in the batch lane: each llm step comes back batched and the run waits in the
    step's batch state (`await_batch_classify`, then `await_batch_draft`, Pending), then the
    step takes up the batch's answer as a synchronous call's and the run goes on."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    orch.fakes.llm_script = [batched("batch_a", "call-1"), batched("batch_b", "call-2")]
    orch.fakes.batch_script = [category("billing"), Reply(content="Sorry: refunded.")]
    handle = await start(orch, options={"lane": "batch"})
    await orch.wait_for_state(handle, "reply_review")
    await review(handle)
    result = await handle.result()
    assert result.state == "completed"
    assert [e.to_state for e in result.history] == [
        "classify",
        "await_batch_classify",
        "classify",
        "route",
        "draft",
        "await_batch_draft",
        "draft",
        "reply_review",
        "store",
        "completed",
    ]
    assert [wait.batch_id for wait in orch.fakes.batch_waits] == ["batch_a", "batch_b"]
    assert [call.lane for call in orch.fakes.llm_calls] == ["batch", "batch"]
    assert result.outputs["classify"] == {"category": "billing"}
    graph = graph_of(TRIAGE_V1)
    assert graph.states["await_batch_draft"].status.value == "Pending"


async def test_an_urgent_ticket_waits_for_a_person_first_and_a_reedit_classifies_again(
    orch: Orchestration,
) -> None:
    """An urgent ticket is routed to the urgent review; a request for changes there leads back
    to the classification (with the feedback), then on to the draft and its review."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    orch.fakes.llm_script = [category("urgent"), category("technical"), Reply(content="On it.")]
    handle = await start(orch, "Production is down since 9:00!")
    await orch.wait_for_state(handle, "urgent_review")
    view = await handle.query(contract.QUERY_REVIEW_VIEW)
    assert view["waiting"] and view["pipeline"] == TRIAGE
    await review(handle, "reedit", feedback="It is an outage, but the fix is technical.")
    await orch.wait_for_state(handle, "reply_review")
    await review(handle)
    result = await handle.result()
    assert [e.to_state for e in result.history] == [
        "classify",
        "route",
        "urgent_review",
        "classify",
        "route",
        "draft",
        "reply_review",
        "store",
        "completed",
    ]
    reclassify = orch.fakes.llm_calls[1]
    assert reclassify.feedback == ["It is an outage, but the fix is technical."]
    assert result.outputs["classify"] == {"category": "technical"}
    assert result.reviewed_by == "rita"


async def test_a_reply_that_breaks_the_output_schema_is_asked_for_again(
    orch: Orchestration,
) -> None:
    """``repair``: a category outside the schema's enum is a malformed reply, retried with the
    corrective instruction on the next attempt; the valid one goes on."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    orch.fakes.llm_script = [category("angry"), category("billing"), Reply(content="Done.")]
    handle = await start(orch)
    await orch.wait_for_state(handle, "reply_review")
    first, second = orch.fakes.llm_calls[:2]
    assert (first.corrective, second.corrective) == (False, True)
    status = await orch.status(handle)
    retry = next(e for e in status.history if e.event == "retryable_error")
    assert retry.to_state == "retry_classify"
    assert "breaks the output schema" in (retry.detail or "")


async def test_replies_that_keep_breaking_the_schema_spend_the_plan_s_attempts(
    orch: Orchestration,
) -> None:
    """Repairs are attempts like any other: after the plan's attempts (3 here) the run is
    dead-lettered, never retried forever."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    orch.fakes.llm_script = [category("angry")] * 5
    handle = await start(orch)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    status = await orch.status(handle)
    assert (status.state, status.attempts) == ("dead_letter", 3)
    assert len(orch.fakes.dead_letters) == 1


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"ticket": ""}, "input.ticket"),
        ({"ticket": "x", "priority": 1}, "Additional properties are not allowed"),
    ],
)
async def test_an_input_the_file_does_not_describe_is_refused_at_once(
    orch: Orchestration, given: dict[str, Any], problem: str
) -> None:
    """The run's input is checked against the input schema of the version it starts with: a
    refused one fails the run at once, with one line, before any step."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    request_id = new_request_id()
    handle = await orch.client.start_workflow(
        TRIAGE,
        {"request_id": request_id, "input": given},
        id=request_id,
        task_queue=orch.task_queue,
    )
    orch.handles.append(handle)
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    message = str(failure.value.cause)
    assert "invalid request: the input does not fit SupportTriage 1@" in message
    assert problem in message
    assert orch.fakes.llm_calls == []


async def test_template_syntax_in_a_ticket_reaches_the_model_as_text(orch: Orchestration) -> None:
    """A client's input is data in the template, never template text: Jinja syntax in a
    ticket is sent to the model as those characters, not evaluated."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    orch.fakes.llm_script = [category("other"), Reply(content="ok")]
    attack = "{{ 7*7 }} {{ ''.__class__.__mro__ }} {% for x in range(3) %}x{% endfor %}"
    handle = await start(orch, attack)
    await orch.wait_for_state(handle, "reply_review")
    prompt = orch.fakes.llm_calls[0].user_prompt
    assert f"Ticket: {attack}" in prompt
    assert "49" not in prompt and "object" not in prompt


async def test_runs_keep_the_version_they_started_with(orch: Orchestration) -> None:
    """Five runs wait for review on version 1; the file becomes version 2 (another prompt, one
    more step): the five finish on version 1's steps, a new run takes version 2's."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    old = []
    for n in range(5):  # one at a time: the fake model answers in script order
        orch.fakes.llm_script = [category("billing"), Reply(content="r1")]
        old.append(await start(orch, f"ticket {n}"))
        await orch.wait_for_state(old[-1], "reply_review")
    v1 = (await orch.status(old[0])).pipeline_version
    write_pipeline(orch.pipelines, TRIAGE_V2)
    orch.fakes.llm_script = [category("billing"), Reply(content="r2")]
    new = await start(orch, "a new ticket")
    status = await orch.wait_for_state(new, "reply_review")
    v2 = status.pipeline_version
    assert v1 is not None and v2 is not None
    assert (v1.split("@")[0], v2.split("@")[0]) == ("1", "2")
    assert V2_PROMPT in orch.fakes.llm_calls[-2].user_prompt
    assert all(V2_PROMPT not in call.user_prompt for call in orch.fakes.llm_calls[:10])
    for handle in [*old, new]:
        await review(handle)
    for handle in old:
        result = await handle.result()
        assert result.version == v1
        assert [e.to_state for e in result.history][-3:] == ["reply_review", "store", "completed"]
        assert (await orch.status(handle)).pipeline_version == v1
    result = await new.result()
    assert result.version == v2
    assert [e.to_state for e in result.history][-4:] == [
        "reply_review",
        "check_reply",
        "store",
        "completed",
    ]
