"""A pipeline file's steps as the engine's graph: each step's states (its own, and its model
call's waits or its review's escalation, from the shared sub-graphs), the transitions between
them, and the graph's reachability rules placed at the steps they concern.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workflows.data.catalog import FAILURE_TARGETS, CompiledStep
from workflows.data.compilation import ENGINE_STATES, Compilation
from workflows.data.contract import Rule
from workflows.data.spec import StateName
from workflows.engine.graph import (
    IDLE,
    Event,
    Graph,
    GraphRule,
    Role,
    StateInfo,
    Status,
    Transition,
    review_edges,
    review_states,
)
from workflows.steps.model_call import WAITS, CallStates, model_call_edges, model_call_states


class StepGraph(Compilation):
    """The states and transitions of the compiled steps, for the compiler."""

    def _states(self, steps: Mapping[str, CompiledStep]) -> dict[str, StateInfo] | None:
        """Each step's state and sub-states (progress is set later); names unique."""
        states: dict[str, StateInfo] = {}
        claimed: set[str] = set()
        for step in steps.values():
            for name in (step.spec.id, *step.sub_states.values()):
                if name in claimed or name in ENGINE_STATES:
                    self.problem(
                        ("steps", step.index, "id"),
                        Rule.DUPLICATE_STATE,
                        f"state {name!r} is named twice (a step's id and another's sub-state)",
                    )
                claimed.add(name)
            states.update(step_states(step))
        return None if self.problems else states

    def _transitions(self, steps: Mapping[str, CompiledStep]) -> list[Transition]:
        transitions = [Transition(IDLE, Event.START, self.ids[0])]
        for step_id, step in steps.items():
            if step.type.kind == "review":
                edges = step.edges
                transitions += review_edges(
                    approve=edges["approve"].target,
                    reedit=edges["reedit"].target if "reedit" in edges else step_id,
                    reject=edges["reject"].target,
                    correct=edges["correct"].target if "correct" in edges else None,
                    review=step_id,
                    escalation=step.sub_states["escalation"],
                )
                continue
            transitions += [
                Transition(step_id, edge.event, edge.target) for edge in step.edges.values()
            ]
            transitions += [
                Transition(step_id, failure, FAILURE_TARGETS[failure])
                for failure in step.type.failures
            ]
            if step.type.kind == "model":
                transitions += model_call_edges(step_id, _call_states(step))
        return transitions

    def _reachability(self, states: dict[str, StateInfo], transitions: list[Transition]) -> None:
        """The graph's rules of reachability and ends, each placed at the step it concerns
        (a sub-state's is its step's, which the step's own problem names)."""
        found = Graph.unchecked(self.spec.name, states, transitions).problems()
        unreachable = {p.state for p in found if p.rule == GraphRule.REACHABLE}
        for problem in found:
            if problem.state not in self.index:
                continue
            where = ("steps", self.index[problem.state], "id")
            if problem.rule == GraphRule.REACHABLE:
                self.problem(
                    where,
                    Rule.UNREACHABLE_STEP,
                    f"no path from the start reaches step {problem.state!r} (nothing leads to it)",
                )
            elif problem.rule == GraphRule.ENDS and problem.state not in unreachable:
                self.problem(
                    where, Rule.DEAD_END, f"no path from step {problem.state!r} reaches an end"
                )


def step_states(step: CompiledStep) -> dict[str, StateInfo]:
    """The states of ``step`` (at progress 0: the compiler sets it later): its own, and its
    review's escalation or its model call's waits, described as the file says, else as the
    engine does."""
    spec, step_type = step.spec, step.type
    named = getattr(step.settings, "states", None)
    if step_type.kind == "review":
        return review_states(
            0,
            review=spec.id,
            escalation=step.sub_states["escalation"],
            shown=spec.description,
            escalated=_description(named, "escalation"),
        )
    shown = spec.shown if spec.shown is not None else step_type.shown
    description = spec.description or step_type.description or f"{step_type.name} step"
    states = {spec.id: StateInfo(Status.PROCESSING, 0, description, Role.WORK, shown)}
    if step_type.kind == "model":
        descriptions = {
            wait: given for wait in WAITS if (given := _description(named, wait)) is not None
        }
        states.update(model_call_states(0, _call_states(step), descriptions=descriptions))
    return states


def _call_states(step: CompiledStep) -> CallStates:
    names = step.sub_states
    return CallStates(
        retry=names["retry"],
        capacity=names["capacity"],
        budget=names["budget"],
        batch=names["batch"],
    )


def _description(named: Any, kind: str) -> str | None:
    """The description the file gives a sub-state of ``kind``, if any."""
    given: StateName | None = getattr(named, kind, None) if named is not None else None
    return given.description if given and given.description else None
