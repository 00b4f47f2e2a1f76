"""The engine: what a pipeline author writes a pipeline with.

A pipeline is a ``Graph`` (its states as ``StateInfo``, each with a ``Status`` and a ``Role``;
its ``Transition`` s, most built by the edge helpers), a handler per working state that does
the state's work through a ``Context`` (``move``, ``failed``, ``fail``, ``enter_review``) and
one ``Pipeline`` that registers them; a worker runs every registered pipeline with one
``PipelineWorkflow`` subclass. The rest of the engine's modules are its own.

Each name is imported when it is first asked for, so importing one engine module (as the
runtime's configuration imports ``identity``) does not import the workflow class and the SDK's
workflow module with it.
"""

from collections.abc import Mapping
from importlib import import_module
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from workflows.engine.graph import (
        AWAIT_BATCH,
        AWAIT_BUDGET,
        AWAIT_CAPACITY,
        AWAIT_REVIEW,
        CANCELLED,
        COMPLETED,
        DEAD_LETTER,
        ESCALATE,
        FAILED,
        IDLE,
        Event,
        Graph,
        GraphError,
        Role,
        StateInfo,
        Status,
        Transition,
        batch_edges,
        budget_edges,
        cancel_edges,
        capacity_edges,
        retry_edges,
        review_edges,
        review_states,
    )
    from workflows.engine.pipeline import (
        Context,
        Handler,
        Pipeline,
        PipelineSource,
        ReviewSubject,
        nothing_to_undo,
    )
    from workflows.engine.record import MoveDetails
    from workflows.engine.reviews import enter as enter_review
    from workflows.engine.workflow import PipelineWorkflow

# Each public name: the module it lives in, and its name there.
_HOMES: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        "AWAIT_BATCH": ("workflows.engine.graph", "AWAIT_BATCH"),
        "AWAIT_BUDGET": ("workflows.engine.graph", "AWAIT_BUDGET"),
        "AWAIT_CAPACITY": ("workflows.engine.graph", "AWAIT_CAPACITY"),
        "AWAIT_REVIEW": ("workflows.engine.graph", "AWAIT_REVIEW"),
        "CANCELLED": ("workflows.engine.graph", "CANCELLED"),
        "COMPLETED": ("workflows.engine.graph", "COMPLETED"),
        "DEAD_LETTER": ("workflows.engine.graph", "DEAD_LETTER"),
        "ESCALATE": ("workflows.engine.graph", "ESCALATE"),
        "FAILED": ("workflows.engine.graph", "FAILED"),
        "IDLE": ("workflows.engine.graph", "IDLE"),
        "Event": ("workflows.engine.graph", "Event"),
        "Graph": ("workflows.engine.graph", "Graph"),
        "GraphError": ("workflows.engine.graph", "GraphError"),
        "Role": ("workflows.engine.graph", "Role"),
        "StateInfo": ("workflows.engine.graph", "StateInfo"),
        "Status": ("workflows.engine.graph", "Status"),
        "Transition": ("workflows.engine.graph", "Transition"),
        "batch_edges": ("workflows.engine.graph", "batch_edges"),
        "budget_edges": ("workflows.engine.graph", "budget_edges"),
        "cancel_edges": ("workflows.engine.graph", "cancel_edges"),
        "capacity_edges": ("workflows.engine.graph", "capacity_edges"),
        "retry_edges": ("workflows.engine.graph", "retry_edges"),
        "review_edges": ("workflows.engine.graph", "review_edges"),
        "review_states": ("workflows.engine.graph", "review_states"),
        "Context": ("workflows.engine.pipeline", "Context"),
        "Handler": ("workflows.engine.pipeline", "Handler"),
        "Pipeline": ("workflows.engine.pipeline", "Pipeline"),
        "PipelineSource": ("workflows.engine.pipeline", "PipelineSource"),
        "ReviewSubject": ("workflows.engine.pipeline", "ReviewSubject"),
        "nothing_to_undo": ("workflows.engine.pipeline", "nothing_to_undo"),
        "MoveDetails": ("workflows.engine.record", "MoveDetails"),
        "enter_review": ("workflows.engine.reviews", "enter"),
        "PipelineWorkflow": ("workflows.engine.workflow", "PipelineWorkflow"),
    }
)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = home
    return getattr(import_module(module), attribute)


__all__ = [
    "AWAIT_BATCH",
    "AWAIT_BUDGET",
    "AWAIT_CAPACITY",
    "AWAIT_REVIEW",
    "CANCELLED",
    "COMPLETED",
    "DEAD_LETTER",
    "ESCALATE",
    "FAILED",
    "IDLE",
    "Context",
    "Event",
    "Graph",
    "GraphError",
    "Handler",
    "MoveDetails",
    "Pipeline",
    "PipelineSource",
    "PipelineWorkflow",
    "ReviewSubject",
    "Role",
    "StateInfo",
    "Status",
    "Transition",
    "batch_edges",
    "budget_edges",
    "cancel_edges",
    "capacity_edges",
    "enter_review",
    "nothing_to_undo",
    "retry_edges",
    "review_edges",
    "review_states",
]
