"""The activities pipelines defined as data start: how each is started, with its input,
timeouts, retry policy and Web UI summary. The document and vector activities are the other
pipelines' own, reused as they are (``workflows.documents.steps``, ``workflows.llm.steps``).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
from workflows.data.contract import ACTIVITY_NOTIFY_PIPELINE, ACTIVITY_PLAN_PIPELINE
from workflows.data.payloads import DataPlan, PipelineNotice, PlanPipelineInput
from workflows.documents.contract import ACTIVITY_EXTRACT_TEXT
from workflows.documents.payloads import ExtractedText, ExtractTextInput
from workflows.documents.steps import EXTRACT_RETRY
from workflows.payloads import EmbeddingInput, EmbeddingResult


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


async def embed(request_id: str, content: str) -> EmbeddingResult:
    """``generate_embedding``: embed ``content`` and upsert it under the run's point id (as
    the LLM pipeline does; ``workflows.llm.steps.delete_embedding`` undoes it)."""
    info = workflow.info()
    return await commands.execute(
        contract.ACTIVITY_GENERATE_EMBEDDING,
        EmbeddingInput(
            workflow_id=info.workflow_id,
            chain_id=info.first_execution_run_id,
            request_id=request_id,
            content=content,
        ),
        EmbeddingResult,
        timeout=timedelta(seconds=60),
        heartbeat=activity_policy.HEARTBEAT_TIMEOUT,
        retry=activity_policy.EMBEDDING_RETRY,
        # On cancel, wait until the activity has really stopped before compensating: the
        # delete must not race the upsert.
        cancellation=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary="generate_embedding: embed and upsert",
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
    handle.add_done_callback(_outcome_seen)


def _outcome_seen(task: asyncio.Task[int]) -> None:
    # Nobody awaits a notification: take its failure here, so the event loop does not report
    # it as "never retrieved". The failure itself is in the run's event history.
    if not task.cancelled():
        task.exception()
