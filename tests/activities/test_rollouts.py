"""The rollout choice inside the plan activities, with the halts in a real capacity store
(Valkey): a run's variant is recorded in its plan and applied with its prompt, a halt reaches
the next plan at once, a run already planned keeps its variant, and a store that cannot be read
gives the control."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as redis
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from activities.experiments import (
    METRIC_EXPERIMENT_HALTED,
    METRIC_EXPERIMENT_RUNS,
    Rollouts,
)
from activities.input_loader import InputLoader
from activities.planning import PlanActivities, PlanDefaults
from activities.prompt import PromptActivities
from aiorch.devstack.processes import free_port
from aiorch_runtime.config import Settings
from aiorch_runtime.experiment_halts import Halt, HaltStore
from aiorch_runtime.experiments import Experiment
from workflows import contract
from workflows.engine.planning import PlanRunInput, RunPlan
from workflows.payloads import PipelineRequest, PromptInput, PromptPlan

EXPERIMENT = Experiment.model_validate(
    {
        "id": "prompt-v2",
        "variants": [
            {"name": "A", "weight": 50},
            {"name": "B", "weight": 50, "model": "sim-b", "system_prompt": "Answer tersely."},
        ],
    }
)
DEFAULTS = PlanDefaults.of(Settings())
REQUEST = PipelineRequest(request_id="a" * 24, user_message="hello")


def workflow_ids(variant: str) -> list[str]:
    """Workflow ids the experiment gives ``variant``."""
    ids = (f"{n:024x}" for n in range(400))
    return [i for i in ids if EXPERIMENT.choose(i).variant.name == variant][:5]


def environment(workflow_id: str, runtime: Runtime | None = None) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=workflow_id)
    if runtime is not None:
        env.metric_meter = runtime.metric_meter
    return env


async def plan_run(rollouts: Rollouts, workflow_id: str, runtime: Runtime | None = None) -> RunPlan:
    plans = PlanActivities(DEFAULTS, {contract.PIPELINE_LLM: PipelineRequest}, rollouts)
    plan_input = PlanRunInput(
        pipeline=contract.PIPELINE_LLM, request=REQUEST.model_dump(mode="json")
    )
    plan: RunPlan = await environment(workflow_id, runtime).run(plans.plan_run, plan_input)
    return plan


def halt(by: str = "watcher") -> Halt:
    return Halt(at=datetime.now(UTC), reason="B's problem rate is over A's", by=by)


async def test_fetch_prompt_records_the_variant_and_runs_with_its_changes(
    valkey_client: redis.Redis,
) -> None:
    """An LLM run assigned B plans B's model and system prompt with the user's own prompt,
    and its plan names the experiment and variant; a run assigned A is planned as configured
    (its plan naming A)."""
    rollouts = Rollouts({contract.PIPELINE_LLM: EXPERIMENT}, HaltStore(valkey_client))
    fetch_prompt = PromptActivities(DEFAULTS, InputLoader(), rollouts).fetch_prompt
    message = PromptInput(request=REQUEST)
    control = PromptActivities(DEFAULTS, InputLoader()).fetch_prompt
    configured: PromptPlan = await environment("x" * 24).run(control, message)
    b: PromptPlan = await environment(workflow_ids("B")[0]).run(fetch_prompt, message)
    a: PromptPlan = await environment(workflow_ids("A")[0]).run(fetch_prompt, message)
    assert (b.model, b.system_prompt, b.user_prompt) == (
        "sim-b",
        "Answer tersely.",
        configured.user_prompt,
    )
    assert b.assignment is not None and b.assignment.describe().startswith("prompt-v2/B")
    assert a.model_copy(update={"assignment": None}) == configured
    assert a.assignment is not None and a.assignment.variant.name == "A"


async def test_a_run_on_the_lab_queue_is_never_assigned(valkey_client: redis.Redis) -> None:
    """A plan made on the replay lab's task queue (a fork's) gets no variant, even for an id
    the experiment gives B: the fork carries its original's; on any other queue it gets B."""
    store = HaltStore(valkey_client)
    [b_id, *_] = workflow_ids("B")
    plans = PlanActivities(
        DEFAULTS,
        {contract.PIPELINE_LLM: PipelineRequest},
        Rollouts({contract.PIPELINE_LLM: EXPERIMENT}, store, lab_queue="forks"),
    )
    plan_input = PlanRunInput(
        pipeline=contract.PIPELINE_LLM, request=REQUEST.model_dump(mode="json")
    )
    on_lab = environment(b_id)
    on_lab.info = dataclasses.replace(on_lab.info, task_queue="forks")
    forked: RunPlan = await on_lab.run(plans.plan_run, plan_input)
    elsewhere: RunPlan = await environment(b_id).run(plans.plan_run, plan_input)
    assert forked.assignment is None and forked.model != "sim-b"
    assert elsewhere.assignment is not None and elsewhere.assignment.variant.name == "B"


async def test_a_halt_reaches_the_next_plan_and_a_resume_lifts_it(
    valkey_client: redis.Redis,
) -> None:
    """Once B is halted in the store, runs that would get B are planned with A; a plan made
    before the halt keeps B; after a resume they get B again. Promoting B gives every run B."""
    store = HaltStore(valkey_client)
    rollouts = Rollouts({contract.PIPELINE_LLM: EXPERIMENT}, store)
    b_ids, a_ids = workflow_ids("B"), workflow_ids("A")
    before = await plan_run(rollouts, b_ids[0])
    assert await store.halt("prompt-v2", "B", halt()) is True
    assert await store.halt("prompt-v2", "B", halt(by="alice")) is False
    during = [await plan_run(rollouts, i) for i in b_ids]
    state = await store.state("prompt-v2")
    await store.resume("prompt-v2", "B")
    after = await plan_run(rollouts, b_ids[0])
    await store.promote("prompt-v2", "B")
    promoted = [await plan_run(rollouts, i) for i in a_ids]
    assert before.assignment is not None and before.assignment.variant.name == "B"
    assert {p.assignment.variant.name for p in during if p.assignment} == {"A"}
    assert state.halted["B"].by == "watcher"
    assert after.assignment is not None and after.assignment.variant.name == "B"
    assert {p.assignment.variant.name for p in promoted if p.assignment} == {"B"}
    await store.resume("prompt-v2")
    assert await store.state("prompt-v2") == type(state)()


async def test_a_store_that_cannot_be_read_gives_the_control() -> None:
    """With the capacity store down, a run that would get B is planned with the control (a
    canary never gets more traffic than allowed), and the run is still planned."""
    down = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        plan = await plan_run(
            Rollouts({contract.PIPELINE_LLM: EXPERIMENT}, HaltStore(down)), workflow_ids("B")[0]
        )
    finally:
        await down.aclose()
    assert plan.assignment is not None and plan.assignment.variant.name == "A"
    assert plan.model == DEFAULTS.model


async def test_a_pipeline_without_an_experiment_is_planned_as_before(
    valkey_client: redis.Redis,
) -> None:
    """A run of a pipeline no experiment covers gets no assignment and the same plan as a
    worker without experiments."""
    rollouts = Rollouts({"documents": EXPERIMENT}, HaltStore(valkey_client))
    plain = await plan_run(Rollouts({}, None), "y" * 24)
    assert await plan_run(rollouts, "y" * 24) == plain
    assert plain.assignment is None


async def test_each_choice_counts_its_variant_and_the_halts(valkey_client: redis.Redis) -> None:
    """The worker's metrics count runs per variant and say which variants are halted (1)."""
    buffer = MetricBuffer(1000, duration_format=MetricBufferDurationFormat.SECONDS)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    store = HaltStore(valkey_client)
    rollouts = Rollouts({contract.PIPELINE_LLM: EXPERIMENT}, store)
    await store.halt("prompt-v2", "B", halt())
    await plan_run(rollouts, workflow_ids("B")[0], runtime)
    seen: dict[tuple[str, Any], Any] = {}
    for update in buffer.retrieve_updates():
        seen[(update.metric.name, update.attributes["variant"])] = update.value
    assert seen[(METRIC_EXPERIMENT_RUNS, "A")] == 1
    assert (METRIC_EXPERIMENT_RUNS, "B") not in seen
    assert seen[(METRIC_EXPERIMENT_HALTED, "B")] == 1
    assert seen[(METRIC_EXPERIMENT_HALTED, "A")] == 0
