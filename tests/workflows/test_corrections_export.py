"""``reviews export --since/--until`` (``aiorch.ops.corrections.export``) over real runs on the
time-skipping server: a run that ended in the window gives only the corrections made in it,
``since`` included and ``until`` left out, so consecutive exports never repeat an example.

The time-skipping server keeps no visibility store, so the client lists the test's runs itself
(`ListedRuns`); reading each run's result and request goes to the server as the CLI's does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowHandle

from aiorch.ops.corrections import export
from aiorch.ops.results import finished
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration
from tests.support.time_skipping import TASK_PROGRESS_TIMEOUT_S, skip_time
from workflows import contract
from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.documents.payloads import DocumentResult
from workflows.payloads import LlmCallResult, RunStatus

VALID = {
    "vendor": "Acme Supplies Ltd",
    "invoice_number": "INV-0042",
    "issue_date": "2026-11-02",
    "due_date": "2026-12-02",
    "currency": "EUR",
    "line_items": [
        {"description": "Widgets", "quantity": "3", "unit_price": "4.50", "amount": "13.50"},
    ],
    "tax": "0",
    "total": "13.50",
}


class ListedRuns(Client):
    """The test server's client, listing the given runs as a visibility query would (every
    run given has ended with a result) and keeping the queries it was asked."""

    def __init__(self, client: Client, runs: list[WorkflowHandle[Any, Any]]) -> None:
        super().__init__(**client.config())
        self.runs = runs
        self.queries: list[str | None] = []

    def list_workflows(self, query: str | None = None, **_: Any) -> Any:
        self.queries.append(query)
        return self._described()

    async def _described(self) -> AsyncIterator[WorkflowExecution]:
        for handle in self.runs:
            run_id = handle.result_run_id or handle.run_id
            yield await self.get_workflow_handle(handle.id, run_id=run_id).describe()


async def corrected_twice(orch: Orchestration, request_id: str | None = None) -> DocumentResult:
    """A document run corrected in round 1 (still wrong), then a minute later in round 2."""
    orch.fakes.llm_script = [LlmCallResult(model="", data={**VALID, "total": "25.00"})]
    request_id = request_id or new_request_id()
    handle: WorkflowHandle[Any, DocumentResult] = await orch.client.start_workflow(
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        {"request_id": request_id, "document": "INVOICE ...", "review": "auto"},
        id=request_id,
        task_queue=orch.task_queue,
        result_type=DocumentResult,
    )
    orch.handles.append(handle)
    for round_, reviewer, total in ((1, "ann", "30.00"), (2, "bob", "13.50")):
        await orch.wait_for_state(handle, "await_review")
        decision = {
            "decision": "approve",
            "reviewer": reviewer,
            "fields": {**VALID, "total": total},
            "review_round": round_,
        }
        await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, decision, result_type=RunStatus)
        if round_ == 1:
            await orch.wait_for_state(handle, "await_review")
            await skip_time(orch.env, timedelta(minutes=1))
    return await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)


async def test_an_export_gives_only_the_corrections_made_in_its_window(
    orch: Orchestration,
) -> None:
    """Of a run corrected before ``since`` and again after it, only the later correction is
    exported; a correction made at ``since`` exactly is in, one made at ``until`` is out (the
    next window's)."""
    result = await corrected_twice(orch)
    first, second = result.corrections
    assert second.at - first.at >= timedelta(minutes=1)
    client = ListedRuns(orch.client, orch.handles)

    async def reviewers(**window: Any) -> list[str]:
        return [example.reviewer for example in await export(client, **window)]

    assert await reviewers(since=first.at - timedelta(seconds=1)) == ["ann", "bob"]
    assert await reviewers(since=first.at + timedelta(seconds=1)) == ["bob"]
    assert await reviewers(since=second.at) == ["bob"]
    assert await reviewers(since=first.at, until=second.at) == ["ann"]
    assert await reviewers(since=second.at + timedelta(microseconds=1)) == []
    assert all(query and "CloseTime >= " in query for query in client.queries)


async def test_each_example_is_read_from_its_own_run_with_its_request(orch: Orchestration) -> None:
    """An example's result and request are read from the run listed, not from a later run of
    the same workflow id (here one that needed no review, started with another document); the
    request is read unless ``with_input`` is off; ``until`` and ``pipeline`` narrow the query."""
    request_id = new_request_id()
    result = await corrected_twice(orch, request_id)
    corrected = orch.handles[0]
    orch.fakes.llm_script = [LlmCallResult(model="", data=VALID)]
    later: WorkflowHandle[Any, DocumentResult] = await orch.client.start_workflow(
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        {"request_id": request_id, "document": "ANOTHER INVOICE ...", "review": "auto"},
        id=request_id,
        task_queue=orch.task_queue,
        result_type=DocumentResult,
    )
    assert (await asyncio.wait_for(finished(later), TASK_PROGRESS_TIMEOUT_S)).corrections == []
    client = ListedRuns(orch.client, [corrected])
    since = result.corrections[0].at
    until = result.corrections[1].at + timedelta(seconds=1)

    examples = await export(client, since, until=until, pipeline="documents")
    assert [(e.reviewer, e.workflow_id, e.run_id) for e in examples] == [
        ("ann", request_id, corrected.result_run_id),
        ("bob", request_id, corrected.result_run_id),
    ]
    assert all(e.input is not None and e.input["document"] == "INVOICE ..." for e in examples)
    [query] = client.queries
    assert query is not None
    assert "WorkflowType IN ('DocumentPipeline')" in query and "CloseTime < " in query
    without_input = await export(client, since, until=until, with_input=False)
    assert [e.input for e in without_input] == [None, None]
