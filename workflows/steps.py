"""The activity each state runs: its input, timeouts, retry policy and Web UI summary.

Plain functions over the run's state, called by ``AiOrchestrator``'s state handlers; they only
start activities (``workflow.execute_*``/``start_*``) and return what came back, so every
decision stays with the handler and the graph.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

import workflows.activity_policy as activity_policy
import workflows.contract as contract
from workflows.payloads import NoticeReason, PromptPlan, ReviewNotice, RunState


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
