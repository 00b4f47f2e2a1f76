"""Step types on the engine: the document pipeline and the LLM pipeline written as files and
run as data (extract, fetch, validate with corrections, review, embed, store), a notify step,
a continued run that keeps its version, and a step type written in Python that joins the
catalog by name."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.worker import Worker

from activities.pipelines import PipelineActivities
from activities.planning import PlanDefaults
from aiorch_runtime.pipeline_files import PipelineFolder, check_text
from aiorch_runtime.sandbox import workflow_runner
from tests.support import ROOT
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration, data_plans, pipeline_settings
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, TRIAGE_V2, write_pipeline
from tests.support.scripted_activities import HeldLineage, Reply
from tests.support.time_skipping import skip_time
from tests.workflows.data_workflows import (
    SHOUT,
    SHOUTING,
    PipelineWorkflowUnderTest,
    ShoutingWorkflow,
)
from workflows import contract
from workflows.data import ACTIVITY_NOTIFY_PIPELINE, CATALOG, DataResult, PipelineNotice
from workflows.payloads import LlmCallResult, ReviewDecision, RunStatus

REFERENCE = ROOT / "pipelines" / "reference"
INVOICE: dict[str, Any] = {
    "vendor": "ACME",
    "invoice_number": "INV-7",
    "issue_date": "2026-03-01",
    "due_date": None,
    "currency": "usd",
    "line_items": [{"description": "bolts", "quantity": "2", "unit_price": "5", "amount": "10"}],
    "tax": "0",
    "total": "10",
}


def renamed(file: str, name: str) -> str:
    """A reference file under a name a worker's folder may take."""
    text = (REFERENCE / file).read_text(encoding="utf-8")
    first, rest = text.split("\nname: ", 1)
    return f"{first}\nname: {name}\n" + rest.split("\n", 1)[1]


async def start(
    orch: Orchestration, pipeline: str, given: dict[str, Any], **fields: Any
) -> WorkflowHandle[Any, DataResult]:
    request_id = new_request_id()
    handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
        pipeline,
        {"request_id": request_id, "input": given, **fields},
        id=request_id,
        task_queue=orch.task_queue,
        result_type=DataResult,
    )
    orch.handles.append(handle)
    return handle


async def decide(handle: WorkflowHandle[Any, Any], decision: str, **extra: Any) -> RunStatus:
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        ReviewDecision(decision=decision, reviewer="rita", **extra),
        result_type=RunStatus,
    )
    return status


async def test_the_document_pipeline_as_a_file_validates_and_takes_corrections(
    orch: Orchestration,
) -> None:
    """The document pipeline's file, run as data: extracted, analysed (the reply taken as it
    is), validated (a lowercase currency breaks the schema), reviewed with the fields a
    reviewer may correct, corrected, validated again and stored."""
    write_pipeline(orch.pipelines, renamed("documents.yaml", "InvoiceFile"))
    orch.fakes.llm_script = [LlmCallResult(model="", data=INVOICE)]
    handle = await start(orch, "InvoiceFile", {"document": "Invoice INV-7 from ACME"})
    await orch.wait_for_state(handle, "await_review")
    view = await handle.query(contract.QUERY_REVIEW_VIEW)
    assert view["corrections"] is True
    assert view["fields"] == INVOICE
    assert any(problem.startswith("currency:") for problem in view["problems"])
    assert orch.documents.extracts[0].text == "Invoice INV-7 from ACME"
    await decide(handle, "approve", fields={**INVOICE, "currency": "USD"})
    result = await handle.result()
    assert [e.to_state for e in result.history] == [
        "extract_text",
        "analyze",
        "validate",
        "await_review",
        "validate",
        "store",
        "completed",
    ]
    assert [e.event for e in result.history][3:6] == ["needs_review", "correct", "valid"]
    [row] = orch.documents.stores
    assert row.corrected is True and row.reviewed_by == "rita"
    assert row.fields["steps"]["analyze"]["currency"] == "USD"
    assert row.problems == [] and result.problems == []


async def test_the_llm_pipeline_as_a_file_fetches_reviews_and_embeds(orch: Orchestration) -> None:
    """The LLM pipeline's file, run as data: the message fetched, answered with a request for
    review (the reply's needs_review, routed by the file), approved, embedded; its history
    has the Python pipeline's events."""
    write_pipeline(orch.pipelines, renamed("llm.yaml", "LlmFile"))
    orch.fakes.llm_script = [Reply(content="An answer to check.", needs_review=True)]
    handle = await start(orch, "LlmFile", {"user_message": "Explain replay."}, review="auto")
    await orch.wait_for_state(handle, "await_review")
    await decide(handle, "approve")
    result = await handle.result()
    assert [e.event for e in result.history] == [
        "start",
        "prompt_ready",
        "needs_review",
        "approve",
        "embedded",
    ]
    [embedding] = orch.fakes.embedding_calls
    assert embedding.content == "An answer to check."
    assert result.embedding_id == f"vec-{handle.id}"


async def test_a_notify_step_without_a_webhook_goes_on(orch: Orchestration) -> None:
    """A notify step on a worker without REVIEW_WEBHOOK_URL records that none was sent and
    goes on (with one, it starts the notification and never waits for it)."""
    notify = "  - id: tell_support\n    type: notify\n    message: a reply was approved\n"
    text = TRIAGE_V1.replace("  - id: store\n", notify + "  - id: store\n")
    write_pipeline(orch.pipelines, text)
    orch.fakes.llm_script = [LlmCallResult(model="", data={"category": "other"}), Reply()]
    handle = await start(orch, TRIAGE, {"ticket": "Hello"})
    await orch.wait_for_state(handle, "reply_review")
    await decide(handle, "approve")
    result = await handle.result()
    notified = next(e for e in result.history if e.from_state == "tell_support")
    assert (notified.event, notified.detail) == (
        "notified",
        "no webhook configured (REVIEW_WEBHOOK_URL)",
    )


class RecordedNotices:
    """A stand-in for the webhook activity: records each notice, answers 200."""

    def __init__(self) -> None:
        self.notices: list[PipelineNotice] = []
        self.sent = asyncio.Event()

    @activity.defn(name=ACTIVITY_NOTIFY_PIPELINE)
    async def notify_pipeline(self, notice: PipelineNotice) -> int:
        self.notices.append(notice)
        self.sent.set()
        return 200


async def test_a_notify_step_with_a_webhook_sends_ids_and_the_file_s_text(
    orch: Orchestration,
) -> None:
    """On a worker with REVIEW_WEBHOOK_URL, a notify step starts ``notify_pipeline`` with the
    run, the version, the step and the file's message, and goes on without waiting."""
    queue = f"wf-{uuid.uuid4()}"
    notices = RecordedNotices()
    plans = data_plans(orch.pipelines, review_webhook_url="https://hooks.example/x")
    notify = "  - id: tell_support\n    type: notify\n    message: a reply was approved\n"
    write_pipeline(orch.pipelines, TRIAGE_V1.replace("  - id: store\n", notify + "  - id: store\n"))
    async with Worker(
        orch.client,
        task_queue=queue,
        workflows=[PipelineWorkflowUnderTest],
        activities=[
            *orch.fakes.activities,
            *orch.documents.activities,
            plans.plan_pipeline,
            notices.notify_pipeline,
        ],
        workflow_runner=workflow_runner(pass_workflows=True),
    ):
        orch.fakes.llm_script = [LlmCallResult(model="", data={"category": "other"}), Reply()]
        request_id = new_request_id()
        handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
            TRIAGE,
            {"request_id": request_id, "input": {"ticket": "Hello"}},
            id=request_id,
            task_queue=queue,
            result_type=DataResult,
        )
        orch.handles.append(handle)
        await orch.wait_for_state(handle, "reply_review")
        await decide(handle, "approve")
        result = await handle.result()
        # The run does not wait for its notice: the worker stays until it was sent, else the
        # notice's activity would be left scheduled and hold the test server's clock.
        await asyncio.wait_for(notices.sent.wait(), 10)
    [notice] = notices.notices
    assert (notice.workflow_id, notice.pipeline, notice.step) == (
        request_id,
        TRIAGE,
        "tell_support",
    )
    assert notice.version == result.version and notice.message == "a reply was approved"
    assert [n.reason for n in orch.fakes.notices] == ["review_needed"]


async def test_a_continued_run_keeps_its_version_without_reading_the_file(
    orch: Orchestration,
) -> None:
    """After a reedit a run continues as new (one round per run here): the new run compiles
    the version its carried plan holds, though the file has changed, and plans nothing."""
    queue = f"wf-{uuid.uuid4()}"
    plans = data_plans(orch.pipelines, reedit_rounds_per_run=1)
    async with Worker(
        orch.client,
        task_queue=queue,
        workflows=[PipelineWorkflowUnderTest],
        activities=[
            *orch.fakes.activities,
            *orch.documents.activities,
            # The lineage check of this task queue: a continued run must come from it.
            HeldLineage(orch.client, queue).verify_continuation,
            plans.plan_pipeline,
        ],
        workflow_runner=workflow_runner(pass_workflows=True),
    ):
        write_pipeline(orch.pipelines, TRIAGE_V1)
        orch.fakes.llm_script = [
            LlmCallResult(model="", data={"category": "billing"}),
            Reply(content="first"),
            Reply(content="second"),
        ]
        request_id = new_request_id()
        handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
            TRIAGE,
            {"request_id": request_id, "input": {"ticket": "charged twice"}},
            id=request_id,
            task_queue=queue,
            result_type=DataResult,
        )
        orch.handles.append(handle)
        await orch.wait_for_state(handle, "reply_review")
        first_run = (await handle.describe()).run_id
        write_pipeline(orch.pipelines, TRIAGE_V2)
        await decide(handle, "reedit", feedback="Shorter")
        await orch.wait_for_state(handle, "reply_review")
        assert (await handle.describe()).run_id != first_run
        status = await orch.status(handle)
        assert status.pipeline_version is not None and status.pipeline_version.startswith("1@")
        await decide(handle, "approve")
        result = await handle.result()
    assert result.version.startswith("1@")
    assert "check_reply" not in [e.to_state for e in result.history]
    assert result.outputs["draft"]["content"] == "second"


SHOUTER = """name: Shouter
version: 1
input:
  type: object
  properties: {ticket: {type: string}}
steps:
  - id: loud
    type: shout
    text: "{{ input.ticket }}!"
  - id: store
    type: store
    fields: {shouted: steps.loud.text}
"""


def test_a_step_type_written_in_python_is_named_by_files_once_in_the_catalog() -> None:
    """The engine's catalog does not know ``shout``; a catalog that includes it checks the
    file clean (its template's fields too), and a name taken twice is refused."""
    _, problems = check_text(SHOUTER, "shouter.yaml", CATALOG)
    assert [(p.line, p.rule) for p in problems] == [(8, "unknown-step-type")]
    record, problems = check_text(SHOUTER, "shouter.yaml", SHOUTING)
    assert problems == [] and record is not None
    _, problems = check_text(SHOUTER.replace("input.ticket", "input.body"), "s.yaml", SHOUTING)
    assert [(p.line, p.rule) for p in problems] == [(9, "unknown-template-field")]
    with pytest.raises(ValueError, match="two step types are named 'shout'"):
        SHOUTING.including(SHOUT)


async def test_a_step_type_written_in_python_runs_on_the_engine(
    orch: Orchestration, tmp_path: Path
) -> None:
    """A file naming ``shout`` runs on a worker whose workflow and plan use the extended
    catalog: the step's output reaches the store."""
    queue = f"wf-{uuid.uuid4()}"
    write_pipeline(tmp_path, SHOUTER, "shouter.yaml")
    plans = PipelineActivities(
        PlanDefaults.of(pipeline_settings()), PipelineFolder(tmp_path, SHOUTING), SHOUTING, []
    )
    async with Worker(
        orch.client,
        task_queue=queue,
        workflows=[ShoutingWorkflow],
        activities=[*orch.documents.activities, plans.plan_pipeline],
        workflow_runner=workflow_runner(pass_workflows=True),
    ):
        request_id = new_request_id()
        handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
            "Shouter",
            {"request_id": request_id, "input": {"ticket": "help"}},
            id=request_id,
            task_queue=queue,
            result_type=DataResult,
        )
        orch.handles.append(handle)
        result = await handle.result()
    assert [e.to_state for e in result.history] == ["loud", "store", "completed"]
    assert orch.documents.stores[0].fields == {"shouted": "HELP!"}


async def test_a_review_step_s_timeouts_and_reviewers_are_its_own(orch: Orchestration) -> None:
    """A review step's reviewers narrow the run's (a decision by anyone else is refused), and
    its timeouts replace the worker's: unreviewed, it escalates after its own timeout and is
    dead-lettered after its own escalation timeout."""
    policy = "    timeout_s: 120\n    escalation_timeout_s: 7200\n    reviewers: [rita, sam]\n"
    described = "    description: a person checks the drafted reply\n"
    write_pipeline(orch.pipelines, TRIAGE_V1.replace(described, described + policy))
    orch.fakes.llm_script = [LlmCallResult(model="", data={"category": "other"}), Reply()]
    handle = await start(orch, TRIAGE, {"ticket": "Hello"})
    await orch.wait_for_state(handle, "reply_review")
    view = await handle.query(contract.QUERY_REVIEW_VIEW)
    assert view["allowed_reviewers"] == ["rita", "sam"]
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            contract.UPDATE_SUBMIT_REVIEW,
            ReviewDecision(decision="approve", reviewer="tom"),
            result_type=RunStatus,
        )
    assert "not allowed" in str(refused.value.cause)
    await skip_time(orch.env, timedelta(seconds=121))
    await orch.wait_for_state(handle, "reply_review_escalated")
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    result = await orch.status(handle)
    escalated = next(e for e in result.history if e.event == "review_timeout")
    ended = next(e for e in result.history if e.event == "escalation_timeout")
    assert escalated.detail == "no review in 120s"
    assert (ended.at - escalated.at) >= timedelta(seconds=7200)
    assert result.state == "dead_letter"
