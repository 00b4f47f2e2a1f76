"""Where each step of a pipeline file leads: its outcomes' targets (``next``, ``on``, a
type's own routes, a review's decisions, else the next step in the file), the events that take
them, and the names of its sub-states.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from workflows.data.catalog import CompiledStep, Edge, StepType
from workflows.data.compilation import (
    END_TARGETS,
    ENGINE_EVENTS,
    SUB_STATE_NAMES,
    Compilation,
)
from workflows.data.contract import EVENT_PATTERN, Rule
from workflows.data.json_schemas import Loc
from workflows.data.spec import StateName, StepSpec
from workflows.engine.graph import COMPLETED, FAILED
from workflows.payloads import printable


class Outcomes(Compilation):
    """The steps' edges and sub-state names, for the compiler."""

    def _edges(self) -> dict[str, CompiledStep]:
        """Where each step's outcomes lead, and the events that take them."""
        compiled: dict[str, CompiledStep] = {}
        for i, step in enumerate(self.spec.steps):
            step_type = self.types.get(step.id)
            if step_type is None or step.id in compiled:
                continue
            settings = self.settings[step.id]
            targets = self._targets(i, step, step_type, settings)
            edges = self._step_edges(i, step, step_type, settings, targets)
            compiled[step.id] = CompiledStep(
                spec=step,
                type=step_type,
                settings=settings,
                index=i,
                edges=MappingProxyType(edges),
                sub_states=MappingProxyType(self._sub_state_names(step, step_type, settings)),
            )
        return compiled

    def _targets(
        self, i: int, step: StepSpec, step_type: StepType, settings: Any
    ) -> dict[str, tuple[Loc, str]]:
        """Where each outcome of step ``i`` leads (and where the file says so): ``next``, a
        type's own defaults and routes, a review's decisions, then the file's ``on``."""
        outcomes = step_type.outcomes_of(settings)
        where = ("steps", i)
        following = self.ids[i + 1] if i + 1 < len(self.ids) else COMPLETED
        main = step.next or following
        if step.next is not None:
            self._target((*where, "next"), step.next)
        targets: dict[str, tuple[Loc, str]] = {outcomes[0]: ((*where, "next"), main)}
        for outcome, target in step_type.defaults.items():
            targets[outcome] = ((*where,), target)
        for outcome, target in (step_type.routes(settings) if step_type.routes else {}).items():
            targets[outcome] = ((*where,), target)
        if step_type.kind == "review":
            targets.update(self._review_targets(i, step, settings))
        for outcome, target in step.on.items():
            if outcome not in outcomes:
                self.problem(
                    (*where, "on", outcome),
                    Rule.UNKNOWN_OUTCOME,
                    f"a {step.type} step has no outcome {printable(outcome, 64)!r} "
                    f"(outcomes: {', '.join(outcomes)})",
                )
                continue
            if self._target((*where, "on", outcome), target):
                targets[outcome] = ((*where, "on", outcome), target)
        for outcome in step.events:
            if outcome not in outcomes or step_type.kind == "review":
                self.problem(
                    (*where, "events", outcome),
                    Rule.UNKNOWN_OUTCOME,
                    f"no outcome {printable(outcome, 64)!r} to name"
                    if step_type.kind != "review"
                    else "a review's events are the engine's (approve, reedit, reject, correct)",
                )
        return targets

    def _step_edges(
        self,
        i: int,
        step: StepSpec,
        step_type: StepType,
        settings: Any,
        targets: dict[str, tuple[Loc, str]],
    ) -> dict[str, Edge]:
        """Each outcome's edge: its event (the outcome's name unless the file names another)
        and its target; an event that is the engine's, not a name, or taken twice is a
        problem."""
        outcomes = step_type.outcomes_of(settings)
        where = ("steps", i)
        edges: dict[str, Edge] = {}
        used: dict[str, str] = {}
        for outcome in outcomes:
            if outcome not in targets:
                continue
            _, target = targets[outcome]
            if target not in self.index and target not in END_TARGETS:
                continue  # reported where it is given
            event = step.events.get(outcome, outcome)
            if step_type.kind != "review":
                if event in ENGINE_EVENTS or not re.fullmatch(EVENT_PATTERN, event):
                    self.problem(
                        self._event_path(where, step, settings, outcome),
                        Rule.DUPLICATE_EVENT,
                        f"event {printable(event, 64)!r} of outcome {outcome!r} is the "
                        "engine's or not a name: give it another (events:)",
                    )
                    continue
                if event in used:
                    self.problem(
                        (*where, "events"),
                        Rule.DUPLICATE_EVENT,
                        f"outcomes {used[event]!r} and {outcome!r} are both event {event!r}",
                    )
                    continue
            used[event] = outcome
            edges[outcome] = Edge(outcome, event, target)
        return edges

    def _review_targets(self, i: int, step: StepSpec, settings: Any) -> dict[str, tuple[Loc, str]]:
        where = ("steps", i)
        targets: dict[str, tuple[Loc, str]] = {}
        reedit = getattr(settings, "reedit", None)
        if reedit is None:
            earlier = [
                other.id
                for other in self.spec.steps[:i]
                if getattr(self.catalog.get(other.type), "kind", "") == "model"
            ]
            if not earlier:
                self.problem(
                    where,
                    Rule.MISSING_FIELD,
                    "a review needs reedit: the step a reviewer's request for changes leads "
                    "back to (no model step comes before it)",
                )
            else:
                targets["reedit"] = (where, earlier[-1])
        else:
            targets["reedit"] = ((*where, "reedit"), reedit)
        targets["reject"] = ((*where, "reject"), getattr(settings, "reject", None) or FAILED)
        corrections = getattr(settings, "corrections", None)
        if corrections is not None:
            targets["correct"] = ((*where, "corrections"), corrections)
        return targets

    def _sub_state_names(
        self, step: StepSpec, step_type: StepType, settings: Any
    ) -> dict[str, str]:
        kinds = {"model": ("retry", "capacity", "budget", "batch"), "review": ("escalation",)}.get(
            step_type.kind, ()
        )
        named = getattr(settings, "states", None)
        names = {}
        for kind in kinds:
            given: StateName | None = getattr(named, kind, None) if named is not None else None
            names[kind] = (given.name if given and given.name else None) or SUB_STATE_NAMES[
                kind
            ].format(id=step.id)
        return names
