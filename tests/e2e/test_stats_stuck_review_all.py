"""`starter.py stats`, `starter.py stuck` and `starter.py review-all` against a dev server seeded
with runs in known states; which runs count as stuck is decided by the times visibility
recorded, never by waiting."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch.ops.stuck import find_stuck
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support import ROOT
from tests.support.live_runs import request, start, status_of, visible_state
from tests.support.reviewing import signed
from workflows import contract
from workflows.payloads import PipelineResult

pytestmark = pytest.mark.e2e


async def starter(stack: LocalStack, *args: str, stdin: str | None = None, expect: int = 0) -> str:
    """Run ``python starter.py ARGS`` against the stack; returns stdout (+ stderr on failure)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        cwd=ROOT,
        env={**stack.addresses.env(), "COLUMNS": "200"},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    raw_out, raw_err = await asyncio.wait_for(
        process.communicate(stdin.encode() if stdin else None), timeout=60
    )
    stdout, stderr = raw_out.decode(), raw_err.decode()
    assert process.returncode == expect, f"exit {process.returncode}\n{stdout}\n{stderr}"
    assert "Traceback" not in stderr
    return stdout + stderr


async def starter_json(stack: LocalStack, *args: str) -> Any:
    return json.loads(await starter(stack, *args, "--json"))


async def all_visible(client: Client, handles: list[WorkflowHandle[Any, Any]], state: str) -> None:
    for handle in handles:
        assert await visible_state(client, handle.id, state, timeout=30), (handle.id, state)


async def final(handle: WorkflowHandle[Any, Any]) -> PipelineResult:
    return await finished(handle)


async def test_stats_and_stuck_find_the_right_runs_and_bulk_actions_work(
    private_stack: LocalStack,
) -> None:
    """Five runs waiting for review since before a moment and three since after it: `stats`
    counts every state, the approval delay and the processing time; a threshold between them
    finds exactly the five, and so does `stuck --before` that moment, whose dead-letter action
    sends them through escalate to dead_letter; a declined confirmation changes nothing,
    timeout moves the three to escalate and cancel ends them."""
    client = await Client.connect(
        private_stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )
    old = [await start(client, request(f"old {i}", review="always")) for i in range(5)]
    await all_visible(client, old, "await_review")

    # Finished runs in known states, while the old ones age.
    done = await start(client, request("plain"))
    approved = await start(client, request("to approve", review="always"))
    rejected = await start(client, request("to reject", review="always"))
    given_up = await start(
        client, request("down [sim:status=500]", options={"llm_max_attempts": 1})
    )
    await all_visible(client, [approved, rejected], "await_review")
    await asyncio.sleep(1.5)
    await approved.signal(
        contract.SIGNAL_REVIEW, await signed(approved, private_stack.reviewer_key, "approve", "ann")
    )
    await rejected.signal(
        contract.SIGNAL_REVIEW, await signed(rejected, private_stack.reviewer_key, "reject", "ann")
    )
    finished = {h.id: (await final(h)).state for h in (done, approved, rejected, given_up)}
    assert sorted(finished.values()) == ["completed", "completed", "dead_letter", "failed"]

    # While the old runs age: stats on five waiting runs and four finished ones.
    stats = await starter_json(private_stack, "stats")
    assert stats["total"] == 9
    assert stats["states"] == {
        "await_review": {"open": 5, "closed": 0},
        "completed": {"open": 0, "closed": 2},
        "failed": {"open": 0, "closed": 1},
        "dead_letter": {"open": 0, "closed": 1},
    }
    assert stats["runs_sampled"] == 4
    assert stats["approvals"] == 1
    assert 1.5 <= stats["approval_delay_s"] < 10
    assert 0 < stats["processing_s"]["completed"] <= stats["processing_s"]["all"] * 2

    young = [await start(client, request(f"young {i}", review="always")) for i in range(3)]
    await all_visible(client, young, "await_review")
    waiting = await find_stuck(client, datetime.now(UTC))
    assert len(waiting) == 8
    since = {run.workflow_id: run.since for run in waiting}
    old_since = max(since[h.id] for h in old)
    young_since = min(since[h.id] for h in young)
    assert old_since < young_since
    between = old_since + (young_since - old_since) / 2
    stuck_before = await find_stuck(client, between)
    assert sorted(run.workflow_id for run in stuck_before) == sorted(h.id for h in old)

    # One command lists and acts, on the runs in their state since before `between`.
    acted = await starter(
        private_stack,
        *("stuck", "--before", between.isoformat(), "--action", "dead-letter", "--yes", "--json"),
    )
    listed, _ = json.JSONDecoder().raw_decode(acted)
    assert sorted(run["workflow_id"] for run in listed["runs"]) == sorted(h.id for h in old)
    assert {run["state"] for run in listed["runs"]} == {"await_review"}
    assert "dead-letter: 5 done, 0 failed" in acted
    for handle in old:
        result = await final(handle)
        assert result.state == "dead_letter"
        tail = [(h.from_state, h.to_state, h.event) for h in result.history[-2:]]
        assert tail == [
            ("await_review", "escalate", "review_timeout"),
            ("escalate", "dead_letter", "escalation_timeout"),
        ]
        assert result.history[-2].detail == "dead-lettered by starter.py stuck"
    await all_visible(client, old, "dead_letter")

    waiting = await starter_json(private_stack, "stuck", "--older-than", "0s")
    assert sorted(run["workflow_id"] for run in waiting["runs"]) == sorted(h.id for h in young)

    declined = await starter(
        private_stack,
        *("stuck", "--older-than", "0s", "--state", "await_review", "--action", "timeout"),
        stdin="n\n",
        expect=1,
    )
    assert "timeout 3 run(s)?" in declined
    assert "error: aborted; nothing was done" in declined
    await all_visible(client, young, "await_review")

    timed_out = await starter(
        private_stack,
        *("stuck", "--older-than", "0s", "--state", "await_review", "--action", "timeout", "-y"),
    )
    assert "timeout: 3 done, 0 failed" in timed_out
    await all_visible(client, young, "escalate")

    cancelled = await starter(
        private_stack,
        *("stuck", "--older-than", "0s", "--state", "escalate", "--action", "cancel", "--yes"),
    )
    assert "cancel: 3 done, 0 failed" in cancelled
    for handle in young:
        try:
            await handle.result()
        except WorkflowFailureError:
            pass
        else:
            raise AssertionError(f"{handle.id} was not cancelled")
    await all_visible(client, young, "cancelled")

    after = await starter_json(private_stack, "stats")
    assert after["states"] == {
        "completed": {"open": 0, "closed": 2},
        "failed": {"open": 0, "closed": 1},
        "dead_letter": {"open": 0, "closed": 6},
        "cancelled": {"open": 0, "closed": 3},
    }


async def test_review_all_decides_each_round_once(private_stack: LocalStack) -> None:
    """`review-all reedit` and then `review-all approve` on the same run, signed with the
    stack's reviewer key: each reads the run's round first, so the approve goes out as a new
    update for round 2 (not the cached answer of round 1) and is counted applied only because
    the run recorded it; the run leaves review and completes with the reedit on round 1 and the
    approve on round 2. Run again on the finished run, review-all finds nothing to review."""
    client = await Client.connect(
        private_stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )
    handle = await start(client, request("Review me in rounds", review="always"))
    assert await visible_state(client, handle.id, "await_review", timeout=30)

    sent_back = await starter(
        private_stack, "review-all", "reedit", "--feedback", "shorter", "--reviewer", "ann", "-y"
    )
    assert "reedit: 1 applied, 0 refused, 0 failed of 1" in sent_back
    deadline = asyncio.get_running_loop().time() + 30
    while (current := await status_of(handle)).state != "await_review" or (
        current.review_round != 2
    ):
        assert asyncio.get_running_loop().time() < deadline, current
        await asyncio.sleep(0.1)
    assert await visible_state(client, handle.id, "await_review", timeout=30)

    approved = await starter(private_stack, "review-all", "approve", "--reviewer", "ann", "-y")

    assert "approve: 1 applied, 0 refused, 0 failed of 1" in approved
    result = await final(handle)
    assert result.state == "completed"
    decisions = [(h.event, h.reviewer, h.review_round) for h in result.history if h.reviewer]
    assert decisions == [("reedit", "ann", 1), ("approve", "ann", 2)]
    assert await visible_state(client, handle.id, "completed", timeout=30)
    again = await starter(private_stack, "review-all", "approve", "--reviewer", "ann", "-y")
    assert "no open run is in await_review" in again
