"""The rollout choice every plan activity makes (``plan_run``, ``fetch_prompt``,
``plan_pipeline``): the run's variant, chosen once from its workflow id and recorded in its
plan (``ModelSettings.assignment``); `workflows.engine.planning.with_prompt` applies it when
the prompt is added, so the run's history holds what it ran with (docs/rollouts.md).

A run of a pipeline without an experiment is planned as before: no store is read and its plan
is unchanged. The halts are read from the capacity store at each choice, so a halt reaches the
next run any worker plans; when the store cannot be read the run gets the control, so a canary
never gets more traffic than the operator allowed (a read that takes longer than
``HALTS_READ_TIMEOUT`` counts as failed).

Each choice counts the run under its variant (``aiorch_experiment_runs``) and sets whether
each of the experiment's variants is halted (``aiorch_experiment_halted``, 1 or 0) on the
worker's metrics endpoint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Final

from temporalio import activity

from aiorch_runtime.experiment_halts import HaltStore, HaltStoreError
from aiorch_runtime.experiments import Experiment, experiment_for
from workflows.engine.planning import RunPlan

log = logging.getLogger(__name__)

# Well inside the plan activities' timeout (a local activity's, LOCAL_FETCH_TIMEOUT), so a
# slow store gives the control rather than a retried plan.
HALTS_READ_TIMEOUT: Final = timedelta(seconds=2)
METRIC_EXPERIMENT_RUNS = "aiorch_experiment_runs"
METRIC_EXPERIMENT_HALTED = "aiorch_experiment_halted"


class Rollouts:
    """The worker's experiments (``EXPERIMENTS``, by pipeline or ``pipeline@tenant``) and the
    store their halts are kept in (None when there are no experiments). Runs on
    ``lab_queue`` (the replay lab's forks) are never assigned: a fork runs its original's
    variant, which it carries."""

    def __init__(
        self,
        experiments: Mapping[str, Experiment],
        halts: HaltStore | None,
        *,
        lab_queue: str | None = None,
    ) -> None:
        self._experiments = dict(experiments)
        self._halts = halts
        self._lab_queue = lab_queue

    async def assigned(self, plan: RunPlan, pipeline: str) -> RunPlan:
        """``plan`` (of a run of ``pipeline``, inside its plan activity) with the run's
        variant recorded, when an experiment covers the pipeline and the run's tenant."""
        experiment = experiment_for(self._experiments, pipeline, plan.tenant)
        if experiment is None or self._halts is None:
            return plan
        if self._lab_queue is not None and activity.info().task_queue == self._lab_queue:
            return plan
        workflow_id = activity.info().workflow_id or ""
        halted, promoted = await _state(self._halts, experiment)
        assignment = experiment.choose(workflow_id, halted=halted, promoted=promoted)
        _count(experiment, assignment.variant.name, halted)
        return plan.model_copy(update={"assignment": assignment})


# The rollouts of a worker without experiments: every plan as configured.
NO_ROLLOUTS = Rollouts({}, None)


def _count(experiment: Experiment, variant: str, halted: frozenset[str]) -> None:
    meter = activity.metric_meter()
    meter.create_counter(
        METRIC_EXPERIMENT_RUNS, "Runs planned under an experiment, by variant"
    ).add(1, {"experiment": experiment.id, "variant": variant})
    gauge = meter.create_gauge(
        METRIC_EXPERIMENT_HALTED, "Whether an experiment's variant is halted (1) or not (0)"
    )
    for arm in experiment.variants:
        gauge.set(int(arm.name in halted), {"experiment": experiment.id, "variant": arm.name})


async def _state(halts: HaltStore, experiment: Experiment) -> tuple[frozenset[str], str | None]:
    """The experiment's halted variants and promoted one; every variant but the control counts
    as halted while the store cannot be read."""
    try:
        state = await asyncio.wait_for(
            halts.state(experiment.id), HALTS_READ_TIMEOUT.total_seconds()
        )
    except (HaltStoreError, TimeoutError) as err:
        log.warning("experiment %s: %r; the run gets the control", experiment.id, err)
        return frozenset(arm.name for arm in experiment.variants[1:]), None
    return frozenset(state.halted), state.promoted
