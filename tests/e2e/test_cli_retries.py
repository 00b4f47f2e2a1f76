"""The CLI through a flaky network: a gRPC front before the local stack's Temporal fails the
calls a test names, as a slow or restarting server fails them (DEADLINE_EXCEEDED, which the
SDK's client does not retry itself). `starter.py` makes a call that failed in transit again
(`aiorch.ops.retries`), and never sends a refused decision twice."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.grpc_proxy import Fault, Proxy, plain_proxy
from tests.support.live_runs import request, start, status_of, wait_for_state
from tests.support.live_stack import starter

pytestmark = pytest.mark.e2e

DEADLINE = Fault(grpc.StatusCode.DEADLINE_EXCEEDED)


@pytest.fixture
def front(stack: LocalStack) -> Iterator[Proxy]:
    with plain_proxy(upstream=stack.addresses.temporal_address) as proxy:
        yield proxy


def through(front: Proxy, stack: LocalStack, *args: str) -> tuple[int, str, str]:
    """``starter.py ARGS`` against the stack, through ``front``."""
    done = starter(stack, *args, env={"TEMPORAL_ADDRESS": front.address})
    return done.returncode, done.stdout, done.stderr


def calls(front: Proxy, method: str) -> int:
    return sum(call.method.endswith(f"/{method}") for call in front.log.snapshot())


async def test_a_read_that_timed_out_is_made_again(
    stack: LocalStack, client: Client, front: Proxy
) -> None:
    """`status` whose first two queries time out in transit asks a third time and prints the
    run's state, exit 0."""
    handle = await start(client, request("Read me through a slow network"))
    await finished(handle)
    front.faults.add("QueryWorkflow", DEADLINE, DEADLINE)

    code, out, err = through(front, stack, "status", handle.id, "--json")

    assert code == 0, err
    assert json.loads(out)["state"] == "completed"
    assert calls(front, "QueryWorkflow") == 3


async def test_a_decision_whose_answer_was_lost_is_sent_again_and_applied_once(
    stack: LocalStack, client: Client, front: Proxy
) -> None:
    """`review` whose update reaches the run but whose answer is lost in transit sends the same
    update again (same id): the run returns the first result, so the command reports the
    decision accepted, and the run records one decision."""
    handle = await start(client, request("Decide me through a flaky network", review="always"))
    await wait_for_state(handle, "await_review")
    front.faults.add("UpdateWorkflowExecution", Fault(DEADLINE.status, answer_lost=True))

    code, out, err = through(front, stack, "review", handle.id, "approve", "--reviewer", "ann")

    assert code == 0, err
    assert f"{handle.id}: approve accepted (round 1)" in out
    assert calls(front, "UpdateWorkflowExecution") == 2
    result = await finished(handle)
    assert [(e.event, e.reviewer) for e in result.history if e.reviewer] == [("approve", "ann")]


async def test_a_refused_decision_is_sent_once(
    stack: LocalStack, client: Client, front: Proxy
) -> None:
    """A decision the run refuses (a round it is not in) is sent once, never again: one update
    call, one error line, exit 1, and the run still waits."""
    handle = await start(client, request("Refuse me once", review="always"))
    await wait_for_state(handle, "await_review")

    code, _, err = through(
        front, stack, "review", handle.id, "approve", "--reviewer", "ann", "--round", "5"
    )

    assert code == 1
    [line] = err.splitlines()
    assert line.startswith(f"error: review refused for {handle.id}: ")
    assert calls(front, "UpdateWorkflowExecution") == 1
    assert (await status_of(handle)).state == "await_review"
    await handle.cancel()
