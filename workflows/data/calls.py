"""The activities pipelines defined as data start: how each is started, with its input,
timeouts, retry policy and Web UI summary. The document and vector activities are the other
pipelines' own, reused as they are (``workflows.documents.steps``, ``workflows.llm.steps``).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
from workflows.data.contract import ACTIVITY_NOTIFY_PIPELINE, ACTIVITY_PLAN_PIPELINE
from workflows.data.payloads import DataPlan, PipelineNotice, PlanPipelineInput
from workflows.documents.contract import ACTIVITY_EXTRACT_TEXT
from workflows.documents.payloads import ExtractedText, ExtractTextInput
from workflows.documents.steps import EXTRACT_RETRY


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


async def extract(request_id: str, document: str, *, reference: bool, fetch: bool) -> ExtractedText:
    """``extract_text``: a document's size, pages, hash and a preview (never its text). A
    ``fetch`` step tries a few times and fails; an ``extract`` step keeps trying, then the run
    is dead-lettered."""
    return await commands.execute(
        ACTIVITY_EXTRACT_TEXT,
        ExtractTextInput(
            request_id=request_id,
            reference=document if reference else None,
            text=None if reference else document,
        ),
        ExtractedText,
        timeout=timedelta(minutes=5),
        heartbeat=activity_policy.HEARTBEAT_TIMEOUT,
        retry=activity_policy.FETCH_RETRY if fetch else EXTRACT_RETRY,
        summary="extract_text: load the document, extract its text",
    )


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
