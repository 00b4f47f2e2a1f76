"""The pipelines the operator's tools know: the ones the worker runs, by the short name
operators type (``--pipeline llm``) and by workflow type.

Two kinds: the pipelines written in Python (``workflows.orchestrator.PIPELINES``) and the
pipeline files in ``PIPELINES_DIR`` (read once per process, as they are now; a run follows the
version it started with, which its ``status`` names). A pipeline file's short name is its
pipeline's name, which is also its runs' workflow type.

Every tool that lists, counts or acts on runs covers all of them: visibility queries select
their workflow types on the worker's task queue (`task_queue`), state options take any of their
states, and what a run shows is asked of its own pipeline.
"""

from __future__ import annotations

import functools
from typing import Any

import workflows.data as data
from aiorch_runtime.config import load_settings
from aiorch_runtime.pipeline_files import FolderScan, PipelineFolder, settings_folder
from workflows.data.spec import PipelineRecord
from workflows.engine.graph import Graph
from workflows.engine.pipeline import Pipeline
from workflows.errors import OrchestratorError
from workflows.orchestrator import DATA_PIPELINES, PIPELINES

__all__ = [
    "DEFAULT_PIPELINE",
    "PIPELINES",
    "UnknownPipeline",
    "all_states",
    "code_names",
    "data_pipelines",
    "every",
    "folder",
    "graphs",
    "is_data",
    "named",
    "names",
    "of_type",
    "record_of",
    "reload",
    "review_states",
    "task_queue",
    "terminal_states",
    "workflow_types",
]

DEFAULT_PIPELINE = "llm"


class UnknownPipeline(OrchestratorError):
    """No pipeline has that name; the message lists the ones there are."""


def code_names() -> list[str]:
    """The names pipeline files may not take: the Python pipelines' types and short names."""
    return [name for pipeline in PIPELINES for name in (pipeline.workflow_type, pipeline.name)]


@functools.cache
def folder() -> PipelineFolder | None:
    """The pipeline folder ``PIPELINES_DIR`` names (None: unset).

    Raises:
        ConfigError: invalid settings, or no such folder.
    """
    settings = load_settings()
    return settings_folder(settings.pipelines_dir, DATA_PIPELINES.catalog, code_names())


@functools.cache
def _scan() -> FolderScan | None:
    found = folder()
    return found.check() if found is not None else None


@functools.cache
def task_queue() -> str:
    """The task queue the worker polls (``TEMPORAL_TASK_QUEUE``): the tools trust only runs on
    it. A run of a pipeline's workflow type on another task queue is a look-alike, since anyone
    with namespace access may run a worker of their own there under any type name.

    Raises:
        ConfigError: invalid settings.
    """
    return load_settings().temporal_task_queue


def reload() -> None:
    """Read the settings and the folder afresh at the next use (a long-lived process, a test)."""
    folder.cache_clear()
    _scan.cache_clear()
    task_queue.cache_clear()


def data_pipelines() -> list[Pipeline[Any, Any]]:
    """The pipeline files' pipelines, as their files are now.

    Raises:
        ConfigError: as `folder`, or a file has a problem (``PipelineFilesInvalid``).
    """
    scanned = _scan()
    if scanned is None:
        return []
    return [
        data.as_pipeline(
            data.compile_spec(record.spec, DATA_PIPELINES.catalog), version=record.label
        )
        for record in scanned.records.values()
    ]


def record_of(name: str) -> PipelineRecord | None:
    """The pipeline file's record of pipeline ``name`` as its file is now (None: it is no
    pipeline file's).

    Raises:
        ConfigError: as `data_pipelines`.
    """
    scanned = _scan()
    return scanned.records.get(name) if scanned is not None else None


def every() -> list[Pipeline[Any, Any]]:
    """Every pipeline: those written in Python, then the pipeline files'."""
    return [*PIPELINES, *data_pipelines()]


def is_data(pipeline: Pipeline[Any, Any]) -> bool:
    """Whether ``pipeline`` is defined by a pipeline file."""
    return pipeline.version is not None


def names() -> list[str]:
    """Every pipeline's short name, in the worker's order."""
    return [pipeline.name for pipeline in every()]


def named(name: str) -> Pipeline[Any, Any]:
    """The pipeline operators call ``name``.

    Raises:
        UnknownPipeline: there is none of that name.
    """
    for pipeline in every():
        if pipeline.name == name:
            return pipeline
    raise UnknownPipeline(f"no pipeline named {name!r} (pipelines: {', '.join(names())})")


def of_type(workflow_type: str) -> Pipeline[Any, Any] | None:
    """The pipeline whose runs have ``workflow_type``, if the worker runs it."""
    return next((p for p in every() if p.workflow_type == workflow_type), None)


def workflow_types() -> list[str]:
    """The workflow types of every pipeline."""
    return [pipeline.workflow_type for pipeline in every()]


def graphs() -> list[Graph]:
    """Every pipeline's graph."""
    return [pipeline.graph for pipeline in every()]


def all_states() -> list[str]:
    """Every state of any pipeline, each once, in graph order."""
    seen: dict[str, None] = {}
    for graph in graphs():
        seen.update(dict.fromkeys(graph.states))
    return list(seen)


def review_states() -> frozenset[str]:
    """The states in which a run of any pipeline waits for a reviewer."""
    return frozenset(state for graph in graphs() for state in graph.review_states)


def terminal_states() -> frozenset[str]:
    """The states runs of any pipeline end in."""
    return frozenset(state for graph in graphs() for state in graph.terminal_states)
