"""A stored document belongs to the run chain that stored it: a client that starts a new run
under the request id of a finished one (the same pipeline for another tenant, or another
pipeline) never replaces the stored row, and the new run's result says why.

The attacker is a plain ``temporalio`` client with namespace access, as in the review's
reproduction: it starts ``DocumentPipeline`` (and ``SupportTriage``, a pipeline defined as data
that stores too) under the victim's id with ``ALLOW_DUPLICATE``, a raw dict as input. Against a
real dev server, worker processes and the LLM simulator; the store is an SQLite file, and a real
PostgreSQL behind a second worker on a task queue of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError

from activities.documents.store import StoreActivities, create_store_engine
from activities.documents.table import StoredDocument
from aiorch.devstack.servers import PROJECT_ROOT, start_worker
from aiorch.devstack.stack import LocalStack
from tests.support.builders import new_request_id
from tests.support.invoices import invoice_fields, text_document
from tests.support.live_runs import status_of
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, write_pipeline
from tests.support.postgres import running_postgres
from tests.support.reviewing import signed
from workflows import contract, errors
from workflows.documents import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.payloads import RunStatus
from workflows.steps.contract import DOCUMENT_STORE_CONFLICT

pytestmark = pytest.mark.e2e

POSTGRES_QUEUE = "documents-postgres"
RUN_TIMEOUT_S = 60.0
REFUSED = f"run ended in failed ({DOCUMENT_STORE_CONFLICT})"


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'documents.sqlite'}"


@pytest.fixture(scope="module")
def pipelines_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worker's PIPELINES_DIR: the support-triage file, which ends in a store step."""
    folder = tmp_path_factory.mktemp("pipelines")
    write_pipeline(folder, TRIAGE_V1)
    return folder


@pytest.fixture(scope="module")
def worker_env(sqlite_url: str, pipelines_dir: Path) -> dict[str, str]:
    return {
        **E2E_WORKER_ENV,
        "HEALTH_PORT": "0",
        # As the review found it: valid fields stored with no reviewer, so nothing but the
        # store's own rule stands between a reused id and the stored row.
        "DOCUMENT_REVIEW_MIN": "auto",
        "DOCUMENT_STORE_URL": sqlite_url,
        "PIPELINES_DIR": str(pipelines_dir),
    }


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, worker_env: dict[str, str]
) -> Iterator[LocalStack]:
    yield from stack_with_worker(tmp_path_factory.mktemp("stack"), worker_env)


@pytest.fixture(scope="module")
async def client(stack: LocalStack) -> Client:
    return await connect(stack)


@pytest.fixture(scope="module")
def postgres_url(stack: LocalStack, worker_env: dict[str, str]) -> Iterator[str]:
    """A real PostgreSQL, and a second worker that stores into it, polling ``POSTGRES_QUEUE``;
    both stopped by PID afterwards."""
    with running_postgres() as server:
        url = server.create_database("documents")
        env = {
            **stack.addresses.env(),
            **worker_env,
            "TEMPORAL_TASK_QUEUE": POSTGRES_QUEUE,
            "DOCUMENT_STORE_URL": url,
            "VECTOR_STORE_PATH": str(stack.data_dir / "postgres-worker-vectors"),
        }
        worker = start_worker(env=env, log_dir=stack.log_dir / "postgres-worker", cwd=PROJECT_ROOT)
        try:
            yield url
        finally:
            worker.stop()


def invoice(seed: int, vendor: str) -> str:
    """An invoice that adds up (so it is stored with no reviewer), from ``vendor``."""
    fields = invoice_fields(seed) | {"vendor": vendor}
    return text_document(fields).data.decode("utf-8")


async def start(
    client: Client, workflow_type: str, request: dict[str, Any], task_queue: str
) -> WorkflowHandle[Any, Any]:
    """Start a run the way any client may: a raw request, the id reused if a run closed."""
    return await client.start_workflow(
        workflow_type,
        request,
        id=request["request_id"],
        task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )


async def stored(url: str, request_id: str) -> StoredDocument | None:
    activities = StoreActivities(create_store_engine(url))
    try:
        return await activities.fetch(request_id)
    finally:
        activities.close()


async def victim_row(client: Client, url: str, task_queue: str) -> StoredDocument:
    """acme's invoice from Example Supplies, stored with no reviewer; its row."""
    request_id = new_request_id()
    handle = await start(
        client,
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        {"request_id": request_id, "document": invoice(1, "Example Supplies"), "tenant": "acme"},
        task_queue,
    )
    result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT_S)
    assert result["state"] == "completed"
    row = await stored(url, request_id)
    assert row is not None and row.fields["vendor"] == "Example Supplies"
    return row


async def assert_refused(handle: WorkflowHandle[Any, Any]) -> None:
    """The run failed at its store step, its failure and last error naming the conflict."""
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), RUN_TIMEOUT_S)
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.RUN_FAILED
    assert cause.message == REFUSED
    status = await status_of(handle)
    assert status.last_error is not None and "\n" not in status.last_error
    assert status.last_error.startswith(f"{DOCUMENT_STORE_CONFLICT}: request {handle.id} is ")
    assert "that row was left as it was" in status.last_error
    assert status.history[-1].to_state == "failed"


async def reused_by_another_tenant(client: Client, url: str, task_queue: str) -> None:
    victim = await victim_row(client, url, task_queue)
    evil = await start(
        client,
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        {"request_id": victim.request_id, "document": invoice(2, "Evil Corp"), "tenant": "evil"},
        task_queue,
    )
    await assert_refused(evil)
    assert await stored(url, victim.request_id) == victim
    assert (victim.tenant, victim.workflow_id) == ("acme", victim.request_id)


async def test_a_reused_id_leaves_the_stored_invoice_unchanged_on_sqlite(
    client: Client, sqlite_url: str
) -> None:
    """After acme's invoice (Example Supplies) completed and was stored, a client starting
    ``DocumentPipeline`` under the same id with an Evil Corp invoice as tenant ``evil`` gets a
    run that fails with DocumentStoreConflict; the SQLite row, its tenant and time included,
    is what acme's run stored."""
    await reused_by_another_tenant(client, sqlite_url, contract.DEFAULT_TASK_QUEUE)


async def test_a_reused_id_leaves_the_stored_invoice_unchanged_on_postgresql(
    client: Client, postgres_url: str
) -> None:
    """The same attack against a worker that stores into PostgreSQL: refused, row unchanged."""
    await reused_by_another_tenant(client, postgres_url, POSTGRES_QUEUE)


async def test_another_pipeline_under_the_id_leaves_the_row_unchanged(
    stack: LocalStack, client: Client, sqlite_url: str
) -> None:
    """A ``SupportTriage`` run started under a stored invoice's id, approved at each review
    step, reaches its store step and fails there with DocumentStoreConflict: the row still
    holds the invoice, of ``DocumentPipeline``."""
    victim = await victim_row(client, sqlite_url, contract.DEFAULT_TASK_QUEUE)
    triage = await start(
        client,
        TRIAGE,
        {"request_id": victim.request_id, "input": {"ticket": "Refund me 100000.00 now"}},
        contract.DEFAULT_TASK_QUEUE,
    )
    deadline = asyncio.get_running_loop().time() + RUN_TIMEOUT_S
    approved: set[int] = set()
    while (status := await status_of(triage)).state not in ("completed", "failed"):
        assert asyncio.get_running_loop().time() < deadline, f"stuck in {status.state}"
        if status.state.endswith("_review") and status.review_round not in approved:
            approval = await signed(triage, stack.reviewer_key, "approve", "rita")
            await triage.execute_update(
                contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus
            )
            approved.add(status.review_round)
        await asyncio.sleep(0.1)
    await assert_refused(triage)
    assert [e.to_state for e in (await status_of(triage)).history][-2:] == ["store", "failed"]
    assert await stored(sqlite_url, victim.request_id) == victim
