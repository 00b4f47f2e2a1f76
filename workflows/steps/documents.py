"""The document steps any pipeline can use: extract a document's text, store extracted fields
as a row. How each activity is started, with its input, timeouts, retry policy and Web UI
summary.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
from workflows import errors
from workflows.payloads import RunPolicy
from workflows.steps.contract import (
    ACTIVITY_EXTRACT_TEXT,
    ACTIVITY_STORE_DOCUMENT,
    DOCUMENT_STORE_REJECTED,
    DOCUMENT_UNREADABLE,
)
from workflows.steps.document_payloads import (
    ExtractedText,
    ExtractTextInput,
    StoreDocumentInput,
    StoreReceipt,
)

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


async def extract(
    request_id: str, document: str, *, reference: bool, retry: RetryPolicy = EXTRACT_RETRY
) -> ExtractedText:
    """``extract_text``: the document's size, pages, hash and a preview (never its text).
    ``document`` is a reference when ``reference`` says so, else the text itself."""
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
        retry=retry,
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
