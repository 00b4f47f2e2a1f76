"""The local stack as `make dev` runs it keeps a waiting run's document across a restart: the
real dev server (runs in its SQLite file), a worker process, moto and the LLM simulator, all
stopped and started again on the same data folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import run_result
from tests.support.builders import new_request_id
from tests.support.invoices import invoice_fields, text_document
from tests.support.live_runs import status_of, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, starter
from workflows.documents.payloads import DocumentResult

pytestmark = pytest.mark.e2e

RUN_TIMEOUT_S = 60.0


def dev_stack(data_dir: Path) -> LocalStack:
    """A stack configured as `up` configures it (runs and documents kept), with a worker."""
    return LocalStack(
        data_dir,
        persist=True,
        keep_documents=True,
        with_worker=True,
        worker_env={**E2E_WORKER_ENV, "HEALTH_PORT": "0"},
    )


async def test_a_document_run_waiting_for_review_survives_a_stack_restart(tmp_path: Path) -> None:
    """A document run started from the CLI with an invoice file waits for review; the whole
    stack stops and starts again on the same data folder; a reedit with feedback sent through
    the CLI then analyses the document again (it is still there), and once approved the run
    completes with its fields stored."""
    data_dir = tmp_path / "data"
    invoice = tmp_path / "invoice.txt"
    fields = invoice_fields(401)
    invoice.write_bytes(text_document(fields).data)
    run_id = new_request_id()

    with dev_stack(data_dir) as stack:
        started = starter(
            stack,
            "start",
            "--pipeline",
            "documents",
            str(invoice),
            "--schema",
            "invoice",
            "--id",
            run_id,
        )
        assert started.returncode == 0, started.stderr
        stored_in = f"as {stack.addresses.input_dir.as_uri()}/"
        assert stored_in in started.stdout + started.stderr  # not in moto's S3
        client = await connect(stack)
        await wait_for_state(client.get_workflow_handle(run_id), "await_review", RUN_TIMEOUT_S)

    with dev_stack(data_dir) as stack:
        reedit = ("review", run_id, "reedit", "--feedback", "check the total", "--reviewer", "ann")
        sent = starter(stack, *reedit)
        assert sent.returncode == 0, sent.stderr
        handle = (await connect(stack)).get_workflow_handle(run_id)
        deadline = asyncio.get_running_loop().time() + RUN_TIMEOUT_S
        while (status := await status_of(handle)).review_round != 2:
            assert status.state != "failed", status.last_error
            assert asyncio.get_running_loop().time() < deadline, status.state
            await asyncio.sleep(0.1)
        await wait_for_state(handle, "await_review", RUN_TIMEOUT_S)
        approved = starter(stack, "review", run_id, "approve", "--reviewer", "ann")
        assert approved.returncode == 0, approved.stderr
        result = await asyncio.wait_for(run_result(await connect(stack), run_id), RUN_TIMEOUT_S)

    assert isinstance(result, DocumentResult)
    assert result.state == "completed", result.history[-1]
    assert result.stored_at is not None
    assert result.fields == fields
    analyses = [entry for entry in result.history if entry.to_state == "analyze"]
    assert len(analyses) == 2, result.history  # the reedit analysed the kept document again
