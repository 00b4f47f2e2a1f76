"""The activities only pipelines defined as data start: how each is started, with its input,
timeouts, retry policy and Web UI summary. The document and vector activities are the shared
steps' (``workflows.steps``).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from temporalio import workflow

import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
from workflows.data.contract import ACTIVITY_NOTIFY_PIPELINE, ACTIVITY_PLAN_PIPELINE
from workflows.data.payloads import DataPlan, PipelineNotice, PlanPipelineInput


async def plan(pipeline: str, request: dict[str, object]) -> DataPlan:
    """``plan_pipeline`` (local: it reads the worker's pipeline folder and settings, inside the
    run's first task): the version the run follows, its input checked, its settings."""
    planned: DataPlan = await workflow.execute_local_activity(
        ACTIVITY_PLAN_PIPELINE,
        PlanPipelineInput(pipeline=pipeline, request=request),
        result_type=DataPlan,
        start_to_close_timeout=activity_policy.LOCAL_FETCH_TIMEOUT,
        retry_policy=activity_policy.FETCH_RETRY,
        summary=f"plan_pipeline: {pipeline} (local)",
    )
    return planned


def notify(notice: PipelineNotice) -> None:
    """``notify_pipeline``: started and never awaited, as reviewers' notifications are: however
    it ends, the run goes on."""
    handle = workflow.start_activity(
        ACTIVITY_NOTIFY_PIPELINE,
        notice,
        result_type=int,
        start_to_close_timeout=activity_policy.NOTIFY_TIMEOUT,
        schedule_to_close_timeout=activity_policy.NOTIFY_SCHEDULE_TO_CLOSE,
        retry_policy=activity_policy.NOTIFY_RETRY,
        summary=f"notify_pipeline: {notice.step}",
    )
    commands.unawaited(handle)
