"""The activity each state runs: its input, timeouts, retry policy and Web UI summary.

Plain functions over the run's state, called by ``AiOrchestrator``'s state handlers; they
only start activities (``workflow.execute_*``, and ``workflow.start_activity`` for the one the
run never waits for) and return what came back, so every decision stays with the handler and
the graph. Failures surface as the SDK raises them
(``ActivityError``; a local activity's failure as the ``ApplicationError`` itself).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Final, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.activity_policy as activity_policy
import workflows.contract as contract
import workflows.run_record as run_record
from workflows.graph import Event, State
from workflows.payloads import (
    ContinuationCheck,
    ContinuationVerdict,
    DeadLetterInput,
    DeadLetterMessage,
    DeadLetterReceipt,
    EmbeddingInput,
    EmbeddingResult,
    LlmCallInput,
    LlmCallResult,
    NoticeReason,
    PipelineRequest,
    PromptInput,
    PromptPlan,
    ReviewNotice,
    RunState,
)

R = TypeVar("R")
# The plan's settings an LLM call carries as they are (the rest come from the run).
_PLAN_FIELDS_OF_CALL: Final = frozenset(
    {
        "system_prompt",
        "user_prompt",
        "input_ref",
        "temperature",
        "max_reply_chars",
        "tenant",
        "budget_usd",
    }
)


async def _execute(
    activity: str,
    arg: object,
    result_type: type[R],
    *,
    timeout: timedelta,
    retry: RetryPolicy,
    summary: str,
    heartbeat: timedelta | None = None,
    cancellation: workflow.ActivityCancellationType = (
        workflow.ActivityCancellationType.TRY_CANCEL
    ),
) -> R:
    """Run ``activity`` (a regular one) with ``arg`` and return its result: ``timeout`` is its
    start-to-close timeout, ``heartbeat`` its heartbeat timeout, ``summary`` its Web UI line."""
    result: R = await workflow.execute_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=timeout,
        retry_policy=retry,
        heartbeat_timeout=heartbeat,
        cancellation_type=cancellation,
        summary=summary,
    )
    return result


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
    return await _execute(
        contract.ACTIVITY_FETCH_PROMPT,
        PromptInput(request=request),
        PromptPlan,
        timeout=timedelta(seconds=60),
        retry=activity_policy.FETCH_RETRY,
        summary="fetch_prompt: load input, build prompt",
    )


async def fetch_prompt(run: RunState, request: PipelineRequest, *, local: bool) -> None:
    """``fetch_prompt`` for the run: its plan, or the failure that ends it."""
    # Workflow time around a local activity is not stable: right after it, and in the task it
    # runs in, when the worker completed that task early and finished the fetch in the next,
    # the first execution and a replay (a query's) see different times. A local fetch is part
    # of starting the run, so its moves carry the run's start time; a fetch activity's carry
    # the time of the task that got its result.
    at = run.state_since if local else None
    try:
        plan = await fetch_plan(request, local=local)
    except (ActivityError, ApplicationError) as err:
        # A local activity's failure arrives as the ApplicationError itself, not wrapped.
        if isinstance(err, ActivityError) and activity_policy.cancelled(err):
            raise
        detail = run_record.set_error(run, activity_policy.error_text(err))
        run_record.move(run, Event.PERMANENT_ERROR, detail=detail, at=at)
        return
    run.plan = plan
    run_record.move(run, Event.PROMPT_READY, at=at)


def choose_model(run: RunState, plan: PromptPlan) -> str:
    """The primary model, or the fallback after ``fallback_after`` failures in a row."""
    if plan.fallback_model and run.consecutive_failures >= plan.fallback_after:
        return plan.fallback_model
    return plan.model


async def call_llm(run: RunState, plan: PromptPlan, attempt: int) -> LlmCallResult:
    """``invoke_llm``: exactly one attempt (retries are the graph's ``retry_llm``), made once
    the run's budgets and the model's shared capacity allow it; else the result says why not
    (``outcome``) and no call was made."""
    model = choose_model(run, plan)
    call = LlmCallInput(
        **plan.model_dump(include=set(_PLAN_FIELDS_OF_CALL)),
        workflow_id=workflow.info().workflow_id,
        model=model,
        attempt=attempt,
        feedback=list(run.feedback),
        corrective=run.corrective_next,
        spent_usd=run.cost_usd,
        budget_approved=run.budget_approved,
    )
    return await _execute(
        contract.ACTIVITY_INVOKE_LLM,
        call,
        LlmCallResult,
        timeout=timedelta(seconds=plan.llm_timeout_s + 15),
        heartbeat=activity_policy.HEARTBEAT_TIMEOUT,
        retry=activity_policy.SINGLE_ATTEMPT,
        summary=f"invoke_llm: attempt {attempt} on {model}",
    )


async def embed(request: PipelineRequest, content: str) -> EmbeddingResult:
    """``generate_embedding``: embed the answer and upsert it under the run's point id."""
    return await _execute(
        contract.ACTIVITY_GENERATE_EMBEDDING,
        EmbeddingInput(
            workflow_id=workflow.info().workflow_id,
            request_id=request.request_id,
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
    """``delete_embedding``: the cancel's compensation; how many vectors it deleted."""
    return await _execute(
        contract.ACTIVITY_DELETE_EMBEDDING,
        workflow.info().workflow_id,
        int,
        timeout=timedelta(seconds=30),
        retry=activity_policy.COMPENSATION_RETRY,
        summary="compensate: delete embedding",
    )


def dead_letter_message(
    run: RunState, request: PipelineRequest, failed_state: State
) -> DeadLetterMessage:
    """The message the dead-letter queue gets: the run, its request, where and why it failed."""
    info = workflow.info()
    return DeadLetterMessage(
        workflow_id=info.workflow_id,
        run_id=info.run_id,
        request=request.model_dump(mode="json"),
        failed_state=failed_state.value,
        attempts=run.attempts,
        last_error=run.last_error,
        history=list(run.history),
    )


async def send_dead_letter(
    run: RunState, request: PipelineRequest, failed_state: State
) -> DeadLetterReceipt:
    """``send_dead_letter``: retried until the queue accepts it, unless it refuses for good."""
    return await _execute(
        contract.ACTIVITY_SEND_DEAD_LETTER,
        DeadLetterInput(message=dead_letter_message(run, request, failed_state)),
        DeadLetterReceipt,
        timeout=timedelta(seconds=30),
        retry=activity_policy.DEAD_LETTER_RETRY,
        summary=f"send_dead_letter: {failed_state.value}",
    )


async def dead_letter(run: RunState, request: PipelineRequest, failed_state: State) -> str:
    """Send the run's dead-letter message; returns a note for history when the queue refused
    it for good (the run still ends dead_letter: nothing retries forever)."""
    try:
        await send_dead_letter(run, request, failed_state)
    except ActivityError as err:
        if activity_policy.cancelled(err):
            raise
        return f"; the dead-letter queue refused the message ({activity_policy.error_text(err)})"
    return ""


async def compensate_cancel(run: RunState) -> None:
    """Undo the run's side effects before it ends cancelled: the vector it may have written."""
    detail = "no side effects to undo"
    if run.state in (State.GENERATE_EMBEDDING, State.COMPLETED) or run.embedding_id:
        deleted = await delete_embedding()
        detail = f"compensation: deleted {deleted} vector(s)"
    run_record.move(run, Event.CANCEL, detail=detail)


async def verify_continuation() -> ContinuationVerdict:
    """``verify_continuation`` (local): whether this run came from our own continue-as-new."""
    info = workflow.info()
    result: ContinuationVerdict = await workflow.execute_local_activity(
        contract.ACTIVITY_VERIFY_CONTINUATION,
        ContinuationCheck(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            previous_run_id=info.continued_run_id or "",
        ),
        result_type=ContinuationVerdict,
        start_to_close_timeout=activity_policy.LOCAL_FETCH_TIMEOUT,
        retry_policy=activity_policy.VERIFY_RETRY,
        summary="verify_continuation",
    )
    return result


def notify_reviewers(run: RunState, plan: PromptPlan, reason: NoticeReason) -> None:
    """``notify_reviewers``: tell reviewers (by webhook) that the run waits for them, when the
    plan says notifications are on (``REVIEW_WEBHOOK_URL`` on the worker that built it).

    Started and never awaited: the run goes on at once, and however the notification ends
    (delivered, retried, refused, the receiver down) it neither blocks nor fails the run. With
    notifications off nothing is scheduled, so the run's commands (and billed actions) are
    those of a run without this feature.
    """
    if not plan.notify:
        return
    info = workflow.info()
    handle = workflow.start_activity(
        contract.ACTIVITY_NOTIFY_REVIEWERS,
        ReviewNotice(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            reason=reason,
            state=run.state.value,
            review_round=run.review_round,
            deadline=run.review_deadline,
        ),
        result_type=int,
        start_to_close_timeout=activity_policy.NOTIFY_TIMEOUT,
        schedule_to_close_timeout=activity_policy.NOTIFY_SCHEDULE_TO_CLOSE,
        retry_policy=activity_policy.NOTIFY_RETRY,
        summary=f"notify_reviewers: {reason} (round {run.review_round})",
    )
    handle.add_done_callback(_outcome_seen)


def _outcome_seen(task: asyncio.Task[int]) -> None:
    # Nobody awaits a notification: take its failure here, so the event loop does not report
    # it as "never retrieved". The failure itself is in the run's event history.
    if not task.cancelled():
        task.exception()
