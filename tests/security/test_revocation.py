"""Revocation reaches runs already waiting: a reviewer key or a reviewer an operator revokes
(`starter.py keys revoke`) is refused by every open run, including runs planned while it was
trusted, against a real dev server and worker process. The worker's reviewers: alice and bob."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start, status_of, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, starter
from tests.support.reviewing import signed
from workflows import contract
from workflows.payloads import RunStatus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return {**E2E_WORKER_ENV, "ALLOWED_REVIEWERS": "alice,bob"}


async def waiting(client: Client) -> WorkflowHandle[Any, Any]:
    handle = await start(client, request("Review me", review="always"))
    await wait_for_state(handle, "await_review")
    return handle


async def refusal(handle: WorkflowHandle[Any, Any], review: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, review, result_type=RunStatus)
    return str(refused.value.cause)


async def revoked(handle: WorkflowHandle[Any, Any], words: str, review: dict[str, Any]) -> None:
    """The update is refused with ``words`` once the revocation has reached the run."""
    for _ in range(50):
        if words in await refusal(handle, review):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never refused with {words!r}")


async def test_a_revoked_reviewer_is_refused_by_runs_already_waiting(
    stack: LocalStack, client: Client
) -> None:
    """Two runs wait for review, planned while alice was allowed; `keys revoke --reviewer
    alice` reaches both: her signed approval is refused (the reviewer was revoked, nothing
    recorded), bob's is applied."""
    first, second = await waiting(client), await waiting(client)
    done = starter(stack, "keys", "revoke", "--reviewer", "alice", "--operator", "oncall")
    assert done.returncode == 0, done.stderr
    assert "revoked in" in done.stdout
    for handle in (first, second):
        approval = await signed(handle, stack.reviewer_key, "approve", "alice")
        await revoked(handle, "was revoked", approval)
        assert (await status_of(handle)).state == "await_review"
        approval = await signed(handle, stack.reviewer_key, "approve", "bob")
        await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, approval, result_type=RunStatus)
        assert (await finished(handle)).state == "completed"


async def test_a_revoked_key_is_refused_by_a_run_already_waiting(
    stack: LocalStack, client: Client
) -> None:
    """A run waits, planned while the stack's reviewer key was trusted; once the key is revoked
    every review it signed is refused, by the update and by the signal (counted, not
    applied), and the run keeps waiting."""
    handle = await waiting(client)
    done = starter(stack, "keys", "revoke", stack.reviewer_key.key_id)
    assert done.returncode == 0, done.stderr
    approval = await signed(handle, stack.reviewer_key, "approve", "bob")
    await revoked(handle, "signed with a key this run does not know", approval)
    await handle.signal(contract.SIGNAL_REVIEW, approval)
    for _ in range(50):
        status = await status_of(handle)
        if status.reviews_refused:
            break
        await asyncio.sleep(0.1)
    assert (status.state, status.reviews_refused) == ("await_review", 1)
    await handle.terminate(reason="test done")
