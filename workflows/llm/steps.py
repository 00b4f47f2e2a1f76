"""The LLM pipeline's own activities: how each is started, with its input, timeouts, retry
policy and Web UI summary (the model call is the shared step, ``workflows.steps.llm_call``).

Plain functions that only start activities and return what came back, so every decision stays
with the handler and the graph.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
from workflows.payloads import (
    EmbeddingInput,
    EmbeddingResult,
    PipelineRequest,
    PromptInput,
    PromptPlan,
    vector_key,
)


async def fetch_plan(request: PipelineRequest, *, local: bool) -> PromptPlan:
    """``fetch_prompt``: a local activity for an inline message (no I/O: it validates and
    builds the prompt from the worker's settings, inside the current task), a regular one for
    a document by reference (real I/O, worth isolating and retrying visibly)."""
    if local:
        local_plan: PromptPlan = await workflow.execute_local_activity(
            contract.ACTIVITY_FETCH_PROMPT,
            PromptInput(request=request),
            result_type=PromptPlan,
            start_to_close_timeout=activity_policy.LOCAL_FETCH_TIMEOUT,
            retry_policy=activity_policy.FETCH_RETRY,
            summary="fetch_prompt: build prompt (local)",
        )
        return local_plan
    return await commands.execute(
        contract.ACTIVITY_FETCH_PROMPT,
        PromptInput(request=request),
        PromptPlan,
        timeout=timedelta(seconds=60),
        retry=activity_policy.FETCH_RETRY,
        summary="fetch_prompt: load input, build prompt",
    )


async def embed(request_id: str, content: str) -> EmbeddingResult:
    """``generate_embedding``: embed the answer and upsert it under the run's point id (the
    pipelines defined as data embed with it too)."""
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
