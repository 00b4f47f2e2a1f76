"""The catalog of step types a pipeline file may use, and what a step type's code sees of a run.

A step type has a name (what a file writes as ``type:``), a settings model (the step's own
fields, checked before anything runs), its outcomes (the first leads to the step's ``next``,
the others wherever the file's ``on`` says, or to the type's defaults), the engine events its
failures take (``permanent_error`` to ``failed``, ``exhausted`` to ``dead_letter``), its kind,
and ``run``: the code that does the step's work and reports one outcome through
``StepRun.done``. Kinds: ``work`` (a working state), ``model`` (a working state with the
engine's retry, capacity and budget waits around a model call) and ``review`` (the engine's
review and escalation states; no code of its own).

The engine's built-in types are ``CATALOG`` (``workflows.data.steps``). A project adds its own
in Python by building a catalog that includes them (``CATALOG.including(my_type)``) and giving
it to its worker's workflow class and pipeline loader; a file then names the new type.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.data import templates
from workflows.data.payloads import DataPlan, DataRequest, DataState
from workflows.data.spec import Mark, PipelineSpec, Settings, StepSpec
from workflows.engine.graph import Event, Graph, Role
from workflows.engine.pipeline import Context
from workflows.payloads import LlmCallResult

StepKind = Literal["work", "model", "review"]
Run = Context[DataRequest, DataState]
# Where failures lead: the engine's end states.
FAILURE_TARGETS: Final = MappingProxyType(
    {Event.PERMANENT_ERROR.value: "failed", Event.EXHAUSTED.value: "dead_letter"}
)


def _no_output(settings: Any) -> dict[str, Any] | None:
    return None


def object_schema(*fields: str) -> dict[str, Any]:
    """The JSON Schema of an object with ``fields`` (a step type's output; a new one each
    call: nothing shared)."""
    return {"type": "object", "properties": {name: {} for name in fields}}


@dataclass(frozen=True)
class StepType:
    """One kind of step (module docstring). ``output``: the JSON Schema of what the step
    records as its output (``steps.ID`` in templates; None: it records none), which the check
    uses to refuse a template field the step will not have. ``routes``: outcomes whose target
    the step's settings name (a route's cases). ``routes_on``: the data path whose value picks
    one of them, which the check reads to name a case no value can match. ``defaults``: where
    an outcome the file does not route leads (else the step's ``next``)."""

    name: str
    settings: type[Settings]
    run: Callable[[StepRun, Any], Awaitable[None]] | None
    outcomes: Callable[[Any], tuple[str, ...]] | tuple[str, ...] = ("done",)
    failures: tuple[str, ...] = ()
    kind: StepKind = "work"
    in_task: bool = False
    shown: bool = True
    description: str = ""
    defaults: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    routes: Callable[[Any], Mapping[str, str]] | None = None
    routes_on: Callable[[Any], str] | None = None
    output: Callable[[Any], dict[str, Any] | None] = _no_output

    def outcomes_of(self, settings: Any) -> tuple[str, ...]:
        """The step's outcomes with these settings, its main one first."""
        return self.outcomes(settings) if callable(self.outcomes) else self.outcomes


@dataclass(frozen=True)
class Catalog:
    """The step types a pipeline file may name, by name. Immutable: ``including`` gives a new
    catalog with more types."""

    types: Mapping[str, StepType]

    @classmethod
    def of(cls, *types: StepType) -> Catalog:
        """A catalog of ``types``.

        Raises:
            ValueError: two types share a name.
        """
        named: dict[str, StepType] = {}
        for step_type in types:
            if step_type.name in named:
                raise ValueError(f"two step types are named {step_type.name!r}")
            named[step_type.name] = step_type
        return cls(MappingProxyType(named))

    def including(self, *types: StepType) -> Catalog:
        """This catalog with ``types`` added (a project's own step types).

        Raises:
            ValueError: a name is taken.
        """
        return Catalog.of(*self.types.values(), *types)

    def get(self, name: str) -> StepType | None:
        """The type called ``name``, if the catalog has it."""
        return self.types.get(name)

    @property
    def names(self) -> list[str]:
        """Every type's name, sorted."""
        return sorted(self.types)


@dataclass(frozen=True)
class Edge:
    """Where an outcome of a step leads, and the event that takes it there."""

    outcome: str
    event: str
    target: str


@dataclass(frozen=True)
class CompiledStep:
    """A step, compiled: its spec, type, validated settings, its outcomes' edges and the
    names of its sub-states (``retry``, ``capacity``, ``budget``, ``escalation``)."""

    spec: StepSpec
    type: StepType
    settings: Any
    index: int
    edges: Mapping[str, Edge]
    sub_states: Mapping[str, str]


@dataclass(frozen=True, eq=False)
class Compiled:
    """A compiled pipeline: its spec, steps by id (in file order), graph and templates."""

    spec: PipelineSpec
    catalog: Catalog
    steps: Mapping[str, CompiledStep]
    graph: Graph
    env: ImmutableSandboxedEnvironment
    compiled_templates: Mapping[str, Any]
    review_states: Mapping[str, str]

    def template(self, text: str) -> Any:
        """The compiled template of ``text`` (a template of this pipeline's)."""
        return self.compiled_templates[text]

    def review_step_of(self, state: str) -> str:
        """The review step whose review (or escalation) state ``state`` is."""
        return self.review_states[state]

    @property
    def in_task(self) -> frozenset[str]:
        """The states whose work finishes inside the workflow task."""
        return frozenset(step_id for step_id, step in self.steps.items() if step.type.in_task)


def marks_of(info: Any) -> list[Mark]:
    """The `Mark`s of a settings field: on the field, or inside its type (``X | None``)."""
    found = [item for item in info.metadata if isinstance(item, Mark)]
    pending = [info.annotation]
    while pending:
        current = pending.pop()
        for arg in typing.get_args(current):
            if isinstance(arg, Mark):
                found.append(arg)
            else:
                pending.append(arg)
    return list(dict.fromkeys(found))


def marked(value: Any, loc: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Mark, Any]]:
    """Every marked value in ``value`` (settings), with where it is and what it holds: a
    marked list or mapping yields each item."""
    if isinstance(value, BaseModel):
        for name, info in type(value).model_fields.items():
            inner = getattr(value, name)
            where = (*loc, info.alias or name)
            for mark in marks_of(info):
                yield from _items(inner, where, mark)
            yield from marked(inner, where)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from marked(item, (*loc, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from marked(item, (*loc, key))


def _items(
    value: Any, loc: tuple[Any, ...], mark: Mark
) -> Iterator[tuple[tuple[Any, ...], Mark, Any]]:
    if value is None:
        return
    if mark != Mark.SCHEMA and isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _items(item, (*loc, index), mark)
    elif mark != Mark.SCHEMA and isinstance(value, dict):
        for key, item in value.items():
            yield from _items(item, (*loc, key), mark)
    else:
        yield loc, mark, value


def lookup(data: Any, parts: tuple[str, ...]) -> Any:
    """The value at ``parts`` in ``data`` (objects by key, lists by index), or None."""
    current = data
    for part in parts:
        if isinstance(current, dict):
            current = current.get(part)
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


@dataclass(eq=False)
class StepRun:
    """A step as its type's code sees it: the run (``ctx``), the step and the compiled
    pipeline. The code does the step's work and reports one outcome with `done`, or a failure
    with `failed` / `fail`."""

    ctx: Run
    step: CompiledStep
    compiled: Compiled

    @property
    def run(self) -> DataState:
        return self.ctx.run

    @property
    def request(self) -> DataRequest:
        return self.ctx.request

    @property
    def plan(self) -> DataPlan:
        plan: DataPlan = self.ctx.plan
        return plan

    @property
    def id(self) -> str:
        return self.step.spec.id

    def values(self) -> dict[str, Any]:
        """What templates and paths read: ``input`` and ``steps`` (outputs so far)."""
        return {"input": self.request.input, "steps": self.run.outputs}

    def render(self, text: str) -> str:
        """A template of this pipeline, rendered with the run's data.

        Raises:
            templates.RenderFailed: the template failed.
        """
        return templates.render(self.compiled.template(text), self.values())

    def value_at(self, path: str) -> Any:
        """The run's data at ``path`` (``input.ticket``, ``steps.classify.category``)."""
        return lookup(self.values(), tuple(path.split(".")))

    def leads_to_review(self, outcome: str) -> bool:
        """Whether ``outcome`` leads into a review."""
        edge = self.step.edges[outcome]
        return self.ctx.graph.info(edge.target).role == Role.REVIEW

    def done(
        self,
        outcome: str,
        *,
        output: Any = None,
        keep_output: bool = True,
        detail: str | None = None,
        answer: LlmCallResult | None = None,
        prompt: str | None = None,
    ) -> None:
        """Record the step's ``output`` (unless ``keep_output`` is False) and take the edge of
        ``outcome``: into a review, a new review round under the review step's policy."""
        run, edge = self.run, self.step.edges[outcome]
        if keep_output:
            run.outputs[self.id] = output
        if self.leads_to_review(outcome):
            policy = self.plan.reviews.get(self.compiled.review_step_of(edge.target))
            if policy is not None:
                run.plan = self.plan.model_copy(update=policy.model_dump())
            detail = detail or outcome
        self.ctx.done(edge.event, detail=detail, answer=answer, prompt=prompt)

    async def failed(self, err: ActivityError | ApplicationError) -> None:
        """An activity of the step failed (``Context.failed``): for good (to ``failed``) or
        after its retries (dead-lettered, to be redriven), as far as the step type has those
        edges; a cancel is re-raised."""
        await self.ctx.failed(err)

    async def fail(self, detail: str, *, permanent: bool = True) -> None:
        """End the step in failure with ``detail`` (``Context.fail``)."""
        await self.ctx.fail(detail, permanent=permanent)
