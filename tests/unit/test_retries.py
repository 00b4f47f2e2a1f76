"""The operator tools' one retry rule (`aiorch.ops.retries`): which failures are transient, how
often a call is made, and what is never made again."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops.retries import ATTEMPTS, is_transient, retrying


def rpc(status: RPCStatusCode) -> RPCError:
    return RPCError(status.name, status, b"")


def update_timed_out(cause: BaseException) -> WorkflowUpdateRPCTimeoutOrCancelledError:
    error = WorkflowUpdateRPCTimeoutOrCancelledError()
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (rpc(RPCStatusCode.UNAVAILABLE), True),
        (rpc(RPCStatusCode.DEADLINE_EXCEEDED), True),
        (rpc(RPCStatusCode.RESOURCE_EXHAUSTED), True),
        (update_timed_out(rpc(RPCStatusCode.DEADLINE_EXCEEDED)), True),
        (update_timed_out(asyncio.CancelledError()), False),
        (rpc(RPCStatusCode.NOT_FOUND), False),
        (rpc(RPCStatusCode.INVALID_ARGUMENT), False),
        (rpc(RPCStatusCode.CANCELLED), False),
        (WorkflowUpdateFailedError(ApplicationError("no", type="DecisionRefused")), False),
    ],
)
def test_only_a_call_that_failed_in_transit_is_transient(
    error: BaseException, transient: bool
) -> None:
    """Unavailable, a passed deadline (an update's too) and a full queue are transient; an
    answer (not found, invalid, a refused decision) and a cancellation are not."""
    assert is_transient(error) is transient


@pytest.mark.parametrize(
    ("failures", "calls", "succeeds"),
    [(0, 1, True), (2, 3, True), (ATTEMPTS - 1, ATTEMPTS, True), (ATTEMPTS, ATTEMPTS, False)],
)
async def test_a_transient_failure_is_retried_a_few_times(
    failures: int, calls: int, succeeds: bool
) -> None:
    """A call that fails in transit is made again, up to ATTEMPTS times in all; then the last
    failure is raised."""
    made = 0

    async def call() -> str:
        nonlocal made
        made += 1
        if made <= failures:
            raise rpc(RPCStatusCode.UNAVAILABLE)
        return "answer"

    if succeeds:
        assert await retrying(call, backoff=(0.001, 0.001)) == "answer"
    else:
        with pytest.raises(RPCError):
            await retrying(call, backoff=(0.001, 0.001))
    assert made == calls


async def test_a_refused_decision_is_never_sent_again() -> None:
    """A decision the run refused is raised at once, after one call."""
    made = 0

    async def call() -> None:
        nonlocal made
        made += 1
        raise WorkflowUpdateFailedError(ApplicationError("round 1 is over", type="DecisionRefused"))

    with pytest.raises(WorkflowUpdateFailedError):
        await retrying(call, backoff=(0.001, 0.001))
    assert made == 1
