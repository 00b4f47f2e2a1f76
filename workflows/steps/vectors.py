"""The vector steps any pipeline can use: embed a text and upsert it under the run's point id,
and delete it again as a cancel's compensation. How each activity is started, with its input,
timeouts, retry policy and Web UI summary.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
from workflows.payloads import EmbeddingInput, EmbeddingResult, vector_key


async def embed(request_id: str, content: str) -> EmbeddingResult:
    """``generate_embedding``: embed ``content`` and upsert it under the run's point id."""
    return await commands.execute(
        contract.ACTIVITY_GENERATE_EMBEDDING,
        EmbeddingInput(
            workflow_id=workflow.info().workflow_id,
            chain_id=workflow.info().first_execution_run_id,
            request_id=request_id,
            content=content,
        ),
        EmbeddingResult,
        timeout=timedelta(seconds=60),
        heartbeat=activity_policy.HEARTBEAT_TIMEOUT,
        retry=activity_policy.EMBEDDING_RETRY,
        # On cancel, wait until the activity has really stopped (it heartbeats, so the cancel
        # reaches it) before compensating: the delete must not race the upsert.
        cancellation=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary="generate_embedding: embed and upsert",
    )


async def delete_embedding() -> int:
    """``delete_embedding``: the cancel's compensation; how many vectors it deleted (named as
    ``generate_embedding`` names them: workflow id and run chain)."""
    info = workflow.info()
    return await commands.execute(
        contract.ACTIVITY_DELETE_EMBEDDING,
        vector_key(info.workflow_id, info.first_execution_run_id),
        int,
        timeout=timedelta(seconds=30),
        retry=activity_policy.COMPENSATION_RETRY,
        summary="compensate: delete embedding",
    )
