"""Decisions bound to the run, not the workflow id: a requester who can terminate their run and
start another under the same id (Temporal allows it with ALLOW_DUPLICATE) neither replays a
reviewer's signed approval onto the new run nor swaps the run under a reviewer's open inbox
page; and a run must run under its own request id. Against a real dev server, worker and
review inbox process.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError

from aiorch.devstack.stack import LocalStack
from tests.support.builders import new_request_id
from tests.support.live_runs import request, status_of, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect
from tests.support.reviewing import signed
from workflows import contract, errors
from workflows.payloads import RunStatus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack with the review inbox (alice may log in)."""
    with LocalStack(
        tmp_path_factory.mktemp("run-binding"),
        with_worker=True,
        worker_env=E2E_WORKER_ENV,
        with_inbox=True,
        inbox_reviewers=("alice",),
    ) as running:
        yield running


@pytest.fixture(scope="module")
async def client(stack: LocalStack) -> Client:
    return await connect(stack)


async def waiting(client: Client, message: str, request_id: str) -> WorkflowHandle[Any, Any]:
    """A run (review always) of ``request_id`` once it waits for review; the id may be one an
    earlier, closed run had (what a requester can do)."""
    handle = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        request(message, review="always", request_id=request_id),
        id=request_id,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )
    await wait_for_state(handle, "await_review")
    return handle


async def test_an_approval_is_not_replayed_onto_a_run_that_reuses_the_id(
    stack: LocalStack, client: Client
) -> None:
    """alice's signed approval of round 1 of a benign run, once that run is terminated, is
    refused by the requester's new run under the same id (same round number, other content):
    the update is rejected naming another run of this id, the signal counted as refused, and
    the new run still waits."""
    request_id = new_request_id()
    benign = await waiting(client, "Benign question", request_id)
    approval = await signed(benign, stack.reviewer_key, "approve", "alice")
    await benign.terminate(reason="the requester swaps the run")
    evil = await waiting(client, "EVIL: wire $1M", request_id)

    handle = client.get_workflow_handle(request_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.DECISION_REFUSED
    assert "another run of this workflow id" in cause.message
    await handle.signal(contract.SIGNAL_REVIEW, approval)
    for _ in range(50):
        status = await status_of(evil)
        if status.reviews_refused:
            break
        await asyncio.sleep(0.1)
    assert (status.state, status.reviews_refused) == ("await_review", 1)
    assert "approve" not in [entry.event for entry in status.history]


def hidden_fields(html: str) -> dict[str, str]:
    """A form's hidden fields, as a browser posts them."""
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html))


async def test_a_run_swapped_under_an_open_inbox_page_is_not_approved(
    stack: LocalStack, client: Client
) -> None:
    """alice opens a benign run in the inbox; the requester terminates it and starts a
    malicious one under the same id, which reaches review round 1; alice clicks Approve on the
    page she saw. The decision goes to the run she saw (now closed) and is not sent: the page
    says the run ended or was replaced, and the malicious run still waits, unapproved."""
    url = stack.addresses.inbox_url
    assert url is not None
    request_id = new_request_id()
    benign = await waiting(client, "BENIGN: summarise the refund policy", request_id)
    async with httpx.AsyncClient(base_url=url, follow_redirects=True, timeout=30) as browser:
        login = (await browser.get("/login")).text
        await browser.post(
            "/login",
            data={"token": stack.inbox_token("alice"), **hidden_fields(login)},
        )
        page = (await browser.get(f"/runs/{request_id}")).text
        assert "BENIGN" in page
        form = hidden_fields(page)

        await benign.terminate(reason="the requester swaps the run")
        evil = await waiting(client, "MALICIOUS: publish the salary table", request_id)
        after = await browser.post(
            f"/runs/{request_id}/review", data={**form, "decision": "approve"}
        )

    assert "ended or was replaced" in after.text
    assert "MALICIOUS" in after.text  # the page now shows the run that holds the id
    status = await status_of(evil)
    assert status.state == "await_review"
    assert "approve" not in [entry.event for entry in status.history]


async def test_a_run_under_another_id_than_its_request_id_fails_at_once(client: Client) -> None:
    """A run started with a request whose id is not the workflow id fails at once with
    InvalidRequest saying so: the request id names the run's vector, idempotency keys and
    review tokens."""
    payload = request("hello")
    handle = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        payload,
        id=f"not-{payload['request_id']}",
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == errors.INVALID_REQUEST
    assert "the workflow id must be the request id" in cause.message
