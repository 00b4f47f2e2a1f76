"""`starter.py review` run twice, as a shell retry runs it, against the local stack: a decision
is applied once, whether the run is still on its round or has moved on to the next one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start, status_of, wait_for_state
from tests.support.live_stack import connect, stack_with_worker, starter
from tests.support.simulator import Simulator
from workflows import contract

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def review_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack of this module's own: its tests slow the simulator down for everyone."""
    yield from stack_with_worker(tmp_path_factory.mktemp("review"))


async def at_round(handle: WorkflowHandle[Any, Any], review_round: int) -> None:
    """Wait until the run waits for a review of ``review_round`` and publishes it (the round
    `review` reads)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        status = await status_of(handle)
        described = await handle.describe()
        published = described.typed_search_attributes.get(contract.AI_REVIEW_ROUND)
        if status.state == "await_review" and status.review_round == published == review_round:
            return
        assert asyncio.get_running_loop().time() < deadline, (status.state, published)
        await asyncio.sleep(0.1)


def decisions(history: list[Any]) -> list[tuple[str, str | None, int | None]]:
    return [(e.event, e.reviewer, e.review_round) for e in history if e.reviewer]


async def test_a_reedit_sent_again_after_the_run_moved_on_is_refused(
    review_stack: LocalStack,
) -> None:
    """`review ID reedit` run again once the run waits in round 2 (a shell retry) is refused
    in one line that says the reedit of round 1 is recorded and how to decide round 2, exit 1,
    and sends nothing (no second model call). An approve for round 1 gets the answer to the
    reedit (the same reviewer's update for that round): not applied, one line, exit 1. With
    --round 2 the same reedit decides round 2, and an approve (not a repeat) needs no
    --round."""
    client: Client = await connect(review_stack)
    simulator = Simulator(review_stack.addresses.openai_base_url)
    handle = await start(client, request("Review me in rounds", review="always"))
    await at_round(handle, 1)
    reedit = ("review", handle.id, "reedit", "--feedback", "shorter", "--reviewer", "ann")

    first = starter(review_stack, *reedit)
    assert first.returncode == 0, first.stderr
    assert f"{handle.id}: reedit accepted (round 1)" in first.stdout
    await at_round(handle, 2)

    again = starter(review_stack, *reedit)

    assert again.returncode == 1
    assert again.stderr == (
        f"error: {handle.id}: ann's reedit for round 1 is already recorded and the run is at "
        "round 2 now; nothing was sent (to decide round 2 too, add --round 2)\n"
    )
    assert len(simulator.chat_requests(handle.id)) == 2
    late = starter(
        review_stack, "review", handle.id, "approve", "--reviewer", "ann", "--round", "1"
    )
    assert late.returncode == 1, late.stdout
    assert late.stderr == (
        f"error: {handle.id}: round 1 was already decided (reedit by ann); your approve was not "
        f"applied (`starter.py status {handle.id}` shows where the run is now)\n"
    )
    assert decisions((await status_of(handle)).history) == [("reedit", "ann", 1)]

    explicit = starter(review_stack, *reedit, "--round", "2")
    assert explicit.returncode == 0, explicit.stderr
    assert f"{handle.id}: reedit accepted (round 2)" in explicit.stdout
    await at_round(handle, 3)
    approved = starter(review_stack, "review", handle.id, "approve", "--reviewer", "ann")
    assert approved.returncode == 0, approved.stderr
    result = await finished(handle)
    assert result.state == "completed"
    assert decisions(result.history) == [
        ("reedit", "ann", 1),
        ("reedit", "ann", 2),
        ("approve", "ann", 3),
    ]
    assert len(simulator.chat_requests(handle.id)) == 3


async def test_a_reedit_sent_again_within_its_round_returns_the_first_result(
    review_stack: LocalStack,
) -> None:
    """`review ID reedit` run again while the run is still answering it (its model call is
    slow) names the same round, so the run returns the first result: the second command
    prints the same acceptance, exit 0, and the run records one reedit and makes one call."""
    client: Client = await connect(review_stack)
    simulator = Simulator(review_stack.addresses.openai_base_url)
    handle = await start(client, request("Review me slowly", review="always"))
    await at_round(handle, 1)
    simulator.set_fault({"delay_ms": 8000, "path": "chat", "times": 1})
    reedit = ("review", handle.id, "reedit", "--feedback", "shorter", "--reviewer", "ann")

    first = starter(review_stack, *reedit)
    again = starter(review_stack, *reedit)

    for done in (first, again):
        assert done.returncode == 0, done.stderr
        assert f"{handle.id}: reedit accepted (round 1); now invoke_llm" in done.stdout
    await at_round(handle, 2)
    assert decisions((await status_of(handle)).history) == [("reedit", "ann", 1)]
    assert len(simulator.chat_requests(handle.id)) == 2
    await wait_for_state(handle, "await_review")
    await handle.cancel()


async def test_a_review_sent_again_after_the_run_ended_says_so(review_stack: LocalStack) -> None:
    """`review ID approve` run again once the run has completed sends nothing and says in one
    line that the approval is already applied and the run has ended (no stale "now ..."
    answer), exit 1: this command applied nothing; another reviewer's decision then is one
    line saying the run has ended, exit 1."""
    client: Client = await connect(review_stack)
    handle = await start(client, request("Review me once", review="always"))
    await at_round(handle, 1)
    approve = ("review", handle.id, "approve", "--reviewer", "ann")
    first = starter(review_stack, *approve)
    assert first.returncode == 0, first.stderr
    assert (await finished(handle)).state == "completed"

    again = starter(review_stack, *approve)

    assert again.returncode == 1, again.stdout
    assert again.stderr == (
        f"error: {handle.id}: approve for round 1 is already applied; the run has ended: "
        "completed; nothing was sent\n"
    )
    late = starter(review_stack, "review", handle.id, "reject", "--reviewer", "bob")
    assert late.returncode == 1
    assert late.stderr == (
        f"error: run {handle.id} has ended (completed); nothing was sent "
        f"(`starter.py result {handle.id}` shows how it ended)\n"
    )
    assert decisions((await finished(handle)).history) == [("approve", "ann", 1)]
