"""The replay lab's forks on the time-skipping server: a fork on the lab's task queue is seeded
with its original's recorded outputs up to its fork state (nothing scheduled before it), runs
with the candidate's variant applied to its plan and the lab's tenant, ends where it would wait
for a reviewer (and shows in no list), and writes nothing; the production class refuses a
fork's input and the lab's class refuses anything else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.lab import DRY
from tests.support.builders import new_request_id
from tests.support.orchestration import AI_STATE, Orchestration, data_plans
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, write_pipeline
from tests.support.scripted_activities import (
    EXTRACTED_SHA256,
    PRIMARY_MODEL,
    Reply,
    over_budget,
)
from tests.workflows.test_data_pipelines import category
from tests.workflows.test_document_pipeline import VALID, WRONG_TOTAL, fields
from workflows import contract, errors
from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.engine.forks import ForkInput, ForkKind, ForkResult, RecordedOutput
from workflows.orchestrator import LabEngineWorkflow
from workflows.payloads import Assignment, Variant
from workflows.steps.contract import ACTIVITY_EXTRACT_TEXT
from workflows.steps.document_payloads import ExtractedText

DOCUMENT = "INVOICE 42 ..."
EXTRACTED = ExtractedText(
    kind="text", characters=len(DOCUMENT), sha256=EXTRACTED_SHA256, preview=DOCUMENT
)


@pytest_asyncio.fixture
async def lab(orch: Orchestration) -> AsyncIterator[str]:
    """A lab worker beside the test's worker: the lab's class on a queue of its own, the
    scripted model call and plans, the real dry activities for everything that writes."""
    queue = f"{orch.task_queue}-lab"
    async with Worker(
        orch.client,
        task_queue=queue,
        workflows=[LabEngineWorkflow],
        activities=[
            orch.fakes.invoke_llm,
            orch.fakes.await_batch,
            orch.fakes.fetch_prompt,
            orch.documents.plan_run,
            orch.documents.extract_text,
            data_plans(orch.pipelines).plan_pipeline,
            *DRY,
        ],
    ):
        yield queue


def document_fork(
    kind: ForkKind = "baseline",
    *,
    variant: Variant | None = None,
    recorded: list[RecordedOutput] | None = None,
    assignment: Assignment | None = None,
) -> ForkInput:
    """A fork from ``analyze`` of a document run whose text extraction returned ``EXTRACTED``."""
    fork_id = new_request_id()
    return ForkInput(
        request={"request_id": fork_id, "document": DOCUMENT, "review": "auto"},
        lab_id="lab-test",
        original_workflow_id=new_request_id(),
        original_run_id="00000000-0000-0000-0000-000000000001",
        from_state="analyze",
        kind=kind,
        variant=variant,
        recorded=(
            recorded
            if recorded is not None
            else [
                RecordedOutput(
                    activity=ACTIVITY_EXTRACT_TEXT, result=EXTRACTED.model_dump(mode="json")
                )
            ]
        ),
        tenant="lab",
        assignment=assignment,
    )


async def run_fork(
    orch: Orchestration, queue: str, fork: ForkInput, workflow_type: str
) -> ForkResult:
    """Run ``fork`` on ``queue`` to its end; it never published an ``AiState``."""
    handle: WorkflowHandle[Any, ForkResult] = await orch.client.start_workflow(
        workflow_type,
        fork,
        id=fork.request["request_id"],
        task_queue=queue,
        result_type=ForkResult,
    )
    orch.handles.append(handle)
    result: ForkResult = await handle.result()
    assert (await handle.describe()).typed_search_attributes.get(AI_STATE) is None
    return result


async def test_a_fork_from_analyze_is_seeded_up_to_it(orch: Orchestration, lab: str) -> None:
    """A baseline fork from analyze takes the original's extraction from its seed (no
    extract_text is scheduled), makes exactly one model call, on the original's settings but
    spending as the lab's tenant, and completes with the model's fields, storing nothing."""
    orch.fakes.llm_script = [fields(VALID)]
    result = await run_fork(orch, lab, document_fork(), WORKFLOW_TYPE_DOCUMENT_PIPELINE)
    assert orch.documents.extracts == []
    assert [call.model for call in orch.fakes.llm_calls] == [PRIMARY_MODEL]
    call = orch.fakes.llm_calls[0]
    assert (call.tenant, call.lane, call.result_cache) == ("lab", "sync", False)
    assert result.state == "completed" and result.error is None
    assert result.fields == VALID and result.problems == []
    assert not result.needs_review and result.waits == []
    assert orch.documents.stores == [] and orch.documents.rows == {}


async def test_the_candidate_variant_is_applied_to_the_plan(orch: Orchestration, lab: str) -> None:
    """A candidate fork's model call is made with what its variant changes (the model, the
    system prompt, the temperature) and the rest of the original's plan."""
    orch.fakes.llm_script = [fields(VALID)]
    variant = Variant(model="candidate-model", system_prompt="Extract tersely.", temperature=0.0)
    result = await run_fork(
        orch, lab, document_fork("candidate", variant=variant), WORKFLOW_TYPE_DOCUMENT_PIPELINE
    )
    call = orch.fakes.llm_calls[0]
    assert (call.model, call.system_prompt, call.temperature) == (
        "candidate-model",
        "Extract tersely.",
        0.0,
    )
    assert result.model == "candidate-model" and result.state == "completed"


async def test_forks_run_the_rollout_variant_their_original_was_planned_under(
    orch: Orchestration, lab: str
) -> None:
    """An original planned under a rollout's variant B: its baseline fork calls with B's
    settings and records B's assignment; its candidate changes B's settings, not the
    control's."""
    assigned = Assignment(experiment="prompt-v2", variant=Variant(name="B", model="canary-model"))
    orch.fakes.llm_script = [fields(VALID), fields(VALID)]
    await run_fork(orch, lab, document_fork(assignment=assigned), WORKFLOW_TYPE_DOCUMENT_PIPELINE)
    candidate = document_fork("candidate", variant=Variant(temperature=0.0), assignment=assigned)
    await run_fork(orch, lab, candidate, WORKFLOW_TYPE_DOCUMENT_PIPELINE)
    baseline_call, candidate_call = orch.fakes.llm_calls
    assert baseline_call.model == "canary-model" and baseline_call.temperature != 0.0
    assert (candidate_call.model, candidate_call.temperature) == ("canary-model", 0.0)


async def test_a_fork_ends_where_it_would_wait_for_a_reviewer(
    orch: Orchestration, lab: str
) -> None:
    """A fork whose fields break a rule records where and why it would have waited (the
    review state, its round, the problems) and ends there: no reviewer is notified, and the
    fork never rests in a state visibility shows."""
    orch.fakes.llm_script = [fields(WRONG_TOTAL)]
    result = await run_fork(orch, lab, document_fork(), WORKFLOW_TYPE_DOCUMENT_PIPELINE)
    assert result.state == "await_review" and result.needs_review
    assert len(result.waits) == 1 and result.waits[0].startswith("await_review (round 1): ")
    assert result.problems and all(p.startswith("total") for p in result.problems)
    assert result.fields == WRONG_TOTAL
    assert orch.fakes.notices == [] and orch.documents.stores == []


async def test_a_fork_ends_where_it_would_wait_for_a_budget_decision(
    orch: Orchestration, lab: str
) -> None:
    """A fork whose call would cross a budget records that it would wait for an operator's
    budget decision, and ends there instead of waiting."""
    orch.fakes.llm_script = [over_budget()]
    result = await run_fork(orch, lab, document_fork(), WORKFLOW_TYPE_DOCUMENT_PIPELINE)
    assert result.state == "await_budget"
    assert len(result.waits) == 1 and result.waits[0].startswith("await_budget: a budget")
    assert len(orch.fakes.llm_calls) == 1


async def test_a_fork_that_asks_for_more_than_was_recorded_stops(
    orch: Orchestration, lab: str
) -> None:
    """A fork whose original has no output for an activity it asks for before its fork state
    ends with that error, and nothing is scheduled (no extraction, no model call)."""
    result = await run_fork(orch, lab, document_fork(recorded=[]), WORKFLOW_TYPE_DOCUMENT_PIPELINE)
    assert result.error is not None and result.error.startswith("ForkDiverged: ")
    assert result.state == "extract_text"
    assert orch.documents.extracts == [] and orch.fakes.llm_calls == []


async def test_an_llm_run_forks_from_its_model_call(orch: Orchestration, lab: str) -> None:
    """A fork of the LLM pipeline from invoke_llm plans again (its local fetch_prompt), calls
    the model once with the candidate's system prompt, and completes with the reply, its
    embedding dry (nothing embedded or stored)."""
    orch.fakes.llm_script = [Reply(content="a shorter answer")]
    fork_id = new_request_id()
    fork = ForkInput(
        request={"request_id": fork_id, "user_message": "Summarise it.", "review": "never"},
        lab_id="lab-test",
        original_workflow_id=new_request_id(),
        original_run_id="00000000-0000-0000-0000-000000000002",
        from_state="invoke_llm",
        kind="candidate",
        variant=Variant(system_prompt="Be brief."),
        tenant="lab",
    )
    result = await run_fork(orch, lab, fork, contract.WORKFLOW_TYPE)
    assert [call.system_prompt for call in orch.fakes.llm_calls] == ["Be brief."]
    assert result.state == "completed" and result.text == "a shorter answer"
    assert orch.fakes.embedding_calls == [] and orch.fakes.stored == set()


async def test_a_pipeline_file_s_run_forks_from_a_later_model_step(
    orch: Orchestration, lab: str
) -> None:
    """A fork of a pipeline file's run from its draft step takes the classify step's answer
    from its seed, drafts once on the candidate's model, and ends at the reply review it
    would have waited in."""
    write_pipeline(orch.pipelines, TRIAGE_V1)
    orch.fakes.llm_script = [Reply(content="Refunded.")]
    fork_id = new_request_id()
    classified = category("billing").model_dump(mode="json")
    fork = ForkInput(
        request={"request_id": fork_id, "input": {"ticket": "I was charged twice."}},
        lab_id="lab-test",
        original_workflow_id=new_request_id(),
        original_run_id="00000000-0000-0000-0000-000000000003",
        from_state="draft",
        kind="candidate",
        variant=Variant(model="candidate-model"),
        recorded=[RecordedOutput(activity=contract.ACTIVITY_INVOKE_LLM, result=classified)],
        tenant="lab",
    )
    result = await run_fork(orch, lab, fork, TRIAGE)
    assert [call.model for call in orch.fakes.llm_calls] == ["candidate-model"]
    assert result.state == "reply_review" and result.needs_review
    assert orch.documents.stores == []


async def test_the_production_class_refuses_a_fork_input(orch: Orchestration) -> None:
    """A fork's input started on the production task queue fails at once as an invalid
    request: no client can seed a production run with outputs of its choosing."""
    fork = document_fork()
    handle = await orch.client.start_workflow(
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        fork,
        id=fork.request["request_id"],
        task_queue=orch.task_queue,
    )
    orch.handles.append(handle)
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.INVALID_REQUEST
    assert "lab's task queue only" in str(cause)
    assert orch.documents.extracts == [] and orch.fakes.llm_calls == []


async def test_the_lab_class_refuses_a_plain_request(orch: Orchestration, lab: str) -> None:
    """A plain request started on the lab's task queue fails at once: the lab runs forks."""
    request_id = new_request_id()
    request: dict[str, Any] = {"request_id": request_id, "document": DOCUMENT}
    handle = await orch.client.start_workflow(
        WORKFLOW_TYPE_DOCUMENT_PIPELINE, request, id=request_id, task_queue=lab
    )
    orch.handles.append(handle)
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.INVALID_REQUEST
    assert "lab forks only" in str(cause)
