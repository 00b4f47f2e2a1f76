"""The activities the engine runs for every pipeline: how each is started, with its timeouts,
retry policy and Web UI summary.

``execute`` starts any regular activity the way every step does; the rest are the engine's
own: the dead-letter message, the lineage check of a continued run, the reviewers'
notification, and the wait for a batched call's answer. Plain functions that only start
activities and return what came back, so every decision stays with the handler and the graph.
Failures surface as the SDK raises them (``ActivityError``; a local activity's failure as the
``ApplicationError`` itself).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
import workflows.engine.seeding as seeding
from workflows.payloads import (
    AwaitBatchInput,
    ContinuationCheck,
    ContinuationVerdict,
    DeadLetterInput,
    DeadLetterMessage,
    DeadLetterReceipt,
    LlmCallResult,
    NoticeReason,
    RequestBase,
    ReviewNotice,
    RunCore,
    RunPolicy,
)

R = TypeVar("R")


async def execute(
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
    priority: int | None = None,
) -> R:
    """Run ``activity`` (a regular one) with ``arg`` and return its result: ``timeout`` is its
    start-to-close timeout, ``heartbeat`` its heartbeat timeout, ``summary`` its Web UI line,
    ``priority`` its task's priority key on the task queue (1 first to 5; None: the run's).

    A replay lab's fork before its fork state gets the original's recorded output instead, and
    no activity is scheduled (``workflows.engine.seeding``)."""
    if (seed := seeding.current()) is not None:
        return seeding.recorded(seed, activity, result_type)
    result: R = await workflow.execute_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=timeout,
        retry_policy=retry,
        heartbeat_timeout=heartbeat,
        cancellation_type=cancellation,
        summary=summary,
        # The SDK sends Priority.default as no priority at all: a run without one issues
        # exactly the commands it did before.
        priority=Priority(priority_key=priority) if priority is not None else Priority.default,
    )
    return result


def dead_letter_message(
    run: RunCore[Any], request: RequestBase, failed_state: str
) -> DeadLetterMessage:
    """The message the dead-letter queue gets: the run, its request, where and why it failed."""
    info = workflow.info()
    return DeadLetterMessage(
        workflow_id=info.workflow_id,
        run_id=info.run_id,
        workflow_type=info.workflow_type,
        request=request.model_dump(mode="json"),
        failed_state=failed_state,
        attempts=run.attempts,
        last_error=run.last_error,
        history=list(run.history),
    )


async def send_dead_letter(
    run: RunCore[Any], request: RequestBase, failed_state: str
) -> DeadLetterReceipt:
    """``send_dead_letter``: retried until the queue accepts it, unless it refuses for good."""
    return await execute(
        contract.ACTIVITY_SEND_DEAD_LETTER,
        DeadLetterInput(message=dead_letter_message(run, request, failed_state)),
        DeadLetterReceipt,
        timeout=timedelta(seconds=30),
        retry=activity_policy.DEAD_LETTER_RETRY,
        summary=f"send_dead_letter: {failed_state}",
    )


async def dead_letter(run: RunCore[Any], request: RequestBase, failed_state: str) -> str:
    """Send the run's dead-letter message; returns a note for history when the queue refused
    it for good (the run still ends dead_letter: nothing retries forever)."""
    try:
        await send_dead_letter(run, request, failed_state)
    except ActivityError as err:
        if activity_policy.cancelled(err):
            raise
        return f"; the dead-letter queue refused the message ({activity_policy.error_text(err)})"
    return ""


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


async def await_batch(run: RunCore[Any], plan: RunPolicy) -> LlmCallResult:
    """``await_batch``: the outcome of the run's batched call, once its batch answered (the
    batch's workflow completes this activity; nothing polls or heartbeats meanwhile). The
    activity's own failure (no answer within ``batch_wait_s``, the call lost) comes back as a
    ``failed`` outcome too, so the step takes it up as it takes up a call's failure.

    Raises:
        ActivityError: the run was cancelled while it waited.
    """
    assert run.batch_item is not None and run.batch_id is not None and run.model is not None
    try:
        return await execute(
            contract.ACTIVITY_AWAIT_BATCH,
            AwaitBatchInput(item=run.batch_item, model=run.model, batch_id=run.batch_id),
            LlmCallResult,
            timeout=timedelta(seconds=plan.batch_wait_s),
            retry=activity_policy.SINGLE_ATTEMPT,
            summary=f"await_batch: {run.batch_id}",
        )
    except ActivityError as err:
        if activity_policy.cancelled(err):
            raise
        return LlmCallResult(
            model=run.model, outcome="failed", lane="batch", failure=activity_policy.failure_of(err)
        )


def notify_reviewers(run: RunCore[Any], plan: RunPolicy, reason: NoticeReason) -> None:
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
            state=run.state,
            review_round=run.review_round,
            deadline=run.review_deadline,
        ),
        result_type=int,
        start_to_close_timeout=activity_policy.NOTIFY_TIMEOUT,
        schedule_to_close_timeout=activity_policy.NOTIFY_SCHEDULE_TO_CLOSE,
        retry_policy=activity_policy.NOTIFY_RETRY,
        summary=f"notify_reviewers: {reason} (round {run.review_round})",
    )
    unawaited(handle)


def unawaited(handle: asyncio.Task[Any]) -> None:
    """Let an activity ``handle`` nobody awaits (a notification) end however it ends: its
    failure is taken here, and stays in the run's event history."""
    handle.add_done_callback(_outcome_seen)


def _outcome_seen(task: asyncio.Task[Any]) -> None:
    # Nobody awaits a notification: take its failure here, so the event loop does not report
    # it as "never retrieved". The failure itself is in the run's event history.
    if not task.cancelled():
        task.exception()
