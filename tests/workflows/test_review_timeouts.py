"""Review timers: await_review -> escalate after review_timeout_s, escalate -> dead_letter after
escalation_timeout_s, both crossed with skipped time."""

from __future__ import annotations

from datetime import timedelta

from aiorch.ops.results import finished
from tests.support.history_events import timer_summaries
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, events, path
from tests.support.scripted_activities import Reply
from tests.support.time_skipping import assert_waited, skip_time


async def test_unanswered_review_escalates_then_dead_letters(orch: Orchestration) -> None:
    """With review_timeout_s=3600 and escalation_timeout_s=7200 from the request's options, a run
    waits in await_review until 3600 s of workflow time have passed, escalates (WaitingForInput,
    a review_timeout entry), and after 7200 s more sends one dead letter whose message follows
    the contract, ending in dead_letter. Each wait's timer is summarized for the Web UI by what
    it waits for (review timeout, escalation timeout)."""
    orch.fakes.llm_script = [Reply(content="draft", needs_review=True)]
    options = {"review_timeout_s": 3600, "escalation_timeout_s": 7200}
    handle = await orch.start(review="auto", options=options)

    waiting = await orch.wait_for_state(handle, "await_review")
    assert (waiting.status, waiting.progress) == ("WaitingForInput", 60)
    assert (await orch.ai_state(handle))[0] == "await_review"

    await skip_time(orch.env, timedelta(seconds=3000))
    assert await handle.query("state") == "await_review"

    await skip_time(orch.env, timedelta(seconds=700))
    escalated = await orch.wait_for_state(handle, "escalate")
    assert escalated.status == "WaitingForInput"
    timeout_entry = entry_for(escalated.history, "review_timeout")
    assert (timeout_entry.from_state, timeout_entry.to_state) == ("await_review", "escalate")
    review_entry = entry_for(escalated.history, "needs_review")
    assert_waited(review_entry.at, timeout_entry.at, 3600)
    await orch.check_history(handle, escalated.history)
    assert orch.fakes.dead_letters == []

    await skip_time(orch.env, timedelta(seconds=7000))
    assert await handle.query("state") == "escalate"

    result = await finished(handle)

    assert result.state == "dead_letter"
    assert path(result.history)[-3:] == ["await_review", "escalate", "dead_letter"]
    last = result.history[-1]
    assert last.event == "escalation_timeout"
    assert_waited(timeout_entry.at, last.at, 7200)
    await orch.check_finished(handle, result)
    # Each wait's timer says in the Web UI what it waits for.
    assert timer_summaries(await handle.fetch_history(), orch.client.data_converter) == [
        "review timeout",
        "escalation timeout",
    ]

    [dead_letter] = orch.fakes.dead_letters
    message = dead_letter.message
    description = await handle.describe()
    assert message.workflow_id == handle.id
    assert message.run_id == description.run_id == handle.result_run_id
    assert message.request["request_id"] == handle.id
    assert message.request["options"]["review_timeout_s"] == 3600
    assert message.request["options"]["escalation_timeout_s"] == 7200
    assert message.failed_state == "escalate"
    assert message.attempts == 1
    assert message.last_error is not None and "7200" in message.last_error
    # The message is sent before the final move: its history ends where the run gave up.
    assert message.history == result.history[:-1]
    assert events(message.history)[-1] == "review_timeout"
    status = await orch.status(handle)
    assert (status.status, status.last_error) == ("Failed", message.last_error)


async def test_review_timeout_uses_plan_defaults_without_options(orch: Orchestration) -> None:
    """Without options the plan's timeouts apply (600 s / 1200 s here); review=always asks for
    review even when the model did not."""
    orch.fakes.llm_script = [Reply(needs_review=False)]
    handle = await orch.start(review="always")
    await orch.wait_for_state(handle, "await_review")

    await skip_time(orch.env, timedelta(seconds=599))
    assert await handle.query("state") == "await_review"
    await skip_time(orch.env, timedelta(seconds=2))
    await orch.wait_for_state(handle, "escalate")

    result = await finished(handle)

    assert result.state == "dead_letter"
    timeout_at = entry_for(result.history, "review_timeout").at
    assert_waited(timeout_at, result.history[-1].at, 1200)
    assert len(orch.fakes.dead_letters) == 1
    await orch.check_finished(handle, result)
