"""The LLM pipeline (workflow type ``AiOrchestrator``): fetch the prompt, call the model, have
a reviewer check the answer when the plan asks for it, embed and store it.

Its handlers do the working states of ``workflows.llm.graph``; the engine does the rest (the
start, reviews and escalation, retries, capacity and budget waits, cancel).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import asyncio
import json

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.contract as contract
import workflows.engine.reviews as reviews
import workflows.llm.steps as steps
import workflows.steps.llm_call as llm_call
import workflows.steps.vectors as vectors
from workflows.engine.pipeline import Context, Pipeline, RequestShape, ReviewSubject
from workflows.llm.graph import GRAPH, LlmEvent, State
from workflows.payloads import (
    FinalState,
    LlmCallResult,
    PipelineRequest,
    PipelineResult,
    ReviewContent,
    ReviewSection,
    RunState,
)

Run = Context[PipelineRequest, RunState]


def fetches_locally(ctx: Run) -> bool:
    """Whether this run's fetch_prompt runs as a local activity, inside the current task: an
    inline message needs no I/O, a reference (file://, s3://) does."""
    return ctx.run.state == State.FETCH_PROMPT and not ctx.request.is_reference


async def fetch_prompt(ctx: Run) -> None:
    """``fetch_prompt``: the run's plan, or the failure that ends it."""
    run, local = ctx.run, fetches_locally(ctx)
    # Workflow time around a local activity is not stable: right after it, and in the task it
    # runs in, when the worker completed that task early and finished the fetch in the next,
    # the first execution and a replay (a query's) see different times. A local fetch is part
    # of starting the run, so its moves carry the run's start time; a fetch activity's carry
    # the time of the task that got its result.
    at = run.state_since if local else None
    try:
        plan = await steps.fetch_plan(ctx.request, local=local)
    except (ActivityError, ApplicationError) as err:
        # A local activity's failure arrives as the ApplicationError itself, not wrapped. The
        # state's one failure edge is permanent_error: every failure ends the run.
        await ctx.failed(err, at=at)
        return
    run.plan = plan
    ctx.move(LlmEvent.PROMPT_READY, at=at)


def answered(ctx: Context[PipelineRequest, RunState], reply: LlmCallResult) -> None:
    """An answer: to a reviewer when the plan's review level asks for one, else on to the
    embedding."""
    run, plan = ctx.run, ctx.plan
    run.reply = reply
    if plan.review == "always" or (plan.review == "auto" and reply.needs_review):
        reviews.enter(
            ctx,
            LlmEvent.NEEDS_REVIEW,
            detail=f"answered by {reply.model}",
            answer=reply,
            prompt=plan.user_prompt,
        )
    else:
        ctx.move(
            LlmEvent.LLM_OK,
            detail=f"answered by {reply.model}",
            answer=reply,
            prompt=plan.user_prompt,
        )


async def invoke_llm(ctx: Run) -> None:
    """``invoke_llm``: one attempt at the model (``workflows.steps.llm_call``)."""
    await llm_call.invoke(ctx, answered)


async def generate_embedding(ctx: Run) -> None:
    """``generate_embedding``: embed the approved answer and store it, or dead-letter the run
    when the vector store keeps failing."""
    run = ctx.run
    assert run.reply is not None
    try:
        result = await vectors.embed(ctx.request.request_id, run.reply.content)
    except ActivityError as err:
        # The state's one failure edge is exhausted: the run is dead-lettered, to be redriven.
        await ctx.failed(err)
        return
    run.embedding_id = result.embedding_id
    if workflow.cancellation_reason() is not None:
        # The cancel came too late to stop the write: the compensation deletes the vector.
        raise asyncio.CancelledError
    ctx.move(LlmEvent.EMBEDDED, detail=f"embedding {result.embedding_id}")


async def compensate(ctx: Run) -> str:
    """Undo the run's side effects before it ends cancelled: the vector it may have written."""
    run = ctx.run
    if run.state in (State.GENERATE_EMBEDDING, State.COMPLETED) or run.embedding_id:
        deleted = await vectors.delete_embedding()
        return f"compensation: deleted {deleted} vector(s)"
    return "no side effects to undo"


def result(ctx: Run) -> PipelineResult:
    """The run's result once it ended (the engine checks the state is a final one)."""
    run = ctx.run
    state: FinalState = run.state  # type: ignore[assignment]
    return PipelineResult(
        request_id=ctx.request.request_id,
        state=state,
        content=run.reply.content if run.reply else None,
        model=run.model,
        embedding_id=run.embedding_id,
        history=list(run.history),
    )


def review_view(ctx: Run) -> ReviewContent:
    """The request and the model's answer under review, with the feedback sent so far."""
    run, request = ctx.run, ctx.request
    sections = [ReviewSection(title="Request", text=request.user_message, key="request")]
    if request.metadata:
        metadata = json.dumps(request.metadata, indent=2, sort_keys=True, ensure_ascii=False)
        sections.append(ReviewSection(title="Metadata", text=metadata, key="metadata"))
    answer = run.reply.content if run.reply is not None else ""
    if run.reply is not None:
        title = f"The model's reply ({run.reply.model})"
        sections.append(ReviewSection(title=title, text=answer, key="reply"))
    return ReviewContent(title=request.user_message[:200], headline=answer[:200], sections=sections)


def subject(ctx: Run) -> ReviewSubject:
    """The model's reply under review, and what auto-approve rules may read of it: whether the
    model asked for review, how sure it said it is, and the reply's length."""
    reply = ctx.run.reply
    if reply is None:
        return ReviewSubject()
    return ReviewSubject(
        text=reply.content,
        facts={
            "needs_review": reply.needs_review,
            "confidence": reply.confidence,
            "reply_chars": len(reply.content),
        },
    )


PIPELINE = Pipeline(
    name=contract.PIPELINE_LLM,
    graph=GRAPH,
    request=PipelineRequest,
    state=RunState,
    handlers={
        State.FETCH_PROMPT: fetch_prompt,
        State.INVOKE_LLM: invoke_llm,
        State.GENERATE_EMBEDDING: generate_embedding,
    },
    result_model=PipelineResult,
    result=result,
    review_view=review_view,
    compensate=compensate,
    in_task=fetches_locally,
    # An inline message is planned inside the first task: the first wait is the model call.
    first_shown=lambda request: State.FETCH_PROMPT if request.is_reference else State.INVOKE_LLM,
    subject=subject,
    facts=("needs_review", "confidence", "reply_chars"),
    shape=RequestShape(message_field="user_message"),
    activities="activities.wiring:llm_activities",
)
