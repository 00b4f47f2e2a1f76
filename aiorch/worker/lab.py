"""The worker's second task queue: the replay lab's (docs/lab.md). Its worker runs the lab's
workflow class, which takes forks only, with the worker's activities, those that write made
dry (``activities.lab``); only runs on the lab's queue may call them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.callers import CallerCheck
from activities.lab import lab_activities
from aiorch.worker.options import deployment_options, tuning_options
from aiorch.worker.registration import WorkerPipelines
from aiorch_runtime.config import ConfigError, Settings, lab_queue
from workflows.orchestrator import LabEngineWorkflow


def lab_task_queue(settings: Settings) -> str:
    """The lab's task queue (``LAB_TASK_QUEUE``).

    Raises:
        ConfigError: it is the production task queue, where forks would meet real runs.
    """
    queue = lab_queue(settings.temporal_task_queue, settings.lab_task_queue)
    if queue == settings.temporal_task_queue:
        raise ConfigError(
            "LAB_TASK_QUEUE is TEMPORAL_TASK_QUEUE: the lab's forks need a task queue of their own"
        )
    return queue


def lab_worker(
    client: Client,
    settings: Settings,
    pipelines: WorkerPipelines,
    activities: Sequence[Callable[..., Any]],
) -> Worker | None:
    """The lab queue's worker (None with ``LAB_ENABLED=false``), running ``activities`` (the
    production worker's) with those that write made dry.

    Raises:
        ConfigError: as `lab_task_queue`.
    """
    if not settings.lab_enabled:
        return None
    queue = lab_task_queue(settings)
    return Worker(
        client,
        task_queue=queue,
        workflows=[LabEngineWorkflow],
        interceptors=[CallerCheck(client, queue, pipelines)],
        activities=lab_activities(activities),
        **tuning_options(settings),
        **deployment_options(settings),
    )
