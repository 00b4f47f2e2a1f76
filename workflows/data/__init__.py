"""Pipelines defined as data: a pipeline file (YAML, read by ``aiorch_runtime.pipeline_files``)
compiles into the engine's graph value, and the engine runs it as it runs a pipeline written in
Python.

- ``spec``: the file's models (``PipelineSpec``) and what a run records (``PipelineRecord``);
- ``catalog``: step types and the catalog (``StepType``, ``Catalog``, ``StepRun``);
- ``steps``: the engine's step types (``CATALOG``);
- ``compiler``: the checks and the compile into a ``Graph`` (``check``, ``compile_spec``);
- ``templates``: the sandboxed prompt templates;
- ``pipeline``: the engine's ``Pipeline`` for a compiled file;
- ``source``: ``DataPipelines``, where the engine finds a run's pipeline (its recorded version).

Workflow code: deterministic, passed through the sandbox.
"""

from workflows.data.catalog import Catalog, Compiled, StepRun, StepType
from workflows.data.compiler import CheckProblem, SpecInvalid, check, compile_spec
from workflows.data.contract import ACTIVITY_NOTIFY_PIPELINE, ACTIVITY_PLAN_PIPELINE, Rule
from workflows.data.payloads import (
    DataPlan,
    DataRequest,
    DataResult,
    DataState,
    PipelineNotice,
    PlanPipelineInput,
    ReviewPolicy,
)
from workflows.data.pipeline import as_pipeline
from workflows.data.source import DataPipelines
from workflows.data.spec import (
    DataPath,
    JsonSchema,
    Mark,
    PipelineRecord,
    PipelineSpec,
    Settings,
    StepRef,
    Template,
)
from workflows.data.steps import CATALOG

__all__ = (
    "ACTIVITY_NOTIFY_PIPELINE",
    "ACTIVITY_PLAN_PIPELINE",
    "CATALOG",
    "Catalog",
    "CheckProblem",
    "Compiled",
    "DataPath",
    "DataPipelines",
    "DataPlan",
    "DataRequest",
    "DataResult",
    "DataState",
    "JsonSchema",
    "Mark",
    "PipelineNotice",
    "PipelineRecord",
    "PipelineSpec",
    "PlanPipelineInput",
    "ReviewPolicy",
    "Rule",
    "Settings",
    "SpecInvalid",
    "StepRef",
    "StepRun",
    "StepType",
    "Template",
    "as_pipeline",
    "check",
    "compile_spec",
)
