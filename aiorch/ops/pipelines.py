"""The pipelines the operator's tools know: the ones the worker runs, by the short name
operators type (``--pipeline llm``) and by workflow type.

Two kinds: the pipelines written in Python (the shipped ones, ``workflows.orchestrator.SHIPPED``,
then those ``PIPELINE_MODULES`` names: `registered`) and the pipeline files in
``PIPELINES_DIR`` (read once per process, as they are now; a run follows the version it
started with, which its ``status`` names). A pipeline file's short name is its pipeline's name,
which is also its runs' workflow type.

Every tool that lists, counts or acts on runs covers all of them: visibility queries select
their workflow types on the worker's task queue (`task_queue`), state options take any of their
states, and what a run shows is asked of its own pipeline.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from typing import Any

import workflows.data as data
from aiorch_runtime.config import ConfigError, load_settings
from aiorch_runtime.pipeline_files import FolderScan, PipelineFolder, settings_folder
from workflows.data.spec import PipelineRecord
from workflows.engine.graph import Graph
from workflows.engine.pipeline import Pipeline
from workflows.engine.registry import clashes
from workflows.errors import OrchestratorError
from workflows.orchestrator import DATA_PIPELINES, SHIPPED

__all__ = [
    "DEFAULT_PIPELINE",
    "UnknownPipeline",
    "all_states",
    "code_names",
    "data_pipelines",
    "every",
    "folder",
    "graphs",
    "is_data",
    "load",
    "named",
    "names",
    "of_type",
    "record_of",
    "registered",
    "reload",
    "reserved_names",
    "review_states",
    "task_queue",
    "terminal_states",
    "workflow_types",
]

# The pipeline ``aiorch start`` runs without --pipeline: the first one shipped.
DEFAULT_PIPELINE = SHIPPED[0].name


class UnknownPipeline(OrchestratorError):
    """No pipeline has that name; the message lists the ones there are."""


def load(modules: Sequence[str]) -> tuple[Pipeline[Any, Any], ...]:
    """The pipelines written in Python: the shipped ones, then each of ``modules``' ``PIPELINE``
    (what ``PIPELINE_MODULES`` names), imported here.

    Raises:
        ConfigError: a module cannot be imported, has no ``PIPELINE``, or its pipeline shares a
            name or workflow type with another.
    """
    found: list[Pipeline[Any, Any]] = list(SHIPPED)
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ConfigError(f"PIPELINE_MODULES: cannot import {name!r}: {err}") from None
        pipeline = getattr(module, "PIPELINE", None)
        if not isinstance(pipeline, Pipeline):
            raise ConfigError(f"PIPELINE_MODULES: {name!r} has no PIPELINE (a Pipeline)")
        if pipeline not in found:
            found.append(pipeline)
    if problems := clashes(found):
        raise ConfigError("PIPELINE_MODULES: " + "; ".join(problems))
    return tuple(found)


@functools.cache
def registered() -> tuple[Pipeline[Any, Any], ...]:
    """The pipelines written in Python this process's settings register (`load`).

    Raises:
        ConfigError: invalid settings, or as `load`.
    """
    return load(load_settings().pipeline_modules)


def reserved_names(pipelines: Sequence[Pipeline[Any, Any]]) -> list[str]:
    """The names pipeline files may not take: the workflow types and short names of
    ``pipelines`` (those written in Python)."""
    return [name for pipeline in pipelines for name in (pipeline.workflow_type, pipeline.name)]


def code_names() -> list[str]:
    """The names pipeline files may not take here (`reserved_names` of `registered`)."""
    return reserved_names(registered())


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
    registered.cache_clear()
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
    return [*registered(), *data_pipelines()]


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
