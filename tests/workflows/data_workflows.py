"""Workflow classes for the tests of pipeline files, in a module of their own: the sandbox
imports a workflow's module afresh for every run, so it imports workflow code only.

``PipelineWorkflowUnderTest`` is the worker's workflow for a task queue of a test's own;
``ShoutingWorkflow`` runs pipeline files with a catalog that includes ``shout``, a step type
written here, as a project would write its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

from workflows.data import CATALOG, DataPipelines, Settings, StepRun, StepType, Template
from workflows.engine.workflow import PipelineWorkflow


@workflow.defn(dynamic=True)
class PipelineWorkflowUnderTest(PipelineWorkflow):
    """The worker's workflow, on a task queue of its own (a plan with other settings)."""

    sources = (DataPipelines(CATALOG),)

    @workflow.run
    async def run(self, raw_inputs: Sequence[RawValue]) -> Any:
        return await self.walk()


class ShoutSettings(Settings):
    """``shout``: the text to shout (a template)."""

    text: Template


async def shout(step: StepRun, settings: ShoutSettings) -> None:
    """A step type of a project's own: in the workflow, no activity."""
    step.done("shouted", output={"text": step.render(settings.text).upper()})


SHOUT = StepType(
    "shout",
    ShoutSettings,
    shout,
    outcomes=("shouted",),
    in_task=True,
    shown=False,
    description="shouting the ticket",
    output=lambda settings: {"type": "object", "properties": {"text": {"type": "string"}}},
)
SHOUTING = CATALOG.including(SHOUT)


@workflow.defn(dynamic=True)
class ShoutingWorkflow(PipelineWorkflow):
    """A worker's workflow whose pipeline files may use the ``shout`` step type."""

    sources = (DataPipelines(SHOUTING),)

    @workflow.run
    async def run(self, raw_inputs: Sequence[RawValue]) -> Any:
        return await self.walk()
