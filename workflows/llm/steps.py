"""The LLM pipeline's own activity: how it is started, with its input, timeouts, retry policy
and Web UI summary (the model call and the embedding are shared steps, ``workflows.steps``).

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
    PipelineRequest,
    PromptInput,
    PromptPlan,
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
