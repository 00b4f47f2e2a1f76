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

The parts: where outcomes lead (``outcomes``), the steps' states and transitions
(``step_graph``), progress (``progress``), the advisory checks (``advisory``), all over one
``compilation``; JSON Schema checks are ``json_schemas``'.

Deterministic (no clock, no I/O): workflow code compiles a run's recorded spec with it.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

from jinja2 import TemplateError
from pydantic import ValidationError

from workflows.data.advisory import AdvisoryChecks
from workflows.data.catalog import Catalog, Compiled, marked
from workflows.data.compilation import ENGINE_STATES, CheckProblem
from workflows.data.contract import Rule
from workflows.data.json_schemas import schema_problems
from workflows.data.outcomes import Outcomes
from workflows.data.progress import set_progress
from workflows.data.spec import Mark, PipelineSpec
from workflows.data.step_graph import StepGraph
from workflows.engine.graph import IDLE, TERMINAL_STATES, Graph, GraphError, cancel_edges
from workflows.errors import OrchestratorError
from workflows.payloads import printable

# What other modules take from the compiler (``CheckProblem`` is the compilation's).
__all__ = ("CheckProblem", "SpecInvalid", "check", "compile_spec", "describe", "error_message")


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


class _Builder(Outcomes, StepGraph, AdvisoryChecks):
    """One compilation: collects problems, builds the graph when there are none in its way."""

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
        for path, message in set_progress(steps, states, transitions):
            self.problem(path, Rule.PROGRESS_GOES_DOWN, message)
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


def describe(problem: CheckProblem) -> str:
    """One problem as a line (without a file's line numbers)."""
    where = ".".join(str(part) for part in problem.path) or "(file)"
    return f"{where}: {problem.rule}: {problem.message}"
