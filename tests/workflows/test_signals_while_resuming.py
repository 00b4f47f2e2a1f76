"""Signals that reach a continued run before its carried state is vouched for (the moment its
``verify_continuation`` runs) are held and judged once the state is in place, in the order they
came: not against the blank state the run holds until then."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle

from aiorch.ops.results import finished
from tests.workflows.conftest import TASK_PROGRESS_TIMEOUT_S, Orchestration, Reply, notes, path
from workflows import contract
from workflows.payloads import NOTE_CONTINUED_AS_NEW, PipelineResult

# Each junk review is refused, but its bytes stay in history: three of them pass the size at
# which a waiting run continues as new (continuation.CONTINUE_AT_BYTES, 2 MiB).
JUNK_REVIEW = {"decision": "approve", "reviewer": "mallory", "feedback": "x" * 800_000}
# The continued run's workflow tasks time out this soon, so the worker reports its task as
# alive while the held check runs, and the signal sent meanwhile reaches the run before the
# check returns (Temporal delivers it with the next task).
TASK_TIMEOUT = timedelta(seconds=1)


async def resuming(orch: Orchestration) -> tuple[WorkflowHandle[Any, PipelineResult], int]:
    """A run waiting for review that has continued as new, its new run holding in
    ``verify_continuation``; and the review round it waits in."""
    orch.fakes.llm_script = [Reply(needs_review=True)]
    handle = await orch.start(review="auto", task_timeout=TASK_TIMEOUT)
    waiting = await orch.wait_for_state(handle, "await_review")
    orch.lineage.hold = asyncio.Event()
    for _ in range(3):
        await handle.signal(contract.SIGNAL_REVIEW, JUNK_REVIEW)
    await asyncio.wait_for(orch.lineage.entered.wait(), TASK_PROGRESS_TIMEOUT_S)
    return handle, waiting.review_round


async def resume(orch: Orchestration) -> None:
    """Let the held check return once Temporal has delivered what was sent meanwhile."""
    assert orch.lineage.hold is not None
    await asyncio.sleep(TASK_TIMEOUT.total_seconds())
    orch.lineage.hold.set()


async def test_an_operator_signal_sent_while_a_run_resumes_is_held_not_dropped(
    orch: Orchestration,
) -> None:
    """A run waiting for review continues as new (its history grew); a dead_letter signal that
    arrives while the new run verifies its lineage acts once the carried await_review state is
    installed: the run dead-letters at once, as it would have a moment earlier or later."""
    handle, _ = await resuming(orch)
    await handle.signal(contract.SIGNAL_DEAD_LETTER, {"operator": "oncall"})
    await resume(orch)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert result.state == "dead_letter"
    assert len(notes(result.history, NOTE_CONTINUED_AS_NEW)) == 1
    assert path(result.history)[-3:] == ["await_review", "escalate", "dead_letter"]
    [dead_letter] = orch.fakes.dead_letters
    assert dead_letter.message.last_error == "dead-lettered by oncall"
    await orch.check_finished(handle, result)


async def test_a_review_sent_while_a_run_resumes_is_judged_against_the_carried_state(
    orch: Orchestration,
) -> None:
    """An approval for the round the run waits in, arriving while the new run verifies its
    lineage, is judged once the carried state (that round) is installed: it completes the run,
    and the refused junk before it stays counted."""
    handle, review_round = await resuming(orch)
    approval = {"decision": "approve", "reviewer": "ann", "review_round": review_round}
    await handle.signal(contract.SIGNAL_REVIEW, approval)
    await resume(orch)
    result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert result.state == "completed"
    assert [entry.reviewer for entry in result.history if entry.event == "approve"] == ["ann"]
    assert (await orch.status(handle)).reviews_refused == 3
    await orch.check_finished(handle, result)
