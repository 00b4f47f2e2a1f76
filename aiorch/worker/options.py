"""How the worker is set up from its settings: its start-up checks and warnings (reviewer
authentication, review policies, a small workflow cache), its slots, pollers and cache, Worker
Versioning, and the batch lane's settings."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import PollerBehaviorSimpleMaximum, WorkerDeploymentConfig

from activities.batch import BatchSettings
from activities.planning import BATCH_SUBMISSION_ALLOWANCE_S
from aiorch_runtime.config import ConfigError, Settings
from aiorch_runtime.review_policies import pipeline_of
from workflows.engine.pipeline import ENGINE_FACTS, Pipeline


def small_cache_warning(settings: Settings) -> str | None:
    """Why a workflow cache smaller than the workflow task slots hurts, or None if it is not.

    Runs are then evicted between (or during) their workflow tasks and replayed from history;
    one evicted while its local ``fetch_prompt`` is in flight loses that task and waits out the
    workflow task timeout (10 s) before it is retried. Fine for debugging replays, not for load.
    """
    cache = settings.worker_max_cached_workflows
    slots = settings.worker_max_concurrent_workflow_tasks
    if cache >= slots:
        return None
    return (
        f"WORKER_MAX_CACHED_WORKFLOWS={cache} is below WORKER_MAX_CONCURRENT_WORKFLOW_TASKS="
        f"{slots}: runs are replayed from history on every task, and a run evicted while its "
        "local fetch_prompt is in flight waits out the workflow task timeout (10 s); use a "
        "cache this small for debugging only"
    )


def review_auth_warning(settings: Settings) -> str | None:
    """What the worker logs at start when reviewer authentication is off, or None when on.

    Raises:
        ConfigError: ``REVIEW_AUTH=required`` (the default) without reviewer keys, or
            ``REVIEW_AUTH=off`` with keys (which of the two was meant cannot be guessed).
    """
    keys = settings.review_keys()
    if settings.review_auth == "required":
        if not keys:
            raise ConfigError(
                "reviewer authentication is required (REVIEW_AUTH=required, the default) and "
                "no reviewer key is configured: set REVIEW_PUBLIC_KEYS or "
                "REVIEW_PUBLIC_KEYS_FILE (`aiorch keys reviewer NAME`, `aiorch inbox new-key`), "
                "or REVIEW_AUTH=off to accept unsigned reviews in a sandbox"
            )
        return None
    if keys:
        raise ConfigError(
            "REVIEW_AUTH=off and REVIEW_PUBLIC_KEYS are both set: unset REVIEW_PUBLIC_KEYS to "
            "accept unsigned reviews, or REVIEW_AUTH to require signed ones"
        )
    return (
        "REVIEW_AUTH=off: reviews are not authenticated; anyone who can signal or update a run "
        "can approve it under any allowed reviewer name. Use this in a sandbox only."
    )


def check_review_policies(settings: Settings, pipelines: Sequence[Pipeline[Any, Any]]) -> None:
    """Every review policy names one of ``pipelines`` (those the worker runs), and its
    auto-approve rules read only facts that pipeline's results have (a rule that reads another
    would never approve).

    Raises:
        ConfigError: one line naming the policy and what it names wrongly.
    """
    by_name = {pipeline.name: pipeline for pipeline in pipelines}
    for key, policy in settings.review_policies.items():
        pipeline = by_name.get(pipeline_of(key))
        if pipeline is None:
            raise ConfigError(
                f"REVIEW_POLICIES: {key!r} names no pipeline of this worker ({', '.join(by_name)})"
            )
        for rule in policy.auto_approve:
            for condition in rule.when:
                if not pipeline.knows_fact(condition.fact):
                    known = ", ".join((*ENGINE_FACTS, *pipeline.facts))
                    raise ConfigError(
                        f"REVIEW_POLICIES: {key}: rule {rule.name} reads {condition.fact!r}, "
                        f"which the {pipeline.name} pipeline does not give (it gives {known})"
                    )


def batch_settings(settings: Settings) -> BatchSettings:
    """How the batch lane groups, submits and polls calls (``LLM_BATCH_*``)."""
    return BatchSettings(
        size=settings.llm_batch_size,
        delay=timedelta(seconds=settings.llm_batch_delay_s),
        poll=timedelta(seconds=settings.llm_batch_poll_s),
        task_queue=settings.temporal_task_queue,
        base_url=settings.openai_base_url,
    )


def batch_item_ttl(settings: Settings) -> timedelta:
    """How long a batched call is kept: its wait for its submission and its answer, and a day
    for its run to take the answer up."""
    waits = settings.llm_batch_delay_s + BATCH_SUBMISSION_ALLOWANCE_S + settings.llm_batch_wait_s
    return timedelta(seconds=waits) + timedelta(days=1)


def tuning_options(settings: Settings) -> dict[str, Any]:
    """The worker's slots, pollers and cache from settings (shared with the bench baseline)."""
    return {
        "max_concurrent_activities": settings.worker_max_concurrent_activities,
        "max_concurrent_workflow_tasks": settings.worker_max_concurrent_workflow_tasks,
        "max_cached_workflows": settings.worker_max_cached_workflows,
        "workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(
            settings.worker_workflow_task_pollers
        ),
        "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(
            settings.worker_activity_task_pollers
        ),
        "graceful_shutdown_timeout": timedelta(seconds=settings.worker_shutdown_grace),
    }


VERSIONING_BEHAVIORS = {
    "auto_upgrade": VersioningBehavior.AUTO_UPGRADE,
    "pinned": VersioningBehavior.PINNED,
}


def deployment_options(settings: Settings) -> dict[str, Any]:
    """Worker Versioning options: none without ``WORKER_BUILD_ID``.

    With a build id the worker reports its version (``WORKER_DEPLOYMENT_NAME.WORKER_BUILD_ID``)
    to the server; only with ``WORKER_VERSIONING=true`` does the server route tasks by version,
    so a new build gets work once it is made current (README "Rolling deploys").
    """
    if settings.worker_build_id is None:
        return {}
    version = WorkerDeploymentVersion(settings.worker_deployment_name, settings.worker_build_id)
    return {
        "deployment_config": WorkerDeploymentConfig(
            version=version,
            use_worker_versioning=settings.worker_versioning,
            default_versioning_behavior=(
                VERSIONING_BEHAVIORS[settings.worker_versioning_behavior]
                if settings.worker_versioning
                else VersioningBehavior.UNSPECIFIED
            ),
        )
    }
