"""The engine's plan step: any pipeline's handler plans its run with `plan_run` (the
``plan_run`` local activity: it resolves the run's policy and model settings from the
worker's configuration inside the current workflow task, and its rollout variant), then adds
its prompt, which it builds in workflow code (`with_prompt`, which applies the variant). A
pipeline needs no plan activity of its own.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import json
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict
from temporalio import workflow

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
from workflows.payloads import ModelSettings, RequestBase, RunPolicy

# The patch that moved the LLM and document pipelines from their own plan activities
# (fetch_prompt, plan_document) to plan_run; histories recorded before it replay the old ones.
PLAN_RUN_PATCH: Final = "plan_run"

P = TypeVar("P", bound=RunPolicy)


class PlanRunInput(BaseModel):
    """Input of ``plan_run``: the pipeline's short name and the run's request as JSON (the
    worker validates it against that pipeline's request model)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    pipeline: str
    request: dict[str, Any]


class RunPlan(RunPolicy, ModelSettings):
    """What ``plan_run`` settles once for a run of any pipeline: every setting the run will
    use (its policy and how it calls its model), without the prompt."""


async def plan_run(pipeline: str, request: RequestBase) -> RunPlan:
    """``plan_run`` for a run of ``pipeline`` (its short name), as a local activity.

    Raises:
        ApplicationError: ``InvalidRequest`` when the worker refuses the request (a local
            activity's failure arrives as the ApplicationError itself, not wrapped).
    """
    plan: RunPlan = await workflow.execute_local_activity(
        contract.ACTIVITY_PLAN_RUN,
        PlanRunInput(pipeline=pipeline, request=request.model_dump(mode="json")),
        result_type=RunPlan,
        start_to_close_timeout=activity_policy.LOCAL_FETCH_TIMEOUT,
        retry_policy=activity_policy.FETCH_RETRY,
        summary=f"plan_run: {pipeline} (local)",
    )
    return plan


def with_prompt(plan: RunPlan, plan_type: type[P], **prompt: Any) -> P:
    """The pipeline's plan (a ``plan_type``): ``plan``'s settings and the ``prompt`` fields
    its handler built, with the changes of the rollout variant ``plan`` was assigned."""
    built = plan_type(**dict(plan), **prompt)
    if plan.assignment is None:
        return built
    return plan.assignment.variant.applied(built)


def context_suffix(metadata: dict[str, Any]) -> str:
    """The request's metadata as context after a prompt, or nothing when there is none."""
    if not metadata:
        return ""
    return "\n\nContext (JSON): " + json.dumps(metadata, sort_keys=True, ensure_ascii=False)
