"""Long reedit loops continue as new: the run hands its state to a fresh Temporal run (same
workflow id) after reedit_rounds_per_run rounds, and the loop carries on from there."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from temporalio.client import WorkflowHandle

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import events, notes, transitions
from tests.support.scripted_activities import Reply
from tests.support.time_skipping import POLL_INTERVAL_S, TASK_PROGRESS_TIMEOUT_S
from workflows import contract
from workflows.engine.continuation import CONTINUE_AT_EVENTS
from workflows.payloads import NOTE_CONTINUED_AS_NEW, PipelineResult, RunStatus


async def reedit(handle: WorkflowHandle[Any, PipelineResult], feedback: str) -> RunStatus:
    review = {"decision": "reedit", "reviewer": "ann", "feedback": feedback}
    status: RunStatus = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW, review, result_type=RunStatus
    )
    return status


async def test_reedit_loop_continues_as_new_and_keeps_its_state(orch: Orchestration) -> None:
    """With reedit_rounds_per_run=2 the second reedit moves the loop to a new run: it starts in
    invoke_llm without fetching the prompt again, carries history, attempts, review round and
    feedback, notes the hand-over (when, and the history's length), and finishes the run as one
    workflow id."""
    orch.fakes.plan_overrides["reedit_rounds_per_run"] = 2
    orch.fakes.llm_script = [Reply(content=f"v{n}", needs_review=True) for n in (1, 2, 3, 4)]
    handle = await orch.start(review="auto")
    first_run = (await handle.describe()).run_id

    for feedback in ("one", "two", "three"):
        await orch.wait_for_state(handle, "await_review")
        await reedit(handle, feedback)
    waiting = await orch.wait_for_state(handle, "await_review")

    latest = await handle.describe()
    assert latest.run_id != first_run
    assert waiting.review_round == 4 and waiting.attempts == 4
    [handover] = notes(waiting.history, NOTE_CONTINUED_AS_NEW)
    assert (handover.from_state, handover.to_state) == ("invoke_llm", "invoke_llm")
    assert handover.detail is not None
    assert re.fullmatch(
        r"continued as a new run after 2 review rounds \(\d+ events\)", handover.detail
    )
    before = waiting.history[: waiting.history.index(handover)]
    assert events(before)[-1] == "reedit" and events(before).count("reedit") == 2
    await orch.check_history(handle, waiting.history)

    await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "ann"})
    result = await finished(handle)

    assert result.state == "completed" and result.content == "v4"
    assert len(orch.fakes.prompt_inputs) == 1
    assert [c.attempt for c in orch.fakes.llm_calls] == [1, 2, 3, 4]
    assert orch.fakes.llm_calls[-1].feedback == ["one", "two", "three"]
    assert transitions(result.history)[0].event == "start"
    assert [e.content for e in orch.fakes.embedding_calls] == ["v4"]
    await orch.check_finished(handle, result)


async def test_a_waiting_run_continues_as_new_once_its_history_passes_its_event_budget(
    orch: Orchestration,
) -> None:
    """Signals add events to a run's history whoever sends them: a run waiting for review
    that has passed CONTINUE_AT_EVENTS events (small signals, far below the byte budget)
    continues as new in the same wait and notes how many events it had (the signals here are
    a stranger's reviews, each refused)."""
    orch.fakes.plan_overrides["allowed_reviewers"] = ["ann"]
    orch.fakes.llm_script = [Reply(needs_review=True)]
    handle = await orch.start(review="auto")
    waiting = await orch.wait_for_state(handle, "await_review")
    first_run = (await handle.describe()).run_id
    stranger = {"decision": "approve", "reviewer": "stranger"}

    async def continued() -> bool:
        return (await handle.describe()).run_id != first_run

    for _ in range(CONTINUE_AT_EVENTS // 200 + 5):
        if await continued():
            break
        await asyncio.gather(*(handle.signal(contract.SIGNAL_REVIEW, stranger) for _ in range(200)))
    deadline = asyncio.get_running_loop().time() + TASK_PROGRESS_TIMEOUT_S
    while not await continued():
        assert asyncio.get_running_loop().time() < deadline, "the run never continued as new"
        await asyncio.sleep(POLL_INTERVAL_S)

    resumed = await orch.wait_for_state(handle, "await_review")
    assert resumed.review_round == waiting.review_round
    [handover] = notes(resumed.history, NOTE_CONTINUED_AS_NEW)
    assert handover.detail is not None
    found = re.fullmatch(
        r"continued as a new run while waiting for review \((\d+) events\)", handover.detail
    )
    assert found is not None and int(found[1]) >= CONTINUE_AT_EVENTS
