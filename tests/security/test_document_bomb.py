"""A "PDF bomb" against the document pipeline, built here with pypdf: a file of a few kB whose
pages all show one Flate-compressed content stream of millions of ``A``s, 200 million characters
of text in all (under pypdf's per-stream cap and far under ``MAX_INPUT_BYTES``).

Extraction stops as soon as the text passes ``MAX_DOCUMENT_CHARS``, with one permanent line
naming it, in a child process: the worker's memory never holds the expanded text, and an
invoice started beside the bomb completes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.documents.extract import DocumentTexts, ExtractActivities
from activities.input_loader import InputLoader
from aiorch.devstack.stack import LocalStack
from aiorch.ops import pipelines
from aiorch.ops.results import run_result
from aiorch.ops.visibility import start_run
from tests.support.builders import new_request_id
from tests.support.invoices import invoice_fields, pdf_document
from tests.support.live_runs import status_of
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.pdfs import bomb_pdf
from workflows.contract import DEFAULT_TASK_QUEUE
from workflows.documents.payloads import DocumentRequest, DocumentResult
from workflows.steps.contract import DOCUMENT_TOO_LARGE
from workflows.steps.document_payloads import ExtractTextInput

pytestmark = pytest.mark.e2e

T = TypeVar("T")
PAGES, CHARACTERS = 40, 5_000_000  # 200 M characters from a file of about 14 kB
CAP = "its text passes MAX_DOCUMENT_CHARS (4000000 characters)"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    """The invoice beside the bomb is valid and stored with no reviewer, so its run completes on
    its own while the bomb's extraction is stopped."""
    return {**E2E_WORKER_ENV, "DOCUMENT_REVIEW_MIN": "auto"}


def rss_of(pid: int | str) -> int:
    """The resident memory of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def peak_rss_while(work: Awaitable[T], pid: int | str) -> tuple[T | BaseException, int]:
    """``work``'s result (or what it raised) and the highest resident memory of ``pid``,
    sampled every 20 ms until it is done."""
    task = asyncio.ensure_future(work)
    peak = rss_of(pid)
    while not task.done():
        peak = max(peak, rss_of(pid))
        await asyncio.sleep(0.02)
    try:
        return task.result(), peak
    except Exception as err:
        return err, peak


def test_the_bomb_is_small_and_expands_to_hundreds_of_millions_of_characters() -> None:
    """The attack's file: a few kB on disk, 40 pages of 5 M characters each."""
    assert len(bomb_pdf(PAGES, CHARACTERS)) < 32 * 1024


@pytest.mark.timeout(60)
async def test_extraction_stops_at_the_cap_in_a_child_not_in_the_worker(tmp_path: Path) -> None:
    """``extract_text`` on the bomb ends within 20 s with DocumentTooLarge naming
    MAX_DOCUMENT_CHARS, and this process (the worker's) grows by less than 64 MiB: the text is
    expanded in a child process, and only up to the cap."""
    (tmp_path / "bomb.pdf").write_bytes(bomb_pdf(PAGES, CHARACTERS))
    activities = ExtractActivities(DocumentTexts(InputLoader(file_roots=[tmp_path])))
    before = rss_of("self")
    started = time.monotonic()

    outcome, peak = await peak_rss_while(
        asyncio.wait_for(
            ActivityEnvironment().run(
                activities.extract_text,
                ExtractTextInput(
                    request_id=new_request_id(), reference=(tmp_path / "bomb.pdf").as_uri()
                ),
            ),
            timeout=20,
        ),
        "self",
    )

    assert isinstance(outcome, ApplicationError), outcome
    assert outcome.type == DOCUMENT_TOO_LARGE and outcome.non_retryable
    assert CAP in outcome.message and "\n" not in outcome.message
    assert time.monotonic() - started < 20
    assert peak - before < 64 * MIB, f"grew by {(peak - before) // MIB} MiB"


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_bomb_run_fails_in_one_line_while_an_invoice_beside_it_completes(
    stack: LocalStack, client: Client
) -> None:
    """Through a real worker: a document run on the bomb fails within a minute, its
    ``last_error`` one line naming MAX_DOCUMENT_CHARS; an invoice started at the same time
    completes with its fields; the worker process stays up, under 500 MiB throughout."""
    worker = stack.processes["worker"]
    inputs = stack.addresses.input_dir
    (inputs / "bomb.pdf").write_bytes(bomb_pdf(PAGES, CHARACTERS))
    fields = invoice_fields(38)
    (inputs / "invoice.pdf").write_bytes(pdf_document(fields).data)
    documents = pipelines.named("documents")
    bomb_id, invoice_id = new_request_id(), new_request_id()
    started = time.monotonic()
    for request_id, name in ((bomb_id, "bomb.pdf"), (invoice_id, "invoice.pdf")):
        request = DocumentRequest(request_id=request_id, document=(inputs / name).as_uri())
        await start_run(client, request, task_queue=DEFAULT_TASK_QUEUE, pipeline=documents)

    async def both() -> tuple[object, object]:
        bomb = await asyncio.wait_for(run_result(client, bomb_id), 60)
        took = time.monotonic() - started
        assert took < 60, f"the bomb's run took {took:.0f} s"
        return bomb, await asyncio.wait_for(run_result(client, invoice_id), 60)

    outcome, peak = await peak_rss_while(both(), worker.pid)

    assert not isinstance(outcome, BaseException), outcome
    bomb, invoice = outcome
    assert isinstance(bomb, DocumentResult) and bomb.state == "failed"
    status = await status_of(client.get_workflow_handle(bomb_id))
    assert status.last_error is not None and "\n" not in status.last_error
    assert status.last_error.startswith(f"{DOCUMENT_TOO_LARGE}: the document is too large: {CAP}")
    assert isinstance(invoice, DocumentResult) and invoice.state == "completed"
    assert invoice.fields == fields
    assert worker.is_running()
    assert peak < 500 * MIB, f"the worker reached {peak // MIB} MiB"
