"""Step types on the engine: the document pipeline and the LLM pipeline written as files and
run as data (extract, fetch, validate with corrections, review, embed, store), a notify step,
a continued run that keeps its version, and a step type written in Python that joins the
catalog by name; what fetch, extract, embed and store record and hand their activities, and
how each fails."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.pipelines import PipelineActivities
from activities.planning import PlanDefaults
from aiorch.ops.results import result_of_failure
from aiorch_runtime.pipeline_files import PipelineFolder, check_text
from aiorch_runtime.sandbox import workflow_runner
from tests.support import ROOT
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration, data_plans, pipeline_settings
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, TRIAGE_V2, write_pipeline
from tests.support.scripted_activities import EXTRACTED_SHA256, HeldLineage, Reply
from tests.support.time_skipping import skip_time
from tests.workflows.data_workflows import (
    SHOUT,
    SHOUTING,
    PipelineWorkflowUnderTest,
    ShoutingWorkflow,
)
from workflows import contract, errors
from workflows.data import (
    ACTIVITY_NOTIFY_PIPELINE,
    ACTIVITY_PLAN_PIPELINE,
    CATALOG,
    DataPlan,
    DataResult,
    PipelineNotice,
    PlanPipelineInput,
)
from workflows.data.steps import input_digest
from workflows.payloads import LlmCallResult, ReviewDecision, RunStatus
from workflows.steps.documents import EXTRACT_RETRY

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


async def test_fields_stored_with_their_problems_keep_them_in_the_record(
    orch: Orchestration,
) -> None:
    """A file that stores fields its validation found problems with (no review between) stores
    the problems with them, the ones the run reports."""
    reviewed = renamed("documents.yaml", "InvoiceAsIs")
    before, review = reviewed.split("  - id: await_review\n")
    spec = before.replace("on: {problems: await_review}", "on: {problems: store}") + (
        "  - id: store" + review.split("  - id: store", 1)[1]
    )
    write_pipeline(orch.pipelines, spec)
    orch.fakes.llm_script = [LlmCallResult(model="", data=INVOICE)]
    result = await (await start(orch, "InvoiceAsIs", {"document": "Invoice INV-7"})).result()
    [row] = orch.documents.stores
    assert [p.field for p in row.problems] == ["currency"]
    assert row.problems == result.problems
    assert row.reviewed_by is None and row.corrected is False


async def test_a_plan_made_before_input_digests_stores_the_inputs_hash(
    orch: Orchestration,
) -> None:
    """A plan recorded by a worker that did not yet put the input's hash in it (a run that was
    waiting across the upgrade) still stores the hash of the run's input."""
    plans = data_plans(orch.pipelines)

    @activity.defn(name=ACTIVITY_PLAN_PIPELINE)
    async def plan_without_digest(plan_input: PlanPipelineInput) -> DataPlan:
        plan = await plans.plan_pipeline(plan_input)
        return plan.model_copy(update={"input_digest": ""})

    queue = f"wf-{uuid.uuid4()}"
    async with Worker(
        orch.client,
        task_queue=queue,
        workflows=[PipelineWorkflowUnderTest],
        activities=[*orch.fakes.activities, *orch.documents.activities, plan_without_digest],
        workflow_runner=workflow_runner(pass_workflows=True),
    ):
        write_pipeline(orch.pipelines, documents("extract"), "documents.yaml")
        given = {"document": "Hello", "divisor": 5}
        request_id = new_request_id()
        handle: WorkflowHandle[Any, DataResult] = await orch.client.start_workflow(
            "Documents",
            {"request_id": request_id, "input": given},
            id=request_id,
            task_queue=queue,
            result_type=DataResult,
        )
        orch.handles.append(handle)
        await handle.result()
    [row] = orch.documents.stores
    assert row.content_sha256 == input_digest(given)


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
    goes on, with no output (with one, it starts the notification and never waits for it)."""
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
    assert "tell_support" not in result.outputs


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
    run, the version, the step and the file's message, and goes on without waiting (recording
    that it notified, with no output)."""
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
    notified = next(e for e in result.history if e.from_state == "tell_support")
    assert (notified.event, notified.detail) == ("notified", "webhook notified")
    assert "tell_support" not in result.outputs
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


DOCUMENTS = """name: Documents
version: 1
input:
  type: object
  properties: {document: {type: string}, divisor: {type: integer}}
steps:
  - id: load
    type: {load}
    document: input.document
  - id: embed
    type: embed
    text: "{{ steps.load.preview }} {{ 10 // input.divisor }}"
  - id: store
    type: store
"""


def documents(step_type: str) -> str:
    return DOCUMENTS.replace("{load}", step_type)


async def outcome(handle: WorkflowHandle[Any, DataResult]) -> DataResult:
    """The run's result, completed or failed: its history and each step's output."""
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        result = result_of_failure(err, DataResult)
        assert isinstance(result, DataResult)
        return result


def steps_taken(result: DataResult) -> list[tuple[str, str, str, str | None]]:
    return [(e.from_state, e.event, e.to_state, e.detail) for e in result.history[1:]]


@pytest.mark.parametrize("step_type", ["fetch", "extract"])
async def test_a_document_step_reads_text_or_a_reference_and_records_what_it_found(
    orch: Orchestration, step_type: str
) -> None:
    """``fetch`` and ``extract`` hand the activity inline text as text and a file:// reference
    as a reference, and record what it found, with the reference (none for text); the text is
    embedded and the input and every output stored."""
    write_pipeline(orch.pipelines, documents(step_type), "documents.yaml")
    inline = await (await start(orch, "Documents", {"document": "Hello", "divisor": 5})).result()
    reference = "file:///docs/a.txt"
    referenced = await (
        await start(orch, "Documents", {"document": reference, "divisor": 5})
    ).result()
    found = {
        "kind": "text",
        "pages": 1,
        "sha256": EXTRACTED_SHA256,
        "preview_truncated": False,
    }
    assert inline.outputs["load"] == {
        **found,
        "characters": 5,
        "preview": "Hello",
        "reference": None,
    }
    assert referenced.outputs["load"] == {
        **found,
        "characters": 0,
        "preview": "",
        "reference": reference,
    }
    assert [(e.text, e.reference) for e in orch.documents.extracts] == [
        ("Hello", None),
        (None, reference),
    ]
    assert steps_taken(inline)[0] == (
        "load",
        f"{step_type}ed",
        "embed",
        "text, 1 page(s), 5 characters",
    )
    assert inline.outputs["embed"] == {"embedding_id": f"vec-{inline.request_id}", "dimensions": 8}
    assert steps_taken(inline)[1][3] == f"embedding vec-{inline.request_id}"
    assert orch.fakes.embedding_calls[0].content == "Hello 2"
    assert inline.stored_at is not None
    assert inline.outputs["store"] == {
        "table": "documents",
        "dialect": "fake",
        "stored_at": inline.stored_at.isoformat(),
    }
    assert steps_taken(inline)[2][3] == "stored in documents (fake)"
    stored = orch.documents.rows[inline.request_id].fields
    assert stored == {
        "input": {"document": "Hello", "divisor": 5},
        "steps": {"load": inline.outputs["load"], "embed": inline.outputs["embed"]},
    }


async def test_a_document_step_fails_the_run_when_the_path_holds_no_document(
    orch: Orchestration,
) -> None:
    """A blank text (or no value) at the document's path fails the run at once, naming the
    path; no extraction is tried."""
    write_pipeline(orch.pipelines, documents("fetch"), "documents.yaml")
    blank = await outcome(await start(orch, "Documents", {"document": "  "}))
    missing = await outcome(await start(orch, "Documents", {}))
    for result in (blank, missing):
        assert result.state == "failed"
        assert (
            steps_taken(result)[-1][3] == "input.document holds no document (text or a reference)"
        )
    assert orch.documents.extracts == []


@pytest.mark.parametrize(
    ("step_type", "attempts", "not_retried"),
    [
        ("fetch", 5, [errors.INVALID_REQUEST, errors.INPUT_UNAVAILABLE]),
        ("extract", 5, list(EXTRACT_RETRY.non_retryable_error_types or [])),
    ],
)
async def test_a_fetch_and_an_extract_step_retry_the_extraction_each_its_own_way(
    orch: Orchestration, step_type: str, attempts: int, not_retried: list[str]
) -> None:
    """A fetch step schedules ``extract_text`` with the fetch policy (five attempts; a bad
    request or an input that is not there is not retried), an extract step with the
    extraction's (which does not retry an unreadable or too large document either); a fetch
    that keeps failing fails the run, an extract dead-letters it, to be redriven."""
    write_pipeline(orch.pipelines, documents(step_type), "documents.yaml")
    orch.documents.extract_error = ApplicationError("store down", type="StoreDown")
    handle = await start(orch, "Documents", {"document": "Hello"})
    result = await outcome(handle)
    [scheduled] = [
        event.activity_task_scheduled_event_attributes
        async for event in handle.fetch_history_events()
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name == "extract_text"
    ]
    policy = scheduled.retry_policy
    assert policy.maximum_attempts == attempts
    assert list(policy.non_retryable_error_types) == not_retried
    assert len(orch.documents.extracts) == attempts
    assert result.state == ("failed" if step_type == "fetch" else "dead_letter")
    assert steps_taken(result)[-1][3] == "StoreDown: store down"


async def test_an_embed_or_store_step_that_fails_ends_the_run(
    orch: Orchestration,
) -> None:
    """A template that fails as it renders ends the run with the step and the reason, as an
    embedding refused for good ends it with the activity's error (an embed step's one way
    out is the dead-letter queue); a store refused for good fails the run with its error."""
    write_pipeline(orch.pipelines, documents("fetch"), "documents.yaml")
    broken = await outcome(await start(orch, "Documents", {"document": "Hi", "divisor": 0}))
    assert steps_taken(broken)[-1][1:] == (
        "exhausted",
        "dead_letter",
        "step embed: a template failed: ZeroDivisionError: integer division or modulo by zero",
    )
    orch.fakes.embedding_script = [
        ApplicationError("input too long", type=errors.EMBEDDING_FAILED, non_retryable=True)
    ]
    refused = await outcome(await start(orch, "Documents", {"document": "Hi", "divisor": 1}))
    assert steps_taken(refused)[-1][3] == "EmbeddingFailed: input too long"
    assert orch.fakes.embedding_attempts == [1]
    orch.documents.store_script = [
        ApplicationError("a row of another run", type="DocumentStoreConflict", non_retryable=True)
    ]
    conflict = await outcome(await start(orch, "Documents", {"document": "Hi", "divisor": 1}))
    assert steps_taken(conflict)[-1][1:] == (
        "permanent_error",
        "failed",
        "DocumentStoreConflict: a row of another run",
    )


ROUTED = """name: Routed
version: 1
input:
  type: object
  properties: {priority: {}}
steps:
  - id: pick
    type: route
    value: input.priority
    cases: {"1": tell}
    default: store
  - id: tell
    type: notify
    message: priority one
  - id: store
    type: store
"""


async def test_a_route_step_compares_the_value_as_text_and_records_it(
    orch: Orchestration,
) -> None:
    """The value at the route's path is compared as text (the number 1 takes case "1"); a
    missing value or one no case names takes ``default``; the history shows the value (cut to
    80 characters), and the step records no output."""
    write_pipeline(orch.pipelines, ROUTED, "routed.yaml")
    given: list[dict[str, Any]] = [{"priority": 1}, {}, {"priority": "p" * 100}]
    results = [await (await start(orch, "Routed", value)).result() for value in given]
    assert [steps_taken(result)[0] for result in results] == [
        ("pick", "1", "tell", "input.priority is '1'"),
        ("pick", "default", "store", "input.priority is ''"),
        ("pick", "default", "store", f"input.priority is {'p' * 80!r}"),
    ]
    assert all("pick" not in result.outputs for result in results)


def test_the_input_digest_is_the_sha256_of_its_canonical_json() -> None:
    """A store step's content hash, when the plan has none, is the SHA-256 of the input as
    canonical JSON: keys sorted, no spaces, text as it is (not escaped to ASCII)."""
    canonical = '{"a":[1,2],"b":"é"}'.encode()
    assert input_digest({"b": "é", "a": [1, 2]}) == hashlib.sha256(canonical).hexdigest()
