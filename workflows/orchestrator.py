"""EngineWorkflow: the one workflow a worker registers, running every registered pipeline on
the engine (``workflows.engine.workflow``).

Registered as the worker's dynamic workflow: the SDK hands it every run on the task queue with
its start's arguments raw, however many came, and the engine picks the pipeline by the run's
workflow type (``AiOrchestrator`` for the LLM pipeline, ``DocumentPipeline`` for documents,
a ``PIPELINE_MODULES`` pipeline's own). A run of any other type is a run of a pipeline defined
as data (``workflows.data``): its type is the pipeline's name, and ``plan_pipeline`` finds it
in the worker's ``PIPELINES_DIR`` when the run starts (a name no file has fails the run at
once). A dynamic workflow's class name is in no history, so this one says what it is.

``LabEngineWorkflow`` is its counterpart on the lab's task queue: the same pipelines, run as
the replay lab's forks (``workflows.engine.lab``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    # One `import` per module: `from workflows import x` bypasses the sandbox pass-through, so
    # x would be re-imported for every new run. Imports add no commands.
    import workflows.data.source as data
    import workflows.data.steps as data_steps
    import workflows.documents.pipeline as documents
    import workflows.llm.pipeline as llm
    from workflows.engine.forks import ForkResult
    from workflows.engine.lab import LabWorkflow
    from workflows.engine.pipeline import Pipeline
    from workflows.engine.registry import RegisteredPipelines
    from workflows.engine.workflow import PipelineWorkflow
    from workflows.payloads import RunResult

# The pipelines the project ships, each registered by its module's `PIPELINE`, as
# PIPELINE_MODULES registers a platform team's.
SHIPPED: tuple[Pipeline[Any, Any], ...] = (llm.PIPELINE, documents.PIPELINE)
PIPELINES = RegisteredPipelines(SHIPPED)
# Pipelines defined as data, with the engine's step types.
DATA_PIPELINES = data.DataPipelines(data_steps.CATALOG)


@workflow.defn(dynamic=True)
class EngineWorkflow(PipelineWorkflow):
    """Runs each request through its pipeline's graph (see ``PIPELINES``, and pipeline files
    through ``DATA_PIPELINES``)."""

    pipelines = PIPELINES
    sources = (DATA_PIPELINES,)

    @workflow.run
    async def run(self, raw_inputs: Sequence[RawValue]) -> RunResult:
        return await self.walk()


@workflow.defn(dynamic=True)
class LabEngineWorkflow(LabWorkflow):
    """Runs the replay lab's forks of every registered pipeline's runs, on the lab's task queue
    (``workflows.engine.lab``)."""

    pipelines = PIPELINES
    sources = (DATA_PIPELINES,)

    @workflow.run
    async def run(self, raw_inputs: Sequence[RawValue]) -> ForkResult:
        return await self.fork()
