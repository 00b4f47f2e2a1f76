"""The document pipeline's own activities: how each is started, with its input, timeouts,
retry policy and Web UI summary (the model call is the shared step,
``workflows.steps.llm_call``).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
import workflows.engine.planning as planning
from workflows import errors
from workflows.documents.contract import (
    ACTIVITY_EXTRACT_TEXT,
    ACTIVITY_PLAN_DOCUMENT,
    ACTIVITY_STORE_DOCUMENT,
    DOCUMENT_STORE_REJECTED,
    DOCUMENT_UNREADABLE,
    PIPELINE_DOCUMENTS,
)
from workflows.documents.payloads import (
    DocumentPlan,
    DocumentRequest,
    ExtractedText,
    ExtractTextInput,
    PlanDocumentInput,
    StoreDocumentInput,
    StoreReceipt,
)
from workflows.documents.prompt import prompt
from workflows.payloads import RunPolicy

# A document that is missing, not allowed or unreadable stays so: fail at once. Anything else
# (S3 throttling, a worker's own trouble) is worth a few tries, then a dead letter.
EXTRACT_RETRY = RetryPolicy(
    maximum_attempts=5,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=[
        errors.INVALID_REQUEST,
        errors.INPUT_UNAVAILABLE,
        DOCUMENT_UNREADABLE,
    ],
)
# A database that is down or busy gets several minutes; a row it refuses for good, none.
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
    non_retryable_error_types=[DOCUMENT_STORE_REJECTED],
)


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


async def extract(request: DocumentRequest) -> ExtractedText:
    """``extract_text``: the document's size, pages, hash and a preview (never its text)."""
    reference = request.document if request.is_reference else None
    return await commands.execute(
        ACTIVITY_EXTRACT_TEXT,
        ExtractTextInput(
            request_id=request.request_id,
            reference=reference,
            text=None if reference else request.document,
        ),
        ExtractedText,
        timeout=timedelta(minutes=5),
        heartbeat=activity_policy.HEARTBEAT_TIMEOUT,
        retry=EXTRACT_RETRY,
        summary="extract_text: load the document, extract its text",
    )


async def store(store_input: StoreDocumentInput, plan: RunPolicy) -> StoreReceipt:
    """``store_document``: write the fields under the request id, owned by this run chain
    (its workflow id and first run id) with the plan's tenant and requester. The same chain's
    retry, continuation or re-edit overwrites its own row; a row another chain wrote is left
    as it was (``DocumentStoreConflict``, permanent)."""
    info = workflow.info()
    owned = store_input.model_copy(
        update={
            "workflow_id": info.workflow_id,
            "chain_id": info.first_execution_run_id,
            "tenant": plan.tenant,
            "requested_by": plan.requested_by,
        }
    )
    return await commands.execute(
        ACTIVITY_STORE_DOCUMENT,
        owned,
        StoreReceipt,
        timeout=timedelta(seconds=90),
        retry=STORE_RETRY,
        summary=f"store_document: {store_input.schema_name} fields",
    )
