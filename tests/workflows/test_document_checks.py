"""The document pipeline's validation inside a workflow, under the full sandbox: it imports and
runs there (no clock, I/O or module state), and gives the same report as outside."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.unit.test_document_validation import valid_invoice
from tests.workflows.document_checks import DocumentChecks
from workflows.documents import ValidationReport
from workflows.documents.schemas import INVOICE


async def check_in_workflow(env: WorkflowEnvironment, value: Any) -> ValidationReport:
    task_queue = f"document-checks-{uuid.uuid4()}"
    async with Worker(env.client, task_queue=task_queue, workflows=[DocumentChecks]):
        return await env.client.execute_workflow(
            DocumentChecks.run,
            args=["invoice", value],
            id=f"checks-{uuid.uuid4()}",
            task_queue=task_queue,
        )


async def test_validation_runs_in_the_sandbox_as_outside(env: WorkflowEnvironment) -> None:
    """A valid invoice, one breaking every business rule and one the schema refuses give the
    same reports inside the workflow sandbox as in plain Python."""
    broken = valid_invoice() | {"due_date": "2026-01-01", "currency": "ABC", "total": "1"}
    broken["line_items"][0]["amount"] = "99"
    refused = valid_invoice() | {"issue_date": "31/03/2026", "tax": "NaN"}
    values = [valid_invoice(), broken, refused]
    reports = [await check_in_workflow(env, value) for value in values]
    assert reports == [INVOICE.check(value) for value in values]
    assert reports[0].valid
    assert [problem.field for problem in reports[1].problems] == [
        "line_items[0].amount",
        "total",
        "due_date",
        "currency",
    ]
    assert reports[2].fields is None
