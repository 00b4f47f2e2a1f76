"""Pipelines defined as data: ``plan_pipeline`` (the version a run follows, its input checked,
its settings) and ``notify_pipeline`` (a notify step's webhook call).

``plan_pipeline`` runs as a local activity in the run's first task: it reads the pipeline's
file as it is now from the worker's folder (``PIPELINES_DIR``, `PipelineFolder`), refuses an
input the file's input schema does not describe, and settles the plan, which holds the file's
text, hash and spec: history records it, and the run follows that version to its end.
``notify_pipeline`` posts to the review webhook (``REVIEW_WEBHOOK_URL``, its format, its
retries and error mapping: ``activities.notify``) the ids, the pipeline's version, the step and
the file's own message, never the run's content.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.experiments import NO_ROLLOUTS, Rollouts
from activities.notify import NotifyActivities, Webhook, shown_id
from activities.planning import PlanDefaults, lowered, planned
from aiorch_runtime.errors import ConfigError
from aiorch_runtime.pipeline_files import PipelineFilesInvalid, PipelineFolder
from workflows import errors
from workflows.data import (
    ACTIVITY_NOTIFY_PIPELINE,
    ACTIVITY_PLAN_PIPELINE,
    Catalog,
    DataPlan,
    DataRequest,
    PipelineNotice,
    PipelineRecord,
    PlanPipelineInput,
    ReviewPolicy,
    compile_spec,
)
from workflows.data.json_schemas import input_problems
from workflows.data.steps import input_digest
from workflows.engine.planning import with_prompt
from workflows.payloads import describe_validation_error, printable


def invalid(message: str) -> ApplicationError:
    """The run's start is refused for good, with one line."""
    return ApplicationError(
        printable(message, 1000), type=errors.INVALID_REQUEST, non_retryable=True
    )


class PipelineActivities:
    """``plan_pipeline`` and ``notify_pipeline``, with the worker's planning defaults (a
    review step without timeouts of its own gets theirs), its pipeline
    folder (None: ``PIPELINES_DIR`` unset) and catalog, the workflow types of its pipelines
    written in Python (named when a run names no pipeline the worker has), and its review
    notifier (None: no webhook)."""

    def __init__(
        self,
        defaults: PlanDefaults,
        folder: PipelineFolder | None,
        catalog: Catalog,
        code_pipelines: Sequence[str],
        notifier: NotifyActivities | None = None,
        rollouts: Rollouts = NO_ROLLOUTS,
    ) -> None:
        self._defaults = defaults
        self._rollouts = rollouts
        self._folder = folder
        self._catalog = catalog
        self._code_pipelines = list(code_pipelines)
        self._notifier = notifier

    async def _record(self, name: str) -> PipelineRecord:
        try:
            record = await self._folder.get(name) if self._folder is not None else None
            if record is None:
                files = await self._folder.names() if self._folder is not None else []
                known = ", ".join([*self._code_pipelines, *files])
                raise invalid(f"this worker runs {known}, not {printable(name, 80)}")
        except PipelineFilesInvalid as err:
            raise invalid(str(err)) from None
        except ConfigError as err:
            # The folder is unreadable or slow just now: the start is retried.
            raise ApplicationError(str(err), type=errors.INPUT_FETCH_FAILED) from None
        return record

    @activity.defn(name=ACTIVITY_PLAN_PIPELINE)
    async def plan_pipeline(self, plan_input: PlanPipelineInput) -> DataPlan:
        """The run's plan: the pipeline's version now, its input checked, every setting.

        Raises:
            ApplicationError: ``InvalidRequest`` (non-retryable): no such pipeline, its file has
                a problem, or the request or its input does not fit.
        """
        record = await self._record(plan_input.pipeline)
        try:
            request = DataRequest.model_validate(plan_input.request)
        except ValidationError as err:
            raise invalid(describe_validation_error(err)) from None
        if shown := input_problems(record.spec.input, request.input):
            raise invalid(f"the input does not fit {record.name} {record.label}: {shown}")
        plan = with_prompt(
            await self._rollouts.assigned(
                planned(self._defaults, request, pipeline=record.name), record.name
            ),
            DataPlan,
            system_prompt="",
            user_prompt="",
            pipeline=record,
            input_digest=input_digest(request.input),
        )
        return plan.model_copy(update={"reviews": self._reviews(record, request, plan)})

    def _reviews(
        self, record: PipelineRecord, request: DataRequest, plan: DataPlan
    ) -> dict[str, ReviewPolicy]:
        """Each review step's policy: its timeouts (the file's, else the worker's; a request
        may lower them) and its reviewers (the run's, narrowed by the file)."""
        options, cfg = request.options, self._defaults
        policies: dict[str, ReviewPolicy] = {}
        for step_id, step in compile_spec(record.spec, self._catalog, strict=False).steps.items():
            if step.type.kind != "review":
                continue
            settings: Any = step.settings
            reviewers = plan.allowed_reviewers
            if settings.reviewers is not None:
                allowed = [
                    name for name in settings.reviewers if reviewers is None or name in reviewers
                ]
                if not allowed:
                    raise invalid(
                        f"review step {step_id} of {record.name} names no reviewer this run "
                        "allows (ALLOWED_REVIEWERS, options.allowed_reviewers)"
                    )
                reviewers = allowed
            policies[step_id] = ReviewPolicy(
                review_timeout_s=lowered(
                    settings.timeout_s or cfg.review_timeout_s, options.review_timeout_s
                ),
                escalation_timeout_s=lowered(
                    settings.escalation_timeout_s or cfg.escalation_timeout_s,
                    options.escalation_timeout_s,
                ),
                allowed_reviewers=reviewers,
            )
        return policies

    @activity.defn(name=ACTIVITY_NOTIFY_PIPELINE)
    async def notify_pipeline(self, notice: PipelineNotice) -> int:
        """POST the notice to the review webhook; returns the receiver's HTTP status.

        Raises:
            ApplicationError: as ``notify_reviewers`` (``activities.notify``).
        """
        if self._notifier is None:
            raise ApplicationError(
                "REVIEW_WEBHOOK_URL is not set on this worker",
                type=errors.NOTIFICATION_REJECTED,
                non_retryable=True,
            )
        key = f"{notice.workflow_id}:{notice.step}"
        return await self._notifier.post(key, body(notice, key, self._notifier.webhook))


def body(notice: PipelineNotice, key: str, hook: Webhook) -> dict[str, Any]:
    """A notify step's notification in the webhook's format (``REVIEW_WEBHOOK_FORMAT``)."""
    text = (
        f"{notice.pipeline} {notice.version}, step {notice.step}: {notice.message} "
        f"(run {shown_id(notice.workflow_id)})"
    )
    web_ui_url = hook.web_ui_link(notice.workflow_id)
    if hook.format == "slack":
        escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return {
            "text": text,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": escaped}}],
        }
    return {
        "event": "pipeline_step",
        "text": text,
        "workflow_id": notice.workflow_id,
        "run_id": notice.run_id,
        "pipeline": notice.pipeline,
        "version": notice.version,
        "step": notice.step,
        "message": notice.message,
        "inbox_url": hook.inbox_link(notice.workflow_id),
        "web_ui_url": web_ui_url,
        "idempotency_key": key,
    }
