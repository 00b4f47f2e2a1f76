"""Where a worker's runs find their pipeline defined as data: ``DataPipelines``, the engine's
pipeline source (``workflows.engine.pipeline.PipelineSource``).

A run's workflow type is its pipeline's name. When the run starts, the local activity
``plan_pipeline`` reads the pipeline's file as it is now from the worker's folder, checks the
run's input against it and returns the run's plan, which holds the file's text, its hash and its
spec: the version the run follows to the end. History records that result, so a replay (or a
query, or a worker that picks the run up later) compiles the same version, whatever the file
says by then; a continued run compiles the version its carried plan holds, without reading
anything. The compile is deterministic and happens inside the workflow.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.data.pipeline as data_pipeline
import workflows.engine.activity_policy as activity_policy
import workflows.errors as errors
from workflows.data import calls
from workflows.data.catalog import Catalog
from workflows.data.compiler import SpecInvalid, compile_spec
from workflows.data.contract import NAME_PATTERN
from workflows.data.payloads import DataPlan, DataState
from workflows.engine.pipeline import Pipeline
from workflows.payloads import describe_validation_error, printable


@dataclass(frozen=True)
class DataPipelines:
    """The pipelines defined as data whose step types ``catalog`` holds."""

    catalog: Catalog

    def serves(self, workflow_type: str) -> bool:
        """Any workflow type that is a pipeline's name may be one (the worker's folder, read
        by ``plan_pipeline``, says whether it is)."""
        return re.fullmatch(NAME_PATTERN, workflow_type) is not None

    async def resolve(self, workflow_type: str, raw: Any) -> Pipeline[Any, Any]:
        """The pipeline a run follows: the version its plan records (see the module
        docstring).

        Raises:
            errors.InvalidRequest: no such pipeline, an input it refuses, or a recorded version
                this worker cannot compile (a step type it lacks).
        """
        if not isinstance(raw, dict):
            raise errors.InvalidRequest("the start input must be a JSON object")
        if "carried" in raw:
            plan = _carried_plan(raw["carried"])
        else:
            try:
                plan = await calls.plan(workflow_type, raw)
            except (ActivityError, ApplicationError) as err:
                # A local activity's failure arrives as the ApplicationError itself.
                if isinstance(err, ActivityError) and activity_policy.cancelled(err):
                    raise
                cause = err.cause if isinstance(err, ActivityError) else err
                raise errors.InvalidRequest(str(getattr(cause, "message", None) or cause)) from None
        record = plan.pipeline
        if record.name != workflow_type:
            raise errors.InvalidRequest(
                f"the plan's pipeline {printable(record.name, 64)!r} is not this run's "
                f"{printable(workflow_type, 64)!r}"
            )
        try:
            compiled = compile_spec(record.spec, self.catalog, strict=False)
        except SpecInvalid as err:
            raise errors.InvalidRequest(
                f"pipeline {record.name} version {record.label} does not compile on this "
                f"worker: {err}"
            ) from None
        return data_pipeline.as_pipeline(compiled, plan)


def _carried_plan(carried: Any) -> DataPlan:
    try:
        state = DataState.model_validate(carried)
    except ValidationError as err:
        raise errors.InvalidRequest(f"carried: {describe_validation_error(err)}") from None
    if state.plan is None:
        raise errors.InvalidRequest("carried: a continued run must carry its plan")
    return state.plan
