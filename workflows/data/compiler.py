"""A pipeline file's spec, compiled into the engine's graph value, or every problem it has.

The compiler names each state after its step (``id``), adds the engine's sub-graphs where a
step's kind needs them (a model call's retry, capacity and budget waits; a review's escalation)
with one call each, leads every outcome where the file says (``next``, ``on``, a type's own
routes, else the next step in the file, the last step's to ``completed``), gives each failure
the engine's end state, lets every state be cancelled, and sets progress: where the file gives
none, states on one loop share one figure and each later stage has a higher one, so progress
never goes down.

``check`` reports every problem with where it is in the file (a path such as ``("steps", 2,
"next")``, which ``aiorch_runtime.pipeline_files`` turns into a line and column) and the rule
it breaks. ``compile_spec`` refuses a spec with problems; inside a workflow it compiles a
recorded spec without the advisory checks (templates, schemas, reachability), so a later
release's stricter checks never strand a run that started on an older one.

Deterministic (no clock, no I/O): workflow code compiles a run's recorded spec with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final

import jsonschema
from jinja2 import TemplateError
from pydantic import ValidationError

from workflows.data import route_cases, templates
from workflows.data.catalog import (
    FAILURE_TARGETS,
    Catalog,
    Compiled,
    CompiledStep,
    Edge,
    StepType,
    marked,
)
from workflows.data.contract import EVENT_PATTERN, Rule
from workflows.data.spec import Mark, PipelineSpec, StateName, StepSpec
from workflows.engine.graph import (
    COMPLETED,
    DEAD_LETTER,
    FAILED,
    IDLE,
    TERMINAL_STATES,
    Event,
    Graph,
    GraphError,
    GraphRule,
    Role,
    StateInfo,
    Status,
    Transition,
    cancel_edges,
    review_edges,
    review_states,
)
from workflows.errors import OrchestratorError
from workflows.payloads import printable
from workflows.steps.model_call import WAITS, CallStates, model_call_edges, model_call_states

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
Loc = tuple[Any, ...]


@dataclass(frozen=True)
class CheckProblem:
    """A problem in a spec: where (a path into the file's data), the rule, a sentence; for a
    template, the line within it (1-based) that holds the problem."""

    path: Loc
    rule: Rule
    message: str
    template_line: int = 0


class SpecInvalid(OrchestratorError):
    """A spec with problems; ``problems`` lists them and the message names the first."""

    def __init__(self, problems: list[CheckProblem]) -> None:
        self.problems = problems
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(describe(problems[0]) + more)


def check(spec: PipelineSpec, catalog: Catalog) -> list[CheckProblem]:
    """Every problem of ``spec`` (none: it compiles)."""
    builder = _Builder(spec, catalog, strict=True)
    builder.build()
    return builder.problems


def compile_spec(spec: PipelineSpec, catalog: Catalog, *, strict: bool = True) -> Compiled:
    """``spec`` compiled. ``strict=False`` (a run's recorded spec, inside a workflow) leaves
    out the advisory checks.

    Raises:
        SpecInvalid: the spec has problems.
    """
    builder = _Builder(spec, catalog, strict=strict)
    compiled = builder.build()
    if builder.problems or compiled is None:
        raise SpecInvalid(builder.problems or [CheckProblem((), Rule.INVALID_VALUE, "invalid")])
    return compiled


def schema_problems(schema: dict[str, Any]) -> list[tuple[Loc, str]]:
    """Where ``schema`` is not valid JSON Schema (its own ``$schema`` draft, else 2020-12),
    or refers outside itself (a ``$ref`` is resolved inside the schema only: nothing is
    fetched, in a workflow least of all)."""
    try:
        validator = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        validator.check_schema(schema)
    except jsonschema.SchemaError as err:
        return [(tuple(err.absolute_path), printable(err.message, 300))]
    except Exception as err:  # a $schema the library cannot resolve, for one
        return [((), printable(str(err) or type(err).__name__, 300))]
    return [
        (where, "a $ref points inside the schema only (#/...)")
        for where, ref in _refs(schema, ())
        if not (isinstance(ref, str) and ref.startswith("#"))
    ]


def _refs(node: Any, where: Loc) -> list[tuple[Loc, Any]]:
    if isinstance(node, dict):
        found = [((*where, "$ref"), node["$ref"])] if "$ref" in node else []
        for key, value in node.items():
            found += _refs(value, (*where, key))
        return found
    if isinstance(node, list):
        return [item for index, value in enumerate(node) for item in _refs(value, (*where, index))]
    return []


def value_problems(schema: dict[str, Any], value: Any) -> list[tuple[str, str]]:
    """Where ``value`` breaks ``schema``: (a field's path, what is wrong), at most 50. A
    schema that cannot be applied (a reference it cannot resolve) is one problem, never an
    exception: workflow code calls this."""
    found = []
    try:
        validator_type = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        for error in validator_type(schema).iter_errors(value):
            where = ".".join(str(part) for part in error.absolute_path) or "(document)"
            found.append((where, printable(error.message, 200)))
            if len(found) >= 50:
                break
    except Exception as err:  # whatever the library raises, the run gets one line
        return [("(schema)", printable(f"the schema cannot be applied: {err}", 200))]
    return sorted(found)


class _Builder:
    """One compilation: collects problems, builds the graph when there are none in its way."""

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

    # Building.

    def build(self) -> Compiled | None:
        compiled = self._compile()
        if self.strict:
            self._marked(self.compiled_steps)
        if compiled is None or self.problems:
            return None
        try:
            templates_by_text = {text: self.env.from_string(text) for text in self._texts()}
        except TemplateError as err:
            self.problem(("steps",), Rule.TEMPLATE_SYNTAX, str(err))
            return None
        return replace(compiled, compiled_templates=MappingProxyType(templates_by_text))

    def _texts(self) -> set[str]:
        return {
            value
            for step in self.compiled_steps.values()
            for _, mark, value in marked(step.settings)
            if mark == Mark.TEMPLATE
        }

    def _compile(self) -> Compiled | None:
        self._steps()
        if self.strict:
            self._input_schema()
        steps = self.compiled_steps = self._edges()
        if len(steps) != len(self.spec.steps) or self.problems:
            return None
        states = self._states(steps)
        if states is None:
            return None
        transitions = self._transitions(steps)
        if self.strict:
            self._reachability(states, transitions)
            if self.problems:
                return None
        self._progress(steps, states, transitions)
        if self.problems:
            return None
        try:
            graph = Graph.of(
                self.spec.name,
                states,
                transitions,
                cancel_edges([IDLE, *(state for state in states if state not in TERMINAL_STATES)]),
            )
        except GraphError as err:
            self.problem(("steps",), Rule.INVALID_VALUE, str(err))
            return None
        return Compiled(
            spec=self.spec,
            catalog=self.catalog,
            steps=MappingProxyType(steps),
            graph=graph,
            env=self.env,
            compiled_templates=MappingProxyType({}),
            review_states=MappingProxyType(
                {
                    state: step_id
                    for step_id, step in steps.items()
                    if step.type.kind == "review"
                    for state in (step_id, step.sub_states["escalation"])
                }
            ),
        )

    def _steps(self) -> None:
        """Each step's type and settings; ids unique and not the engine's."""
        seen: set[str] = set()
        for i, step in enumerate(self.spec.steps):
            if step.id in ENGINE_STATES:
                self.problem(
                    ("steps", i, "id"), Rule.INVALID_VALUE, f"{step.id!r} is the engine's state"
                )
            elif step.id in seen:
                self.problem(
                    ("steps", i, "id"), Rule.DUPLICATE_STATE, f"a second step is named {step.id!r}"
                )
            seen.add(step.id)
            step_type = self.catalog.get(step.type)
            if step_type is None:
                self.problem(
                    ("steps", i, "type"),
                    Rule.UNKNOWN_STEP_TYPE,
                    f"no step type {printable(step.type, 64)!r}; the catalog has: "
                    + ", ".join(self.catalog.names),
                )
                continue
            try:
                self.settings[step.id] = step_type.settings.model_validate(step.settings)
            except ValidationError as err:
                for item in err.errors(include_url=False, include_input=False):
                    self.problem(
                        ("steps", i, *item["loc"]),
                        _rule_of(item["type"]),
                        error_message(item, f"a {step.type} step"),
                    )
                continue
            self.types[step.id] = step_type
        first = self.types.get(self.spec.steps[0].id) if self.spec.steps else None
        if first is not None and first.kind == "review":
            self.problem(
                ("steps", 0, "type"),
                Rule.INVALID_VALUE,
                "a pipeline starts with a working step, not a review",
            )

    def _input_schema(self) -> None:
        schema = self.spec.input
        for where, message in schema_problems(schema):
            self.problem(("input", *where), Rule.INVALID_JSON_SCHEMA, message)
        if schema.get("type", "object") != "object":
            self.problem(
                ("input", "type"), Rule.INVALID_VALUE, "the input is an object: type: object"
            )

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

    def _edges(self) -> dict[str, CompiledStep]:
        """Where each step's outcomes lead, and the events that take them."""
        compiled: dict[str, CompiledStep] = {}
        for i, step in enumerate(self.spec.steps):
            step_type = self.types.get(step.id)
            if step_type is None or step.id in compiled:
                continue
            settings = self.settings[step.id]
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
                        else "a review's events are the engine's (approve, reedit, reject, "
                        "correct)",
                    )
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
            compiled[step.id] = CompiledStep(
                spec=step,
                type=step_type,
                settings=settings,
                index=i,
                edges=MappingProxyType(edges),
                sub_states=MappingProxyType(self._sub_state_names(step, step_type, settings)),
            )
        return compiled

    @staticmethod
    def _event_path(where: Loc, step: StepSpec, settings: Any, outcome: str) -> Loc:
        """Where the file names an outcome's event: ``events``, a route's case, else the id."""
        if outcome in step.events:
            return (*where, "events", outcome)
        if outcome in (getattr(settings, "cases", None) or {}):
            return (*where, "cases", outcome)
        return (*where, "id")

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

    def _progress(
        self,
        steps: Mapping[str, CompiledStep],
        states: dict[str, StateInfo],
        transitions: list[Transition],
    ) -> None:
        """Each state's progress: the file's, else by stage (see the module docstring)."""
        owner = {
            state: step
            for step in steps.values()
            for state in (step.spec.id, *step.sub_states.values())
        }
        explicit = {
            state: step.spec.progress
            for state, step in owner.items()
            if step.spec.progress is not None
        }
        working = [state for state in states]
        levels = _stage_levels(working, [t for t in transitions if t.source != IDLE])
        groups: dict[int, list[str]] = {}
        for state, (group, _) in levels.items():
            groups.setdefault(group, []).append(state)
        top = max((level for _, level in levels.values()), default=1)
        progress: dict[str, int] = {}
        for members in groups.values():
            given = [explicit[state] for state in members if state in explicit]
            level = levels[members[0]][1]
            figure = max(given) if given else max(1, min(99, round(level * 100 / (top + 1))))
            for state in members:
                progress[state] = explicit.get(state, figure)
        for state, info in list(states.items()):
            states[state] = StateInfo(
                info.status, progress[state], info.description, info.role, info.shown
            )
        reported: set[Loc] = set()
        for t in transitions:
            source = progress.get(t.source, 0)
            target = progress.get(t.target, 100)
            if target >= source:
                continue
            # Blame the figure the file gives: the later step's, else the earlier one's.
            step = owner[t.target] if t.target in explicit else owner[t.source]
            path = ("steps", step.index, "progress" if step.spec.progress is not None else "id")
            if path in reported:
                continue
            reported.add(path)
            self.problem(
                path,
                Rule.PROGRESS_GOES_DOWN,
                f"progress goes down from {t.source} ({source}%) to {t.target} ({target}%): "
                "a later step needs a higher figure, and a loop one figure",
            )

    # The advisory checks: templates, paths, step references, schemas.

    def _marked(self, steps: Mapping[str, CompiledStep]) -> None:
        for step in steps.values():
            where = ("steps", step.index)
            for loc, mark, value in marked(step.settings):
                path = (*where, *loc)
                if mark == Mark.TEMPLATE:
                    for found in templates.problems(self.env, value, self.field_problem):
                        self.problem(path, found.rule, found.message, found.line)
                elif mark == Mark.PATH:
                    parts = tuple(str(value).split("."))
                    if parts[0] not in templates.ROOTS:
                        self.problem(
                            path, Rule.INVALID_VALUE, "a data path starts with input or steps"
                        )
                        continue
                    message = self.field_problem(parts)
                    if message is not None:
                        self.problem(path, Rule.UNKNOWN_TEMPLATE_FIELD, message)
                elif mark == Mark.STEP:
                    self._target(path, str(value))
                elif mark == Mark.SCHEMA:
                    for inner, message in schema_problems(value):
                        self.problem((*path, *inner), Rule.INVALID_JSON_SCHEMA, message)
            if step.type.routes_on is not None and step.type.routes is not None:
                routes = step.type.routes(step.settings)
                self._route_cases(step, step.type.routes_on(step.settings), routes)

    def _route_cases(self, step: CompiledStep, value: str, routes: Mapping[str, str]) -> None:
        """Name each case of ``step`` that no value at the data path ``value`` can match."""
        schema = self.value_schema(tuple(value.split(".")))
        cases = [case for case in routes if case != "default"]
        unmatched, allowed = route_cases.never_matched(schema, cases)
        for case in unmatched:
            path = self._event_path(("steps", step.index), step.spec, step.settings, case)
            self.problem(path, Rule.UNKNOWN_CASE, route_cases.problem(value, schema, case, allowed))

    def value_schema(self, parts: tuple[str, ...]) -> Any:
        """The JSON Schema of the value at a data path, or None when nothing says."""
        if parts[0] == "input":
            return route_cases.subschema(self.spec.input, parts[1:])
        step_type = self.types.get(parts[1]) if len(parts) > 1 else None
        if step_type is None:
            return None
        return route_cases.subschema(step_type.output(self.settings[parts[1]]), parts[2:])

    def field_problem(self, parts: tuple[str, ...]) -> str | None:
        """Why ``parts`` names nothing a run will have, or None."""
        if parts[0] == "input":
            return _schema_field(self.spec.input, parts[1:], "the input")
        if len(parts) < 2:
            return None
        step_id = parts[1]
        step_type = self.types.get(step_id)
        if step_id not in self.index:
            return f"no step {printable(step_id, 64)!r} to read (steps: {', '.join(self.ids)})"
        if step_type is None:
            return None
        schema = step_type.output(self.settings[step_id])
        if schema is None:
            return f"step {step_id!r} ({step_type.name}) records no output"
        return _schema_field(schema, parts[2:], f"step {step_id!r}'s output")


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


def _schema_field(schema: Any, parts: tuple[str, ...], what: str) -> str | None:
    current = schema
    walked: list[str] = []
    for part in parts:
        if not isinstance(current, dict):
            return None
        properties = current.get("properties")
        if not isinstance(properties, dict):
            items = current.get("items")
            if part.isdigit() and isinstance(items, dict):
                current = items
                walked.append(part)
                continue
            return None
        if part not in properties:
            shown = ".".join([*walked, part])
            fields = ", ".join(sorted(properties)) or "none"
            return f"{what} has no field {printable(shown, 80)!r} (fields: {fields})"
        current = properties[part]
        walked.append(part)
    return None


def error_message(item: Any, owner: str) -> str:
    """A pydantic error as a sentence about a file: an unknown field named as such."""
    if item["type"] == "extra_forbidden":
        return f"{printable(str(item['loc'][-1]), 64)!r} is not a field of {owner}"
    if item["type"] == "missing":
        return f"{owner} needs {printable(str(item['loc'][-1]), 64)!r}"
    message = str(item["msg"])
    return message.removeprefix("Value error, ")


def _rule_of(error_type: str) -> Rule:
    if error_type == "extra_forbidden":
        return Rule.UNKNOWN_FIELD
    if error_type == "missing":
        return Rule.MISSING_FIELD
    return Rule.INVALID_VALUE


def _stage_levels(states: list[str], transitions: list[Transition]) -> dict[str, tuple[int, int]]:
    """Each state's loop (strongly connected component, by number) and its stage: 1 for the
    first, one more than the latest stage before it otherwise."""
    following: dict[str, list[str]] = {state: [] for state in states}
    for t in transitions:
        if t.source in following and t.target in following:
            following[t.source].append(t.target)
    component = _components(states, following)
    preceding: dict[int, set[int]] = {c: set() for c in set(component.values())}
    for source, targets in following.items():
        for target in targets:
            if component[source] != component[target]:
                preceding[component[target]].add(component[source])
    level: dict[int, int] = {}
    pending = sorted(preceding)
    while pending:
        ready = [c for c in pending if preceding[c] <= set(level)]
        for c in ready:
            level[c] = 1 + max((level[p] for p in preceding[c]), default=0)
        pending = [c for c in pending if c not in level]
        if not ready:  # cannot happen on a condensation; kept so the loop always ends
            for c in pending:
                level[c] = 1
            break
    return {state: (component[state], level[component[state]]) for state in states}


def _components(states: list[str], following: Mapping[str, list[str]]) -> dict[str, int]:
    """Strongly connected components, numbered (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    component: dict[str, int] = {}

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for root in states:
        if root in index:
            continue
        visit(root)
        work = [(root, iter(following[root]))]
        while work:
            node, targets = work[-1]
            descended = False
            for target in targets:
                if target not in index:
                    visit(target)
                    work.append((target, iter(following[target])))
                    descended = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if descended:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                number = len(set(component.values()))
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = number
                    if member == node:
                        break
    return component


def describe(problem: CheckProblem) -> str:
    """One problem as a line (without a file's line numbers)."""
    where = ".".join(str(part) for part in problem.path) or "(file)"
    return f"{where}: {problem.rule}: {problem.message}"
