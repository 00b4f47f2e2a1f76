"""What a run does with the outcome of one ``invoke_llm`` call, as functions over ``RunState``:
an answer (review it or embed it), a failed call (retry or give up), a wait for the model's
shared capacity, or a call the budget would not allow.

An attempt counts only once a call is made: waiting for capacity or a budget spends none.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.activity_policy as activity_policy
import workflows.errors as errors
import workflows.run_record as run_record
import workflows.steps as steps
from workflows.graph import Event
from workflows.payloads import LlmCallResult, PromptPlan, RunState


def failed(run: RunState, err: ActivityError, attempt: int) -> None:
    """A call that failed: a permanent error ends the run, anything else goes to retry_llm
    (a malformed reply is retried with a corrective instruction)."""
    run.attempts = attempt
    detail = run_record.set_error(run, activity_policy.error_text(err))
    delay = activity_policy.retry_after(err)
    run.retry_after_s = delay.total_seconds() if delay else None
    run.corrective_next = (
        isinstance(err.cause, ApplicationError) and err.cause.type == errors.LLM_MALFORMED_REPLY
    )
    if activity_policy.is_permanent(err):
        run_record.move(run, Event.PERMANENT_ERROR, detail=detail)
    else:
        run.consecutive_failures += 1
        run_record.move(run, Event.RETRYABLE_ERROR, detail=detail)


def must_wait(run: RunState, reply: LlmCallResult) -> None:
    """No capacity for the call now: wait in await_capacity, no attempt spent."""
    run.capacity_wait_s = reply.wait_s or 0.0
    run_record.move(
        run,
        Event.CAPACITY_WAIT,
        detail=f"no capacity on {reply.model} for {run.capacity_wait_s:.2f}s",
    )


def answered(run: RunState, plan: PromptPlan, reply: LlmCallResult, attempt: int) -> None:
    """An answer: to a reviewer when the plan's review level asks for one, else on to the
    embedding."""
    run.attempts = attempt
    run.cost_usd += reply.cost_usd or 0.0
    run.reply = reply
    run.model = reply.model
    run.consecutive_failures = 0
    run.corrective_next = False
    if plan.review == "always" or (plan.review == "auto" and reply.needs_review):
        run.review_round += 1
        run.review_deadline = workflow.now() + timedelta(seconds=plan.review_timeout_s)
        run_record.move(
            run,
            Event.NEEDS_REVIEW,
            detail=f"answered by {reply.model}",
            review_round=run.review_round,
        )
        steps.notify_reviewers(run, plan, "review_needed")
    else:
        run_record.move(run, Event.LLM_OK, detail=f"answered by {reply.model}")
