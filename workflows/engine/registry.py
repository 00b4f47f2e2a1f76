"""The pipelines written in Python a worker runs: the shipped ones, and those its
``PIPELINE_MODULES`` name (imported by the worker, outside workflow code).

Workflow code finds a run's pipeline here by its workflow type. The worker installs its list
once, before it polls (``RegisteredPipelines.install``); the sandbox passes the ``workflows``
package through, so every run reads that list and none changes it. Where the sandbox
re-imports ``workflows`` for every run (the workflow and replay tests' strict mode), a run sees
the shipped pipelines only.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, overload

from workflows.engine.graph import GraphError
from workflows.engine.pipeline import Pipeline


def clashes(pipelines: Iterable[Pipeline[Any, Any]]) -> list[str]:
    """The names two of ``pipelines`` share (a short name or a workflow type), one line each."""
    seen: dict[str, str] = {}
    found = []
    for pipeline in pipelines:
        for name in dict.fromkeys((pipeline.name, pipeline.workflow_type)):
            if name in seen and seen[name] != pipeline.workflow_type:
                found.append(f"{name!r} names both {seen[name]} and {pipeline.workflow_type}")
            seen[name] = pipeline.workflow_type
    return found


class RegisteredPipelines(Sequence[Pipeline[Any, Any]]):
    """A sequence of pipelines: the shipped ones until the worker installs its own."""

    def __init__(self, shipped: Sequence[Pipeline[Any, Any]]) -> None:
        self.shipped = tuple(shipped)
        self._pipelines = self.shipped

    def install(self, pipelines: Sequence[Pipeline[Any, Any]]) -> None:
        """Run ``pipelines`` from now on (the shipped ones first, then the modules').

        Raises:
            GraphError: two pipelines share a short name or a workflow type.
        """
        found = clashes(pipelines)
        if found:
            raise GraphError("pipelines clash: " + "; ".join(found))
        self._pipelines = tuple(pipelines)

    @overload
    def __getitem__(self, index: int) -> Pipeline[Any, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Pipeline[Any, Any]]: ...

    def __getitem__(self, index: int | slice) -> Pipeline[Any, Any] | Sequence[Pipeline[Any, Any]]:
        return self._pipelines[index]

    def __len__(self) -> int:
        return len(self._pipelines)
