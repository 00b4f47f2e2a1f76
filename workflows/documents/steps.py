"""The document pipeline's own activity: how it is started, with its input, timeouts, retry
policy and Web UI summary (the model call, extraction and the store are shared steps,
``workflows.steps``).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from temporalio import workflow

import workflows.engine.activity_policy as activity_policy
import workflows.engine.planning as planning
from workflows.documents.contract import ACTIVITY_PLAN_DOCUMENT, PIPELINE_DOCUMENTS
from workflows.documents.payloads import DocumentPlan, DocumentRequest, PlanDocumentInput
from workflows.documents.prompt import prompt


async def plan(request: DocumentRequest) -> DocumentPlan:
    """``plan_run`` (local: no I/O, it resolves the run's settings from the worker's
    configuration, inside the current task) with the extraction prompt built here; replaying a
    run recorded before it, ``plan_document``."""
    if workflow.patched(planning.PLAN_RUN_PATCH):
        run_plan = await planning.plan_run(PIPELINE_DOCUMENTS, request)
        return planning.with_prompt(run_plan, DocumentPlan, **prompt(request))
    planned: DocumentPlan = await workflow.execute_local_activity(
        ACTIVITY_PLAN_DOCUMENT,
        PlanDocumentInput(request=request),
        result_type=DocumentPlan,
        start_to_close_timeout=activity_policy.LOCAL_FETCH_TIMEOUT,
        retry_policy=activity_policy.FETCH_RETRY,
        summary="plan_document: build the extraction prompt (local)",
    )
    return planned
