"""A pipeline, as the engine runs it: its graph, a handler for each working state, its request
and state models, its result, what a reviewer sees, and how a cancel is compensated.

A handler does its state's work (usually one activity) and reports one event through
``Context`` (``move``; ``done``, which starts a review round when the event leads into a review;
``failed``/``fail`` for a failure, which re-raise a cancel and otherwise take the state's failure
edge); the graph says where the event leads. Python handlers and the steps of pipelines defined
as data (``workflows.data``) speak this one vocabulary. The engine handles every other state
(start, reviews, retries, capacity and budget waits, the ends). Building a ``Pipeline`` checks
that its handlers cover exactly its working states, so a pipeline with a missing handler is
refused when its module is imported, never when a run reaches the state.

What a review decides is, to the engine, a ``ReviewSubject``: the result as text or fields
(what a reedit or a correction records, before and after) and the facts review policies'
auto-approve rules read (``Pipeline.facts`` names them, so an operator's rule naming another
is refused when the worker starts).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar, Unpack

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.engine.activity_policy as activity_policy
import workflows.engine.commands as commands
import workflows.engine.observability as observability
import workflows.engine.policies as policies
import workflows.engine.record as record
import workflows.errors as errors
from workflows.engine.graph import Event, Graph, GraphError, Role
from workflows.payloads import (
    ContinuedRun,
    FactValue,
    RequestBase,
    ReviewContent,
    RunCore,
    RunPolicy,
    RunResult,
)

# The facts the engine adds to every pipeline's: the round, the model attempts so far, the model.
ENGINE_FACTS = ("review_round", "attempts", "model")
RequestT = TypeVar("RequestT", bound=RequestBase)
StateT = TypeVar("StateT", bound=RunCore[Any])


@dataclass(frozen=True)
class ReviewSubject:
    """The result a review decides, as data: its ``text`` (a model's reply) or its ``fields``
    (extracted data), and ``facts`` about it that auto-approve rules read (``problems``,
    ``confidence``, ``fields.total``, ...)."""

    text: str | None = None
    fields: Mapping[str, Any] | None = None
    facts: Mapping[str, FactValue] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def value(self) -> str | dict[str, Any] | None:
        """What a correction records of it: the fields when it has them, else the text."""
        return dict(self.fields) if self.fields is not None else self.text


@dataclass(eq=False)
class Context(Generic[RequestT, StateT]):
    """A run as its handlers see it: the pipeline's graph, the request and the run's state
    (and the pipeline, for what the engine asks of it: its review subject, its version)."""

    graph: Graph
    request: RequestT
    run: StateT
    pipeline: Pipeline[Any, Any] | None = None

    def subject(self) -> ReviewSubject:
        """The result under review, as the pipeline describes it (nothing without one)."""
        if self.pipeline is None:
            return ReviewSubject()
        return self.pipeline.subject(self)

    @property
    def pipeline_name(self) -> str:
        """The short name of the pipeline the run runs (its graph's name without one)."""
        return self.pipeline.name if self.pipeline is not None else self.graph.name

    @property
    def pipeline_version(self) -> str:
        """The version of the pipeline the run runs, as corrections record it: a pipeline
        file's version, else a digest of the graph (``graph_version``)."""
        if self.pipeline is not None and self.pipeline.version:
            return self.pipeline.version
        return graph_version(self.graph)

    @property
    def plan(self) -> Any:
        """The run's plan (the pipeline's ``RunPolicy``), once it is planned.

        Raises:
            errors.InvalidTransition: the run has no plan yet (a bug in the pipeline).
        """
        if self.run.plan is None:
            raise errors.InvalidTransition(self.run.state, "(no plan)", "the run is not planned")
        return self.run.plan

    @property
    def policy(self) -> RunPolicy:
        """The run's plan, as the engine reads it."""
        plan: RunPolicy = self.plan
        return plan

    def move(self, event: str, **details: Unpack[record.MoveDetails]) -> None:
        """Take the graph's edge for ``event`` from the current state (``record.move``)."""
        record.move(self.graph, self.run, event, **details)

    async def failed(
        self, err: ActivityError | ApplicationError, **details: Unpack[record.MoveDetails]
    ) -> None:
        """An activity of the current state failed: `fail` with its text, permanently when it
        failed for good (a non-retryable error, or a local activity's own ``ApplicationError``).

        Raises:
            ActivityError: ``err`` is the run's cancel reaching the activity: re-raised, so the
                engine compensates and ends the run cancelled.
        """
        if isinstance(err, ActivityError) and activity_policy.cancelled(err):
            raise err
        permanent = isinstance(err, ApplicationError) or activity_policy.is_permanent(err)
        await self.fail(activity_policy.error_text(err), permanent=permanent, **details)

    async def fail(
        self, text: str, *, permanent: bool = True, **details: Unpack[record.MoveDetails]
    ) -> None:
        """End the current state in failure, ``text`` its recorded error: ``permanent_error``
        when the failure is for good and the state has that edge (or no ``exhausted`` one),
        else the run is dead-lettered (``exhausted``), to be redriven.

        Raises:
            errors.InvalidTransition: the state has neither failure edge (a bug).
        """
        detail = self.set_error(text)
        edges = self.graph.allowed_events(self.run.state)
        if Event.PERMANENT_ERROR in edges and (permanent or Event.EXHAUSTED not in edges):
            details["detail"] = detail
            self.move(Event.PERMANENT_ERROR, **details)
            return
        if Event.EXHAUSTED not in edges:
            raise errors.InvalidTransition(self.run.state, "(failure)", "no failure edge")
        refused = await self.dead_letter(self.run.state)
        details["detail"] = detail + refused
        self.move(Event.EXHAUSTED, **details)

    def done(self, event: str, **details: Unpack[record.MoveDetails]) -> None:
        """Report the current state's outcome ``event``: into a review state it starts a new
        review round (`enter_review`), elsewhere it is a `move`."""
        target = self.graph.target_of(self.run.state, event)
        if target is not None and self.graph.info(target).role == Role.REVIEW:
            self.enter_review(event, **details)
        else:
            self.move(event, **details)

    def enter_review(self, event: str, **details: Unpack[record.MoveDetails]) -> None:
        """Move on ``event`` into a review state: a new review round, with its deadline from
        the plan, and the reviewers told when the plan says so. An auto-approve rule of the
        plan that the result matches approves it at once instead, with no reviewer told.

        The result under review is the one the run's open reedits asked for (their ``after``).
        """
        run, plan = self.run, self.policy
        subject = self.subject()
        record.complete_reedits(run, subject.value)
        run.review_round += 1
        run.votes = []
        run.round_started_at = workflow.now()
        run.review_deadline = workflow.now() + timedelta(seconds=plan.review_timeout_s)
        details["review_round"] = run.review_round
        self.move(event, **details)
        rule = policies.matching_rule(plan.auto_approve, self.review_facts(subject.facts))
        if rule is not None:
            run.review_deadline = None
            self.move(
                Event.APPROVE,
                detail=f"approved by rule {rule.name}",
                review_round=run.review_round,
                rule=rule.name,
            )
            observability.count_auto_approval(self.pipeline_name, rule.name)
            return
        commands.notify_reviewers(run, plan, "review_needed")

    def review_facts(self, given: Mapping[str, FactValue]) -> dict[str, FactValue]:
        """What auto-approve rules read: the pipeline's facts about its result (``given``),
        and the engine's (``ENGINE_FACTS``: the round, the model attempts so far, the model)."""
        run = self.run
        return {
            **given,
            "review_round": run.review_round,
            "attempts": run.attempts,
            "model": run.model,
        }

    def set_error(self, text: str) -> str:
        """Record ``text`` as the run's last error (bounded); returns what was recorded."""
        return record.set_error(self.run, text)

    async def dead_letter(self, failed_state: str) -> str:
        """Send the run's dead-letter message (``commands.dead_letter``): a note for history
        when the queue refused it for good, else nothing."""
        return await commands.dead_letter(self.run, self.request, failed_state)


Handler = Callable[[Context[RequestT, StateT]], Awaitable[None]]


async def nothing_to_undo(ctx: Context[Any, Any]) -> str:
    """The compensation of a pipeline whose steps leave nothing behind."""
    return "no side effects to undo"


def never_in_task(ctx: Context[Any, Any]) -> bool:
    """Every working state waits on the server (the default)."""
    return False


def no_subject(ctx: Context[Any, Any]) -> ReviewSubject:
    """A pipeline that says nothing about its results: no facts, nothing to record."""
    return ReviewSubject()


def graph_version(graph: Graph) -> str:
    """A pipeline's version when it names none: ``graph-`` and a digest of its graph's states
    and edges, so it changes whenever the graph does."""
    shape = "\n".join(
        [
            graph.name,
            *sorted(graph.states),
            *(f"{t.source} {t.event} {t.target}" for t in graph.transitions),
        ]
    )
    return "graph-" + hashlib.sha256(shape.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class RequestShape:
    """How ``aiorch start`` fills a pipeline's request besides ``--input JSON`` (which gives its
    fields as they are): ``message_field`` takes the positional message (None: the pipeline
    takes ``--input`` only); with ``stores_files`` a message that is a local path, or
    ``--file``, is stored (a PDF too) and only its reference sent; ``schema_field`` takes
    ``--schema``, and ``schemas`` holds the JSON Schema of each name it may take (the inbox's
    correction form follows the one a run's request names)."""

    message_field: str | None = None
    stores_files: bool = False
    schema_field: str | None = None
    schemas: Mapping[str, JsonSchemaSource] = field(default_factory=dict)


class JsonSchemaSource(Protocol):
    """Something that gives the JSON Schema of the fields a review corrects."""

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema."""
        ...


@dataclass(frozen=True, eq=False)
class Pipeline(Generic[RequestT, StateT]):
    """One pipeline the engine runs; its workflow type is its graph's name.

    ``handlers``: one per working state of ``graph``. ``result``: the run's result once it ends
    (completed, failed or dead-lettered), a ``result_model``. ``review_view``: what a reviewer
    sees of a run waiting for review (the ``review_view`` query; the inbox asks it).
    ``compensate``: undo the run's side effects on cancel; returns the history entry's detail.
    ``in_task``: True when the current state's work finishes inside the workflow task (a local
    activity), so visibility need not show it. ``first_shown``: the state a new run of a request
    will first rest in (a starter sets it as the run's initial ``AiState``, for free; default:
    the state the start leads to). ``name``: the short name operators type (``--pipeline``).
    ``version``: which version of a pipeline defined as data a run follows (``status`` and
    ``AiPipelineVersion`` show it); None for a pipeline defined in code. ``subject``: the
    result a review decides (``ReviewSubject``), and ``facts`` the names of the facts it gives
    (``fields.*``: any name under ``fields.``). ``shape``: how the CLI fills its request.
    ``activities``: where the worker finds the factory of the pipeline's activities, as
    ``module:function`` (a function of the worker's shared clients, ``activities.wiring``);
    a string, so workflow code never imports an activity. None: the engine's activities do.
    """

    name: str
    graph: Graph
    request: type[RequestT]
    state: type[StateT]
    handlers: Mapping[str, Handler[RequestT, StateT]]
    result_model: type[RunResult]
    result: Callable[[Context[RequestT, StateT]], RunResult]
    review_view: Callable[[Context[RequestT, StateT]], ReviewContent]
    compensate: Callable[[Context[RequestT, StateT]], Awaitable[str]] = nothing_to_undo
    in_task: Callable[[Context[RequestT, StateT]], bool] = never_in_task
    first_shown: Callable[[RequestT], str] | None = None
    version: str | None = None
    subject: Callable[[Context[RequestT, StateT]], ReviewSubject] = no_subject
    facts: tuple[str, ...] = ()
    shape: RequestShape = RequestShape()
    activities: str | None = None
    continued: type[BaseModel] = field(init=False)

    def __post_init__(self) -> None:
        working = self.graph.working_states
        missing = sorted(working - set(self.handlers))
        extra = sorted(set(self.handlers) - working)
        if missing or extra:
            problems = [f"no handler for {name}" for name in missing]
            problems += [f"{name} is not a working state of the graph" for name in extra]
            raise GraphError(f"pipeline {self.graph.name!r}: " + "; ".join(problems))
        object.__setattr__(self, "continued", ContinuedRun[self.request, self.state])  # type: ignore[name-defined]

    @property
    def workflow_type(self) -> str:
        """The Temporal workflow type its runs are started with."""
        return self.graph.name

    def knows_fact(self, name: str) -> bool:
        """Whether ``name`` is a fact this pipeline's results have (an engine fact, one of
        ``facts``, or a name under a ``prefix.*`` entry)."""
        known = (*ENGINE_FACTS, *self.facts)
        return name in known or any(
            entry.endswith(".*") and name.startswith(entry[:-1]) for entry in known
        )

    def first_state(self, request: RequestT) -> str:
        """The state a new run of ``request`` will first rest in (see ``first_shown``)."""
        if self.first_shown is not None:
            return self.first_shown(request)
        return self.graph.next_state(self.graph.initial, Event.START)


class PipelineSource(Protocol):
    """Pipelines found when a run starts rather than when the worker's code is imported
    (pipelines defined as data, ``workflows.data``): the engine asks a source for a run whose
    workflow type none of its registered pipelines has."""

    def serves(self, workflow_type: str) -> bool:
        """Whether a run of ``workflow_type`` may be one of this source's. Decided from the
        name alone (no I/O), so every replay decides alike."""
        ...

    async def resolve(self, workflow_type: str, raw: Any) -> Pipeline[Any, Any]:
        """The pipeline this run follows, from its decoded start input ``raw``. What it reads
        from outside the workflow (the pipeline's definition) it reads through a command, so
        history records it and a replay never depends on today's definition.

        Raises:
            errors.InvalidRequest: this run has no such pipeline, or its input does not fit.
        """
        ...
