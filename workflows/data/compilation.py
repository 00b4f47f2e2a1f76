"""One compilation of a pipeline file's spec, as the compiler's parts share it: the spec and
the catalog, each step's type and settings as they are found, and every problem so far with
where it is in the file (a path such as ``("steps", 2, "next")``) and the rule it breaks.

Deterministic (no clock, no I/O): workflow code compiles a run's recorded spec with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from workflows.data import templates
from workflows.data.catalog import Catalog, CompiledStep, StepType
from workflows.data.contract import Rule
from workflows.data.json_schemas import Loc
from workflows.data.spec import PipelineSpec, StepSpec
from workflows.engine.graph import COMPLETED, DEAD_LETTER, FAILED, IDLE, TERMINAL_STATES, Event
from workflows.payloads import printable

END_TARGETS: Final = (COMPLETED, FAILED, DEAD_LETTER)
ENGINE_STATES: Final = frozenset({IDLE, *TERMINAL_STATES})
ENGINE_EVENTS: Final = frozenset(event.value for event in Event)
SUB_STATE_NAMES: Final = MappingProxyType(
    {
        "retry": "retry_{id}",
        "capacity": "await_capacity_{id}",
        "budget": "await_budget_{id}",
        "batch": "await_batch_{id}",
        "escalation": "{id}_escalated",
    }
)


@dataclass(frozen=True)
class CheckProblem:
    """A problem in a spec: where (a path into the file's data), the rule, a sentence; for a
    template, the line within it (1-based) that holds the problem."""

    path: Loc
    rule: Rule
    message: str
    template_line: int = 0


class Compilation:
    """What one compilation knows so far and the problems it found; the compiler's parts
    (``Outcomes``, ``StepGraph``, ``AdvisoryChecks``) read and add to it."""

    def __init__(self, spec: PipelineSpec, catalog: Catalog, *, strict: bool) -> None:
        self.spec, self.catalog, self.strict = spec, catalog, strict
        self.problems: list[CheckProblem] = []
        self.env = templates.environment()
        self.ids = [step.id for step in spec.steps]
        self.index = {step.id: i for i, step in enumerate(spec.steps)}
        self.settings: dict[str, Any] = {}
        self.types: dict[str, StepType] = {}
        self.compiled_steps: dict[str, CompiledStep] = {}

    def problem(self, path: Loc, rule: Rule, message: str, template_line: int = 0) -> None:
        self.problems.append(CheckProblem(tuple(path), rule, message, template_line))

    def _target(self, path: Loc, target: str) -> bool:
        if target in self.index or target in END_TARGETS:
            return True
        self.problem(
            path,
            Rule.MISSING_STEP,
            f"no step {printable(target, 64)!r} (steps: {', '.join(self.ids)}; ends: "
            + ", ".join(END_TARGETS)
            + ")",
        )
        return False

    @staticmethod
    def _event_path(where: Loc, step: StepSpec, settings: Any, outcome: str) -> Loc:
        """Where the file names an outcome's event: ``events``, a route's case, else the id."""
        if outcome in step.events:
            return (*where, "events", outcome)
        if outcome in (getattr(settings, "cases", None) or {}):
            return (*where, "cases", outcome)
        return (*where, "id")
