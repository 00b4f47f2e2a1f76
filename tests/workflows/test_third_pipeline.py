"""A third pipeline, defined only here, runs on the engine unchanged: its graph (with the
engine's review sub-graph), one handler, its request, state and result models, and a workflow
class naming it; no engine module knows it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import Field
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.worker import Worker

import workflows.engine.reviews as reviews
from aiorch.ops.results import finished
from aiorch_runtime.sandbox import workflow_runner
from tests.support.orchestration import Orchestration
from tests.support.time_skipping import TASK_PROGRESS_TIMEOUT_S
from workflows import contract
from workflows.engine.graph import (
    IDLE,
    Event,
    Graph,
    StateInfo,
    Status,
    Transition,
    cancel_edges,
    review_edges,
    review_states,
)
from workflows.engine.pipeline import Context, Pipeline
from workflows.engine.workflow import PipelineWorkflow
from workflows.payloads import (
    RequestBase,
    ReviewContent,
    ReviewSection,
    RunCore,
    RunPolicy,
    RunResult,
    RunStatus,
)


class Tiny(StrEnum):
    GREET = "greet"


class GreetRequest(RequestBase):
    name: str = Field(max_length=40)


class GreetState(RunCore[RunPolicy]):
    greeting: str | None = None


class GreetResult(RunResult):
    greeting: str | None = None


GRAPH = Graph.of(
    "Greeter",
    {Tiny.GREET: StateInfo(Status.PROCESSING, 50, "writing a greeting"), **review_states(50)},
    (
        Transition(IDLE, Event.START, Tiny.GREET),
        Transition(Tiny.GREET, "greeted", "await_review"),
    ),
    review_edges(approve="completed", reedit=Tiny.GREET),
    cancel_edges([IDLE, Tiny.GREET, "await_review", "escalate"]),
)


async def greet(ctx: Context[GreetRequest, GreetState]) -> None:
    """The one working state: no activity, a plan of its own, then a review."""
    ctx.run.plan = RunPolicy(review_timeout_s=60, escalation_timeout_s=60, max_attempts=1)
    ctx.run.greeting = f"Hello, {ctx.request.name}" + "!" * len(ctx.run.feedback)
    reviews.enter(ctx, "greeted", detail="a greeting to check")


PIPELINE = Pipeline(
    name="greeter",
    graph=GRAPH,
    request=GreetRequest,
    state=GreetState,
    handlers={Tiny.GREET: greet},
    result_model=GreetResult,
    result=lambda ctx: GreetResult(
        request_id=ctx.request.request_id,
        state=ctx.run.state,
        history=ctx.run.history,
        greeting=ctx.run.greeting,
    ),
    review_view=lambda ctx: ReviewContent(
        title=ctx.request.name,
        sections=[ReviewSection(title="Greeting", text=ctx.run.greeting or "")],
    ),
)


@workflow.defn(dynamic=True)
class GreeterWorkflow(PipelineWorkflow):
    pipelines = (PIPELINE,)

    @workflow.run
    async def run(self, raw_inputs: Sequence[RawValue]) -> RunResult:
        return await self.walk()


async def test_a_pipeline_defined_in_a_test_runs_on_the_engine(orch: Orchestration) -> None:
    """Started by its workflow type on a worker that registers only it: the engine walks its
    graph, its review takes a reedit (the handler runs again with the feedback) and an
    approval, and its result is its own model."""
    queue = f"greeter-{uuid.uuid4()}"
    # As a worker runs it: the engine passed through the sandbox, so the pipeline's models
    # (imported once, with this module) and the engine's are the same classes.
    runner = workflow_runner(pass_workflows=True)
    async with Worker(
        orch.client, task_queue=queue, workflows=[GreeterWorkflow], workflow_runner=runner
    ):
        request_id = uuid.uuid4().hex[:24]
        handle = await orch.client.start_workflow(
            "Greeter",
            {"request_id": request_id, "name": "Ada"},
            id=request_id,
            task_queue=queue,
            result_type=GreetResult,
        )
        await orch.wait_for_state(handle, "await_review")
        reedit = {"decision": "reedit", "reviewer": "ann", "feedback": "warmer", "review_round": 1}
        await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, reedit, result_type=RunStatus)
        await orch.wait_for_state(handle, "await_review")
        approve: dict[str, Any] = {"decision": "approve", "reviewer": "ann", "review_round": 2}
        await handle.signal(contract.SIGNAL_REVIEW, approve)
        result = await asyncio.wait_for(finished(handle), TASK_PROGRESS_TIMEOUT_S)

    assert isinstance(result, GreetResult)
    assert (result.state, result.greeting) == ("completed", "Hello, Ada!")
    assert [e.event for e in result.history] == ["start", "greeted", "reedit", "greeted", "approve"]
