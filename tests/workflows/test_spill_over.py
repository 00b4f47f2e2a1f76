"""Spill-over as a run walks it: a batch-eligible run's call that the model's shared capacity
would keep waiting past the plan's ``spill_after_s`` is made again at once in the batch lane
(the same attempt; the run waits in await_batch, the transition says it spilled, the history
holds the ``spill-over`` patch marker); a run that is not eligible, or whose wait is short,
waits in await_capacity as before and records no marker."""

from __future__ import annotations

import json
from typing import Any

from temporalio.client import WorkflowHandle

from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.run_history import entry_for, path
from tests.support.scripted_activities import PRIMARY_MODEL, Reply, batched, no_capacity
from workflows.payloads import PipelineResult
from workflows.steps.llm_call import SPILL_OVER_PATCH

BATCH = "batch_sim000043"


async def patches(handle: WorkflowHandle[Any, PipelineResult]) -> list[str]:
    """The ids of the patches recorded in the run's Temporal history (its patch markers)."""
    found = []
    async for event in handle.fetch_history_events():
        marker = event.marker_recorded_event_attributes
        if (
            event.HasField("marker_recorded_event_attributes")
            and marker.marker_name == "core_patch"
        ):
            found += [json.loads(p.data)["id"] for p in marker.details["patch-data"].payloads]
    return found


async def test_an_eligible_call_past_the_threshold_spills_to_the_batch_lane(
    orch: Orchestration,
) -> None:
    """Told to wait 42 s where the plan spills after 10 s, the run does not wait for capacity:
    its attempt 1 is made again in the batch lane, the run waits in await_batch and completes
    with the batch's answer at the batched call's price, one attempt in all (the batched call
    marked spilled, for the spill-over metric), and its history says it spilled and holds the
    spill-over patch."""
    orch.fakes.plan_overrides = {"spill_after_s": 10.0}
    orch.fakes.llm_script = [no_capacity(42), batched(BATCH, "call-7")]
    orch.fakes.batch_script = [Reply(content="from the batch")]
    handle = await orch.start()

    result = await finished(handle)
    assert result.content == "from the batch"
    assert path(result.history) == [
        "idle",
        "fetch_prompt",
        "invoke_llm",
        "await_batch",
        "invoke_llm",
        "generate_embedding",
        "completed",
    ]
    assert entry_for(result.history, "batch_submitted").detail == (
        f"spilled over a 42.00s wait for capacity: in batch {BATCH} on {PRIMARY_MODEL}"
    )
    assert [(call.lane, call.attempt, call.spilled) for call in orch.fakes.llm_calls] == [
        ("sync", 1, False),
        ("batch", 1, True),
    ]
    status = await orch.status(handle)
    assert (status.attempts, status.cost_usd, status.batch_id) == (1, 0.001, BATCH)
    assert await patches(handle) == [SPILL_OVER_PATCH]
    await orch.check_finished(handle, result)


async def test_a_run_that_is_not_eligible_waits_for_capacity(orch: Orchestration) -> None:
    """Without ``spill_after_s`` (not batch-eligible, or SPILL_OVER off) the same 42 s answer
    sends the run to await_capacity; its calls stay synchronous and no patch is recorded."""
    orch.fakes.llm_script = [no_capacity(42), Reply(content="at last")]
    handle = await orch.start()

    result = await finished(handle)
    assert result.content == "at last"
    assert path(result.history)[2:5] == ["invoke_llm", "await_capacity", "invoke_llm"]
    assert [call.lane for call in orch.fakes.llm_calls] == ["sync", "sync"]
    assert orch.fakes.batch_waits == []
    assert await patches(handle) == []
    await orch.check_finished(handle, result)


async def test_an_eligible_call_with_a_short_wait_waits(orch: Orchestration) -> None:
    """An eligible run told to wait 5 s, under its 10 s threshold, waits in await_capacity as
    any run does: spill-over only takes calls whose wait would pass the threshold."""
    orch.fakes.plan_overrides = {"spill_after_s": 10.0}
    orch.fakes.llm_script = [no_capacity(5), Reply(content="soon")]
    handle = await orch.start()

    result = await finished(handle)
    assert path(result.history)[2:5] == ["invoke_llm", "await_capacity", "invoke_llm"]
    assert [call.lane for call in orch.fakes.llm_calls] == ["sync", "sync"]
    assert await patches(handle) == []
    await orch.check_finished(handle, result)
