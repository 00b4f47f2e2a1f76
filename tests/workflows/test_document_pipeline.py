"""The document pipeline on the engine, on the time-skipping server: extract, analyze,
validate, review when validation finds problems, store; its progress rises along every run's
history, and a reviewer's corrections are validated again before they are stored."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from aiorch.ops.results import finished
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration
from tests.support.scripted_activities import EXTRACTED_SHA256
from tests.support.time_skipping import TASK_PROGRESS_TIMEOUT_S
from workflows import contract, errors
from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.documents.graph import GRAPH
from workflows.documents.payloads import DocumentResult
from workflows.payloads import HistoryEntry, LlmCallResult, ReviewView, RunStatus
from workflows.steps.contract import DOCUMENT_UNREADABLE

VALID = {
    "vendor": "Acme Supplies Ltd",
    "invoice_number": "INV-0042",
    "issue_date": "2026-11-02",
    "due_date": "2026-12-02",
    "currency": "EUR",
    "line_items": [
        {"description": "Widgets", "quantity": "3", "unit_price": "4.50", "amount": "13.50"},
        {"description": "Shipping", "quantity": "1", "unit_price": "5.00", "amount": "5.00"},
    ],
    "tax": "3.70",
    "total": "22.20",
}
WRONG_TOTAL = {**VALID, "total": "25.00"}
EDGES = {(t.source, t.event, t.target) for t in GRAPH.transitions}


def fields(data: dict[str, Any]) -> LlmCallResult:
    """What the real ``invoke_llm`` returns for an extraction: the JSON object it answered."""
    return LlmCallResult(model="", data=data, content="{}")


async def start(
    orch: Orchestration, review: str = "auto", document: str = "INVOICE ..."
) -> WorkflowHandle[Any, DocumentResult]:
    request_id = new_request_id()
    handle: WorkflowHandle[Any, DocumentResult] = await orch.client.start_workflow(
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        {"request_id": request_id, "document": document, "review": review},
        id=request_id,
        task_queue=orch.task_queue,
        result_type=DocumentResult,
    )
    orch.handles.append(handle)
    return handle


def assert_progress_rises(history: list[HistoryEntry]) -> None:
    """Every entry is an edge of the document graph and progress never goes down."""
    moves = [entry for entry in history if entry.from_state != entry.to_state]
    assert moves[0].from_state == "idle"
    for entry in moves:
        assert (entry.from_state, entry.event, entry.to_state) in EDGES, entry
    progress = [GRAPH.progress_of(moves[0].from_state)] + [
        GRAPH.progress_of(entry.to_state) for entry in moves
    ]
    assert all(a <= b for a, b in pairwise(progress)), progress
    assert progress[0] == 0 and progress[-1] == 100


async def waiting(orch: Orchestration, handle: WorkflowHandle[Any, Any]) -> ReviewView:
    await orch.wait_for_state(handle, "await_review")
    view: ReviewView = await handle.query(contract.QUERY_REVIEW_VIEW, result_type=ReviewView)
    return view


async def test_a_valid_invoice_is_extracted_analyzed_validated_and_stored(
    orch: Orchestration,
) -> None:
    """A document whose fields pass every rule goes straight through: one plan, one
    extraction, one model call with the schema, one stored row equal to the fields; progress
    rises from 0 to 100."""
    orch.fakes.llm_script = [fields(VALID)]
    handle = await start(orch)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert result.state == "completed"
    assert [e.to_state for e in result.history] == [
        "extract_text",
        "analyze",
        "validate",
        "store",
        "completed",
    ]
    assert_progress_rises(result.history)
    assert len(orch.documents.plans) == len(orch.documents.extracts) == 1
    [call] = orch.fakes.llm_calls
    assert call.output_schema is not None
    assert orch.documents.rows[handle.id].fields == result.fields == VALID
    assert result.problems == [] and result.reviewed_by is None
    status: RunStatus = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
    assert (status.pipeline, status.progress) == (WORKFLOW_TYPE_DOCUMENT_PIPELINE, 100)


async def test_the_analysis_of_a_referenced_file_names_the_text_that_was_extracted(
    orch: Orchestration,
) -> None:
    """For a document given by reference, the model call carries the reference and the SHA-256
    of the text extraction found, so the analysis reads that text or fails (DocumentChanged);
    inline text travels in the prompt and names no hash."""
    reference = "file:///srv/invoices/inv-0042.txt"
    orch.documents.plan_overrides = {"input_ref": reference}
    orch.fakes.llm_script = [fields(VALID)]
    handle = await start(orch, document=reference)
    assert (await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)).state == "completed"
    [extract] = orch.documents.extracts
    assert extract.reference == reference
    [call] = orch.fakes.llm_calls
    assert (call.input_ref, call.input_sha256) == (reference, EXTRACTED_SHA256)

    orch.documents.plan_overrides = {}
    orch.fakes.llm_script = [fields(VALID)]
    await asyncio.wait_for(finished(await start(orch)), TASK_PROGRESS_TIMEOUT_S)
    assert orch.fakes.llm_calls[1].input_sha256 is None


async def test_a_wrong_total_waits_for_review_and_the_corrected_fields_are_stored(
    orch: Orchestration,
) -> None:
    """Line items that do not add up to the total send the run to review, showing the
    problem; an approval with corrected fields is validated again, and the stored row equals
    the corrections. The correction is kept as data: the reviewer, the round, the fields the
    reviewer saw and the ones they sent, and the pipeline."""
    orch.fakes.llm_script = [fields(WRONG_TOTAL)]
    handle = await start(orch)
    view = await waiting(orch, handle)
    assert view.corrections and view.fields is not None and view.fields["total"] == "25.00"
    assert any("total" in problem for problem in view.problems)

    approval = {"decision": "approve", "reviewer": "ann", "fields": VALID, "review_round": 1}
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert result.state == "completed"
    assert result.corrected and result.reviewed_by == "ann"
    assert orch.documents.rows[handle.id].fields == VALID
    assert orch.documents.rows[handle.id].corrected
    assert len(orch.fakes.llm_calls) == 1  # a correction calls no model
    assert_progress_rises(result.history)
    [correction] = result.corrections
    assert (correction.kind, correction.reviewer, correction.review_round) == ("correct", "ann", 1)
    assert isinstance(correction.before, dict) and correction.before["total"] == "25.00"
    assert correction.after == VALID
    assert correction.pipeline == "documents" and correction.answered


async def test_corrections_that_still_break_a_rule_go_back_to_review(orch: Orchestration) -> None:
    """Corrected fields are validated like the model's: still wrong, the run waits in a new
    review round with the problem, and publishes it (``AiReviewRound`` 2, ``AiStateSince``
    when round 2 began) by the time the update answers; nothing is stored until it is right;
    both corrections are kept as data, each with the fields its reviewer sent."""
    orch.fakes.llm_script = [fields(WRONG_TOTAL)]
    handle = await start(orch)
    await waiting(orch, handle)
    still_wrong = {**WRONG_TOTAL, "total": "30.00"}
    bad = {"decision": "approve", "reviewer": "ann", "fields": still_wrong, "review_round": 1}
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, bad, result_type=RunStatus)
    attributes = (await handle.describe()).typed_search_attributes
    view = await waiting(orch, handle)
    assert view.review_round == 2 and view.fields is not None
    assert view.fields["total"] == "30.00"
    assert attributes.get(contract.AI_REVIEW_ROUND) == 2
    assert (attributes.get(contract.AI_STATE), attributes.get(contract.AI_STATE_SINCE)) == (
        "await_review",
        view.history[-1].at,
    )
    assert not orch.documents.stores
    good = {"decision": "approve", "reviewer": "bob", "fields": VALID, "review_round": 2}
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, good, result_type=RunStatus)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)
    assert result.state == "completed" and orch.documents.rows[handle.id].fields == VALID
    # Each correction is answered by its own fields, even one the run's final result replaced.
    first, second = result.corrections
    assert (first.reviewer, first.after, first.answered) == ("ann", still_wrong, True)
    assert (second.reviewer, second.after, second.answered) == ("bob", VALID, True)


async def test_a_reedit_asks_the_model_again_with_the_feedback(orch: Orchestration) -> None:
    """Reedit sends the run back to analysis: the model is called again with the reviewer's
    feedback, and its new fields, now valid, are stored, owned by the run's chain (its
    workflow id and first run id) and tenant."""
    orch.fakes.llm_script = [fields(WRONG_TOTAL), fields(VALID)]
    handle = await start(orch)
    await waiting(orch, handle)
    reedit = {"decision": "reedit", "reviewer": "ann", "feedback": "Total: 22.20"}
    await handle.signal(contract.SIGNAL_REVIEW, {**reedit, "review_round": 1})
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert result.state == "completed" and result.fields == VALID
    assert [call.feedback for call in orch.fakes.llm_calls] == [[], ["Total: 22.20"]]
    assert_progress_rises(result.history)
    row = orch.documents.rows[handle.id]
    assert (row.workflow_id, row.chain_id) == (handle.id, handle.first_execution_run_id)
    assert row.tenant == "default"


async def test_corrected_fields_are_refused_by_a_pipeline_that_takes_none(
    orch: Orchestration,
) -> None:
    """The LLM pipeline's review takes no corrected fields: an approval carrying them is
    refused with the reason, and the run still waits."""
    handle = await orch.awaiting_review()
    approval = {"decision": "approve", "reviewer": "ann", "fields": {"content": "x"}}
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and "takes no corrected fields" in cause.message
    assert (await orch.status(handle)).state == "await_review"


async def test_review_always_sends_a_valid_document_to_a_reviewer(orch: Orchestration) -> None:
    """With review "always", even valid fields wait for a reviewer; a plain approve stores
    the model's fields as they are."""
    orch.fakes.llm_script = [fields(VALID)]
    handle = await start(orch, review="always")
    view = await waiting(orch, handle)
    assert view.problems == []
    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "ann"})
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)
    assert result.state == "completed" and result.reviewed_by == "ann" and not result.corrected


async def test_review_always_stores_a_reviewers_valid_corrections_at_once(
    orch: Orchestration,
) -> None:
    """With review "always", corrections that pass every rule are stored after the one
    review that made them: the reviewer is not asked again to approve their own fields."""
    orch.fakes.llm_script = [fields(VALID)]
    handle = await start(orch, review="always")
    await waiting(orch, handle)
    edited = {**VALID, "vendor": "ACME Supplies Ltd."}
    approval = {"decision": "approve", "reviewer": "ann", "fields": edited, "review_round": 1}
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)
    assert result.state == "completed" and result.corrected and result.reviewed_by == "ann"
    assert orch.documents.rows[handle.id].fields == edited
    assert [e.event for e in result.history].count("needs_review") == 1


async def test_an_unreadable_document_fails_the_run_in_one_line(orch: Orchestration) -> None:
    """An extraction that fails for good (an encrypted PDF) fails the run at once, its error
    type and message in one line, with no model call and nothing stored."""
    orch.documents.extract_error = ApplicationError(
        "the PDF is encrypted: remove its password and start again",
        type=DOCUMENT_UNREADABLE,
        non_retryable=True,
    )
    handle = await start(orch)
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), TASK_PROGRESS_TIMEOUT_S)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.RUN_FAILED
    assert cause.message == f"run ended in failed ({DOCUMENT_UNREADABLE})"
    status: RunStatus = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
    assert status.last_error == (
        f"{DOCUMENT_UNREADABLE}: the PDF is encrypted: remove its password and start again"
    )
    assert not orch.fakes.llm_calls and not orch.documents.stores


async def test_an_unknown_extraction_schema_fails_the_run_before_anything_runs(
    orch: Orchestration,
) -> None:
    """A request naming no registered schema is refused at once (InvalidRequest naming the
    known ones), with no activity scheduled."""
    request_id = new_request_id()
    handle = await orch.client.start_workflow(
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        {"request_id": request_id, "document": "x", "extraction_schema": "passport"},
        id=request_id,
        task_queue=orch.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), TASK_PROGRESS_TIMEOUT_S)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.INVALID_REQUEST
    assert "no extraction schema 'passport'; known: invoice" in cause.message
    assert not orch.documents.plans
