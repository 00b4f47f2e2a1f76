"""The document pipeline end to end: the real dev server, worker processes, moto's S3, the LLM
simulator over HTTP, and the SQL store each worker writes (an SQLite file; a real PostgreSQL).

The documents are invoices the tests write themselves, as UTF-8 text and as PDFs, with values
that vary from one to the next; the simulator reads their ``Label: value`` and ``Line: ...``
lines as a model would read the fields off the page. Every stored row is read back with
SQLAlchemy, apart from the product's own table definition, and compared with what the document
says and with the run's result.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import bindparam, create_engine, inspect, text
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from aiorch.devstack.servers import PROJECT_ROOT, start_worker
from aiorch.devstack.stack import LocalStack
from aiorch.ops import claim_check, pipelines
from aiorch.ops.results import run_result
from aiorch.ops.reviews import submit_review
from aiorch.ops.visibility import start_run
from aiorch_runtime.config import Settings
from tests.support.builders import new_request_id
from tests.support.invoices import Document, batch, invoice_fields, pdf_document, text_document
from tests.support.live_runs import status_of, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker, starter
from tests.support.pdfs import encrypted
from tests.support.postgres import running_postgres
from tests.support.simulator import Simulator
from workflows import contract, errors
from workflows.documents.graph import GRAPH
from workflows.documents.payloads import DocumentRequest, DocumentResult
from workflows.payloads import ReviewDecision, ReviewView
from workflows.steps.contract import DOCUMENT_UNREADABLE

pytestmark = pytest.mark.e2e

# Two workers share the stack (HEALTH_PORT 0: no fixed port for either to fight over); the
# second one writes to PostgreSQL and polls a task queue of its own.
# These runs store valid fields unreviewed, as an operator who sets DOCUMENT_REVIEW_MIN=auto
# chose; the default sends every document to a reviewer.
WORKER_ENV = {**E2E_WORKER_ENV, "HEALTH_PORT": "0", "DOCUMENT_REVIEW_MIN": "auto"}
POSTGRES_QUEUE = "documents-postgres"
DOCUMENTS = pipelines.named("documents")
EDGES = {(t.source, t.event, t.target) for t in GRAPH.transitions}
# What one run may take once started, on a loaded machine: a few seconds is typical.
RUN_TIMEOUT_S = 60.0

# The stack, its second worker and the stores.


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'documents.sqlite'}"


@pytest.fixture(scope="module")
def doc_stack(tmp_path_factory: pytest.TempPathFactory, sqlite_url: str) -> Iterator[LocalStack]:
    """One stack for the module; its worker stores into a temporary SQLite file."""
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"), {**WORKER_ENV, "DOCUMENT_STORE_URL": sqlite_url}
    )


@pytest.fixture(scope="module")
async def doc_client(doc_stack: LocalStack) -> Client:
    return await connect(doc_stack)


@pytest.fixture(scope="module")
def doc_simulator(doc_stack: LocalStack) -> Simulator:
    return Simulator(doc_stack.addresses.openai_base_url)


@pytest.fixture(scope="module")
def postgres_url(doc_stack: LocalStack) -> Iterator[str]:
    """A real PostgreSQL, and a second worker on the stack that stores into it (polling
    ``POSTGRES_QUEUE``); both stopped by PID afterwards."""
    with running_postgres() as server:
        url = server.create_database("documents")
        env = {
            **doc_stack.addresses.env(),
            **WORKER_ENV,
            "TEMPORAL_TASK_QUEUE": POSTGRES_QUEUE,
            "DOCUMENT_STORE_URL": url,
            # The embedded vector store serves one process: this worker gets its own.
            "VECTOR_STORE_PATH": str(doc_stack.data_dir / "postgres-worker-vectors"),
        }
        worker = start_worker(
            env=env, log_dir=doc_stack.log_dir / "postgres-worker", cwd=PROJECT_ROOT
        )
        try:
            yield url
        finally:
            worker.stop()


@dataclass(frozen=True)
class Row:
    """A row of the documents table, as SQL gives it back."""

    pipeline: str
    schema_name: str
    fields: dict[str, Any]
    problems: list[dict[str, Any]]
    reviewed_by: str | None
    corrected: bool
    content_sha256: str
    stored_at: datetime


def _utc(value: datetime | str) -> datetime:
    # SQLite keeps the written UTC time as text without a zone; PostgreSQL gives it zoned.
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def stored_rows(url: str, request_ids: list[str]) -> dict[str, list[Row]]:
    """Every row of the documents table for ``request_ids``, by request id (a list each, so a
    duplicate would show); none while the store has written nothing (no table yet)."""
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    if not inspect(engine).has_table("documents"):
        engine.dispose()
        return {}
    query = text(
        "SELECT request_id, pipeline, schema_name, fields, problems, reviewed_by, corrected, "
        "content_sha256, stored_at FROM documents WHERE request_id IN :ids"
    ).bindparams(bindparam("ids", expanding=True))
    try:
        with engine.connect() as connection:
            found = connection.execute(query, {"ids": request_ids}).all()
    finally:
        engine.dispose()
    rows: dict[str, list[Row]] = {}
    for row in found:
        rows.setdefault(row.request_id, []).append(
            Row(
                pipeline=row.pipeline,
                schema_name=row.schema_name,
                fields=_json(row.fields),
                problems=_json(row.problems),
                reviewed_by=row.reviewed_by,
                corrected=bool(row.corrected),
                content_sha256=row.content_sha256,
                stored_at=_utc(row.stored_at),
            )
        )
    return rows


def s3_client(stack: LocalStack) -> Any:
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("s3", endpoint_url=stack.addresses.sqs_endpoint_url)


def reference(stack: LocalStack, request_id: str, document: Document, *, by_s3: bool) -> str:
    """Where the run finds the document: stored in S3 by claim check (as ``starter.py start``
    stores it), or a ``file://`` in the stack's input folder."""
    if by_s3:
        settings = Settings(s3_endpoint_url=stack.addresses.sqs_endpoint_url)
        return claim_check.store_document(settings, request_id, document.data, s3=s3_client(stack))
    path = stack.addresses.input_dir / f"{request_id}.{'pdf' if document.kind == 'pdf' else 'txt'}"
    path.write_bytes(document.data)
    return path.as_uri()


async def start_document(
    client: Client, document: str, *, task_queue: str = contract.DEFAULT_TASK_QUEUE
) -> str:
    """Start a document run the way the CLI does; its request id is its workflow id."""
    request = DocumentRequest(request_id=new_request_id(), document=document)
    return await start_run(client, request, task_queue=task_queue, pipeline=DOCUMENTS)


async def result_of(client: Client, workflow_id: str) -> DocumentResult:
    result = await asyncio.wait_for(run_result(client, workflow_id), RUN_TIMEOUT_S)
    assert isinstance(result, DocumentResult)
    return result


def cli_start(stack: LocalStack, request_id: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``starter.py start --pipeline documents PATH --schema invoice --wait``, as a user runs it."""
    return starter(
        stack,
        "start",
        "--pipeline",
        "documents",
        str(path),
        "--schema",
        "invoice",
        "--id",
        request_id,
        "--wait",
    )


# What every run must show.


def assert_progress_rises(result: DocumentResult) -> None:
    """Every entry is an edge of the document graph, each starts where the last ended, and
    progress never goes down, from 0 to 100."""
    history = result.history
    assert history and history[0].from_state == "idle"
    for entry in history:
        assert (entry.from_state, entry.event, entry.to_state) in EDGES, entry
    for before, after in pairwise(history):
        assert before.to_state == after.from_state, (before, after)
    progress = [GRAPH.progress_of("idle")] + [GRAPH.progress_of(e.to_state) for e in history]
    assert all(a <= b for a, b in pairwise(progress)), progress
    assert (progress[0], progress[-1]) == (0, 100)


def assert_row_is_the_result(row: Row, result: DocumentResult) -> None:
    """The stored row says what the run's result says."""
    assert (row.pipeline, row.schema_name) == ("DocumentPipeline", result.extraction_schema)
    assert row.fields == result.fields
    assert row.problems == [problem.model_dump() for problem in result.problems]
    assert (row.reviewed_by, row.corrected) == (result.reviewed_by, result.corrected)
    assert result.stored_at is not None and row.stored_at == _utc(result.stored_at)


async def run_batch(
    client: Client,
    stack: LocalStack,
    store_url: str,
    documents: list[Document],
    *,
    task_queue: str,
    cli: Callable[[str, Path], subprocess.CompletedProcess[str]] | None = None,
) -> float:
    """Start every document at once (the first through the CLI when ``cli`` is given, the rest
    from S3 and ``file://`` in turn), wait for all, and check each run, its one model call and
    its row; return the seconds from the first start to the last result."""
    ids = [new_request_id() for _ in documents]
    started = time.monotonic()
    waiting = []
    stored: list[tuple[str, Document]] = []
    cli_run = None
    for index, (request_id, document) in enumerate(zip(ids, documents, strict=True)):
        if cli is not None and index == 0:
            path = stack.data_dir / f"upload-{request_id}.txt"
            path.write_bytes(document.data)
            cli_run = asyncio.create_task(asyncio.to_thread(cli, request_id, path))
            continue
        ref = reference(stack, request_id, document, by_s3=index % 2 == 0)
        if ref.startswith("s3://"):
            stored.append((ref, document))
        request = DocumentRequest(request_id=request_id, document=ref)
        waiting.append(start_run(client, request, task_queue=task_queue, pipeline=DOCUMENTS))
    await asyncio.gather(*waiting)
    if cli_run is not None:
        shown = await cli_run
        assert shown.returncode == 0, shown.stderr
        assert f"started {ids[0]}" in shown.stderr  # --wait: stdout is the result alone
        assert "as s3://" in shown.stderr  # stored by claim check: only the reference travels
    results = await asyncio.gather(*(result_of(client, request_id) for request_id in ids))
    took = time.monotonic() - started

    rows = stored_rows(store_url, ids)
    assert sorted(rows) == sorted(ids), "one row per run"
    calls = Counter(
        call["run_id"] for call in Simulator(stack.addresses.openai_base_url).requests()
    )
    for request_id, document, result in zip(ids, documents, results, strict=True):
        assert result.state == "completed", (document.kind, result.history[-1])
        extracted = result.history[1]
        assert extracted.event == "extracted"
        assert (extracted.detail or "").startswith(f"{document.kind}, "), extracted
        assert calls[request_id] == 1
        assert result.fields == document.fields
        assert result.problems == [] and result.reviewed_by is None and not result.corrected
        [row] = rows[request_id]
        assert row.fields == document.fields
        assert row.content_sha256 == document.text_sha256
        assert_row_is_the_result(row, result)
        assert_progress_rises(result)
    s3 = s3_client(stack)
    for ref, document in stored:
        bucket, key = ref.removeprefix("s3://").split("/", 1)
        labelled = s3.head_object(Bucket=bucket, Key=key)["ContentType"]
        assert labelled == (
            "application/pdf" if document.kind == "pdf" else "text/plain; charset=utf-8"
        )
    return took


# The tests.


async def test_twenty_invoices_complete_into_sqlite(
    doc_client: Client, doc_stack: LocalStack, sqlite_url: str
) -> None:
    """Ten text and ten PDF invoices, started at once (one through ``starter.py start
    --pipeline documents FILE --wait``), all complete: one SQLite row per request id whose
    fields are the document's, equal to the run's result, and progress rises in every run."""
    documents = batch(first_seed=100)

    took = await run_batch(
        doc_client,
        doc_stack,
        sqlite_url,
        documents,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        cli=lambda request_id, path: cli_start(doc_stack, request_id, path),
    )

    print(f"SQLite: {len(documents)} documents stored in {took:.1f}s")


async def test_twenty_invoices_complete_into_postgresql(
    doc_client: Client, doc_stack: LocalStack, postgres_url: str
) -> None:
    """The same for a worker whose DOCUMENT_STORE_URL is a real PostgreSQL: twenty runs
    started at once complete, one row each, equal to the document and to the result."""
    documents = batch(first_seed=200)

    took = await run_batch(
        doc_client, doc_stack, postgres_url, documents, task_queue=POSTGRES_QUEUE
    )

    print(f"PostgreSQL: {len(documents)} documents stored in {took:.1f}s")


async def test_a_total_that_does_not_add_up_waits_for_review_and_stores_the_corrections(
    doc_client: Client, doc_stack: LocalStack, sqlite_url: str, doc_simulator: Simulator
) -> None:
    """An invoice whose lines do not add up to its total waits for review, the problem shown in
    the ``review_view`` query; a signed approval with corrected fields is validated again and
    stored: the row holds the corrections, marked corrected and by whom, and no second model
    call was made."""
    printed = invoice_fields(300)
    printed["total"] = str(Decimal(printed["total"]) + Decimal("10.00"))
    document = text_document(printed)
    workflow_id = await start_document(
        doc_client, reference(doc_stack, new_request_id(), document, by_s3=False)
    )
    handle = doc_client.get_workflow_handle(workflow_id)

    await wait_for_state(handle, "await_review", timeout=RUN_TIMEOUT_S)
    view = await handle.query(contract.QUERY_REVIEW_VIEW, result_type=ReviewView)
    assert view.fields == printed and view.corrections
    [problem] = view.problems
    assert problem.startswith(f"total: is {printed['total']}, but the line amounts")
    corrected = {**printed, "total": invoice_fields(300)["total"]}
    outcome = await submit_review(
        doc_client,
        workflow_id,
        ReviewDecision(decision="approve", reviewer="ann", fields=corrected),
        signer=doc_stack.reviewer_key.signer(),
    )
    assert outcome.applied, outcome.describe(workflow_id)
    result = await result_of(doc_client, workflow_id)

    assert result.state == "completed"
    assert result.fields == corrected and result.corrected and result.reviewed_by == "ann"
    [row] = stored_rows(sqlite_url, [workflow_id])[workflow_id]
    assert row.fields == corrected and row.corrected and row.reviewed_by == "ann"
    assert_row_is_the_result(row, result)
    assert [e.event for e in result.history if e.event in ("correct", "approve")] == ["correct"]
    assert len(doc_simulator.chat_requests(workflow_id)) == 1
    assert_progress_rises(result)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        pytest.param(
            lambda pdf: encrypted(pdf, user_password="s3cret"),
            "the PDF is encrypted (it needs a password to open)",
            id="encrypted",
        ),
        pytest.param(lambda pdf: pdf[: len(pdf) // 2], "the PDF is damaged", id="truncated"),
        pytest.param(
            lambda pdf: b"%PDF-1.7\n" + random.Random(7).randbytes(4096),
            "the PDF is damaged",
            id="garbage",
        ),
    ],
)
async def test_an_unreadable_pdf_fails_the_run_in_one_line(
    doc_client: Client,
    doc_stack: LocalStack,
    doc_simulator: Simulator,
    sqlite_url: str,
    tmp_path: Path,
    damage: Callable[[bytes], bytes],
    reason: str,
) -> None:
    """A PDF that cannot be read, started with ``starter.py start --pipeline documents FILE
    --wait``, fails the run at extraction: the CLI says so in one line naming
    DocumentUnreadable (exit status 3: the run did not complete), the run's failure names it,
    ``last_error`` is one line, no model call was made and nothing was stored."""
    request_id = new_request_id()
    path = tmp_path / "scan.pdf"
    path.write_bytes(damage(pdf_document(invoice_fields(400)).data))

    shown = await asyncio.to_thread(cli_start, doc_stack, request_id, path)

    assert shown.returncode == 3
    # stderr also carries --wait's progress (where the file went, the id, the Web UI link);
    # the error is one line.
    *progress, line = shown.stderr.strip().splitlines()
    assert f"started {request_id}" in progress
    assert not any("error" in earlier.lower() for earlier in progress), progress
    assert line.startswith(f"error: run {request_id} ended in failed: {DOCUMENT_UNREADABLE}: ")
    assert reason in line
    handle = doc_client.get_workflow_handle(request_id)
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.RUN_FAILED
    assert cause.message == f"run ended in failed ({DOCUMENT_UNREADABLE})"
    status = await status_of(handle)
    assert status.last_error is not None and "\n" not in status.last_error
    assert status.last_error.startswith(
        f"{DOCUMENT_UNREADABLE}: the document cannot be read: {reason}"
    )
    assert doc_simulator.requests(request_id) == []
    result = await result_of(doc_client, request_id)
    assert [e.to_state for e in result.history] == ["extract_text", "failed"]
    assert_progress_rises(result)
    assert stored_rows(sqlite_url, [request_id]) == {}


async def test_a_worker_killed_during_analysis_leaves_one_row_and_no_extra_call(
    doc_client: Client, doc_stack: LocalStack, doc_simulator: Simulator, sqlite_url: str
) -> None:
    """The worker is SIGKILLed while the model call hangs (a directive in the document); a new
    worker takes over: the hung attempt times out on its heartbeat, one more call succeeds, and
    the run completes with exactly one row and two model calls (the one in flight and the
    one after the restart)."""
    fields = invoice_fields(500)
    document = text_document(fields, "[sim:hang=60:times=1]")
    workflow_id = await start_document(
        doc_client, reference(doc_stack, new_request_id(), document, by_s3=True)
    )
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not any(r["status"] is None for r in doc_simulator.chat_requests(workflow_id)):
        assert time.monotonic() < deadline, "the model call never started"
        await asyncio.sleep(0.05)

    doc_stack.kill_worker()
    killed_at = time.monotonic()
    doc_stack.start_worker()
    result = await result_of(doc_client, workflow_id)
    took = time.monotonic() - killed_at

    assert result.state == "completed" and result.fields == fields
    calls = doc_simulator.chat_requests(workflow_id)
    assert [call["status"] for call in calls] == [None, 200]
    retry = next(entry for entry in result.history if entry.to_state == "retry_analyze")
    assert retry.detail == "Timeout: activity timed out (HEARTBEAT)"
    rows = stored_rows(sqlite_url, [workflow_id])
    assert [len(found) for found in rows.values()] == [1]
    assert_row_is_the_result(rows[workflow_id][0], result)
    assert_progress_rises(result)
    print(f"worker SIGKILL during analysis: run completed {took:.1f}s after the kill")
