"""What the worker runs, from its registered pipelines: the pipelines written in Python (the
shipped ones and ``PIPELINE_MODULES``'), their activities (each pipeline's factory, besides the
engine's), the pipeline folder, and the workflow types allowed to call its activities. Nothing
here names a pipeline.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from activities.wiring import Activity, ActivityFactory, Clients, engine_activities
from aiorch.ops.pipelines import reserved_names
from aiorch_runtime.config import ConfigError, Settings
from aiorch_runtime.pipeline_files import PipelineFolder, settings_folder
from workflows import contract
from workflows.engine.pipeline import Pipeline
from workflows.orchestrator import DATA_PIPELINES


def factory(path: str) -> ActivityFactory:
    """The activity factory ``path`` (``module:function``) names.

    Raises:
        ConfigError: no such module or function.
    """
    module_name, _, name = path.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), name, None) if name else None
    except ImportError as err:
        raise ConfigError(f"activities {path!r}: cannot import {module_name!r}: {err}") from None
    if not callable(found):
        raise ConfigError(f"activities {path!r}: no function {name!r} in {module_name!r}")
    factory_: ActivityFactory = found
    return factory_


def worker_activities(pipelines: Sequence[Pipeline[Any, Any]], clients: Clients) -> list[Activity]:
    """The engine's activities, then each pipeline's (a factory two pipelines share is built
    once).

    Raises:
        ConfigError: a pipeline names a factory that cannot be found (`factory`).
    """
    paths = dict.fromkeys(p.activities for p in pipelines if p.activities is not None)
    built = [engine_activities(clients), *(factory(path)(clients) for path in paths)]
    return [activity for activities in built for activity in activities]


def pipeline_folder(
    settings: Settings, pipelines: Sequence[Pipeline[Any, Any]]
) -> PipelineFolder | None:
    """The worker's pipeline folder (``PIPELINES_DIR``), every file in it checked; None when
    unset. A file may take no name of ``pipelines`` (`reserved_names`).

    Raises:
        ConfigError: the folder is missing, or a file in it has a problem
            (``PipelineFilesInvalid``: the message names the file, line and rule).
    """
    folder = settings_folder(
        settings.pipelines_dir, DATA_PIPELINES.catalog, reserved_names(pipelines)
    )
    if folder is not None:
        folder.check()
    return folder


class WorkerPipelines:
    """The workflow types the worker runs, for the activity caller check: its pipelines
    written in Python, the batch lane's group workflow, and the pipelines its folder has (or
    had, in this process)."""

    def __init__(
        self, pipelines: Sequence[Pipeline[Any, Any]], folder: PipelineFolder | None
    ) -> None:
        self._types = frozenset(
            [*(pipeline.workflow_type for pipeline in pipelines), contract.WORKFLOW_TYPE_LLM_BATCH]
        )
        self._folder = folder

    async def has(self, workflow_type: str) -> bool:
        """Whether runs of ``workflow_type`` may call the worker's activities.

        Raises:
            ConfigError: the folder could not be read just now (the activity is retried).
        """
        if workflow_type in self._types:
            return True
        return self._folder is not None and await self._folder.has(workflow_type)
