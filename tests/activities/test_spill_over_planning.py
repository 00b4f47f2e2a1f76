"""Spill-over's settings and planning: ``SPILL_OVER=on`` needs the batch lane, and a run is
planned to spill (its plan's ``spill_after_s``) only when the operator turned spill-over on,
the request marked it batch-eligible and its calls are synchronous."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.planning import PlanActivities, PlanDefaults
from aiorch_runtime.config import ConfigError, Settings
from tests.activities.plan_cases import REQUEST_ID, STORE
from workflows import contract
from workflows.engine.planning import PlanRunInput
from workflows.payloads import PipelineRequest

SPILLING: dict[str, Any] = {
    **STORE,
    "llm_batch": "allowed",
    "spill_over": "on",
    "spill_over_wait_s": 12,
}


async def spill_after(settings: dict[str, Any], options: dict[str, Any]) -> float | None:
    """The ``spill_after_s`` that ``plan_run`` plans for a run with ``options``."""
    plans = PlanActivities(
        PlanDefaults.of(Settings(**settings)), {contract.PIPELINE_LLM: PipelineRequest}
    )
    request = {"request_id": REQUEST_ID, "user_message": "Hi", "options": options}
    plan = await ActivityEnvironment().run(
        plans.plan_run, PlanRunInput(pipeline=contract.PIPELINE_LLM, request=request)
    )
    spill: float | None = plan.spill_after_s
    return spill


def test_spill_over_needs_the_batch_lane() -> None:
    """SPILL_OVER=on with LLM_BATCH=off is refused at start with one line naming LLM_BATCH."""
    with pytest.raises(ConfigError, match=r"SPILL_OVER=on .* needs LLM_BATCH"):
        Settings(**{**SPILLING, "llm_batch": "off"})


@pytest.mark.parametrize(
    ("settings", "options", "planned"),
    [
        (SPILLING, {"batch_eligible": True}, 12.0),
        (SPILLING, {}, None),
        (SPILLING, {"batch_eligible": True, "lane": "batch"}, None),
        ({**SPILLING, "spill_over": "off"}, {"batch_eligible": True}, None),
    ],
    ids=["eligible", "not-eligible", "already-batched", "spill-over-off"],
)
async def test_only_an_eligible_synchronous_run_is_planned_to_spill(
    settings: dict[str, Any], options: dict[str, Any], planned: float | None
) -> None:
    """An eligible run in the synchronous lane spills after SPILL_OVER_WAIT_S; a run that is
    not eligible, one already in the batch lane, or any run with SPILL_OVER off never spills."""
    assert await spill_after(settings, options) == planned
