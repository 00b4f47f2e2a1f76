"""The pipelines the operator's tools know: the ones the worker runs (``workflows.orchestrator``),
by the short name operators type (``--pipeline llm``) and by workflow type.

Every tool that lists, counts or acts on runs covers all of them: visibility queries select
their workflow types, state options take any of their states, and what a run shows is asked of
its own pipeline.
"""

from __future__ import annotations

from typing import Any

from workflows.engine.graph import Graph
from workflows.engine.pipeline import Pipeline
from workflows.errors import OrchestratorError
from workflows.orchestrator import PIPELINES

__all__ = [
    "DEFAULT_PIPELINE",
    "PIPELINES",
    "UnknownPipeline",
    "all_states",
    "graphs",
    "named",
    "names",
    "of_type",
    "review_states",
    "terminal_states",
    "workflow_types",
]

DEFAULT_PIPELINE = "llm"


class UnknownPipeline(OrchestratorError):
    """No pipeline has that name; the message lists the ones there are."""


def names() -> list[str]:
    """Every pipeline's short name, in the worker's order."""
    return [pipeline.name for pipeline in PIPELINES]


def named(name: str) -> Pipeline[Any, Any]:
    """The pipeline operators call ``name``.

    Raises:
        UnknownPipeline: there is none of that name.
    """
    for pipeline in PIPELINES:
        if pipeline.name == name:
            return pipeline
    raise UnknownPipeline(f"no pipeline named {name!r} (pipelines: {', '.join(names())})")


def of_type(workflow_type: str) -> Pipeline[Any, Any] | None:
    """The pipeline whose runs have ``workflow_type``, if the worker runs it."""
    return next((p for p in PIPELINES if p.workflow_type == workflow_type), None)


def workflow_types() -> list[str]:
    """The workflow types of every pipeline."""
    return [pipeline.workflow_type for pipeline in PIPELINES]


def graphs() -> list[Graph]:
    """Every pipeline's graph."""
    return [pipeline.graph for pipeline in PIPELINES]


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
