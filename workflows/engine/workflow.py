"""The engine's workflow: one dynamic workflow that walks the graph of whichever registered
pipeline a run was started as (its workflow type).

The workflow never decides a transition on its own: each state's handler does that state's work
and reports an event, and the pipeline's graph says where that event leads and refuses what it
does not allow. The pipeline's handlers do its working states; the engine does the rest
(``Role``): the start, review waits and escalation (``workflows.engine.reviews``), retries with
backoff, capacity and batch waits (``workflows.engine.waits``), budget waits
(``workflows.engine.budgets``), compensation on cancel, and continue-as-new
(``workflows.engine.continuation``), with every move recorded and shown
(``workflows.engine.record``). Reviews and budget decisions arrive through decision inboxes
judged by rule objects (``review_rules.ReviewRules``, ``budgets.BudgetRules``), operator
actions through ``workflows.engine.operator_signals``.

Everything a client sends arrives undecoded (``RawValue``) and is decoded by
``workflows.engine.inbound``: a bad start fails the run at once, a bad review is refused or
counted. Signals and updates go to one dynamic handler each, which the SDK hands the arguments
raw, however many the client sent: a named handler it would call with all of them, and any
number but the one it takes would fail the workflow task on every retry (a stuck run, which
anyone who can signal could cause).

A worker registers one subclass, naming its pipelines in ``pipelines`` (the SDK wants the run
method defined on the registered class itself, so the subclass defines ``run`` as
``return await self.walk()``), and in ``sources`` where pipelines defined as data are found: a
run of a workflow type no registered pipeline has asks them, once it starts.

Deterministic code only: time, randomness and I/O come from ``workflow.*`` or activities.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
import workflows.engine.budgets as budgets
import workflows.engine.commands as commands
import workflows.engine.continuation as continuation
import workflows.engine.forks as forks
import workflows.engine.record as record
import workflows.engine.review_rules as review_rules
import workflows.engine.reviews as reviews
import workflows.engine.waits as waits
import workflows.errors as errors
from workflows.engine.budgets import BudgetRules
from workflows.engine.graph import COMPLETED, Event, Role
from workflows.engine.inbound import Admission, DecisionInbox, decoded
from workflows.engine.operator_signals import OperatorSignals
from workflows.engine.pipeline import Context, Pipeline, PipelineSource
from workflows.payloads import (
    BudgetDecision,
    ContinuationVerdict,
    RequestBase,
    ReviewDecision,
    ReviewView,
    RunResult,
    RunStatus,
    describe_validation_error,
    printable,
)

Handler = Callable[[Context[Any, Any]], Awaitable[None]]


class PipelineWorkflow:
    """Walks a registered pipeline's graph for one request, from start to a terminal state."""

    pipelines: ClassVar[Sequence[Pipeline[Any, Any]]] = ()
    # Where runs of any other workflow type may find their pipeline (pipelines as data).
    sources: ClassVar[Sequence[PipelineSource]] = ()

    @workflow.init
    def __init__(self, raw_inputs: Sequence[RawValue]) -> None:
        info = workflow.info()
        self._pipeline = next(
            (p for p in self.pipelines if p.workflow_type == info.workflow_type), None
        )
        self._ctx: Context[Any, Any] | None = None
        # A continued run's state, installed only once verify_continuation vouches for it.
        self._carried: Any = None
        self._input_problem: str | None = None
        # Signals and updates wait for the run's state (see _admit); reviews and budget
        # decisions come by signal or update, each under one set of rules.
        self._admission = Admission()
        self._reviews = DecisionInbox(
            ReviewDecision,
            self._admission,
            review_rules.ReviewRules(self._started),
            screen=review_rules.content_refusal,
        )
        self._budgets = DecisionInbox(BudgetDecision, self._admission, BudgetRules(self._started))
        self._operator = OperatorSignals(self._admission, self._started)
        self._rounds_this_run = 0
        self._after_reedit = False
        self._published: str | None = None
        # A run of a pipeline defined as data: its source resolves it once the run starts.
        self._source: PipelineSource | None = None
        self._raw: Any = None
        pipeline = self._pipeline
        if pipeline is None:
            self._source = next((s for s in self.sources if s.serves(info.workflow_type)), None)
            if self._source is None:
                known = ", ".join(p.workflow_type for p in self.pipelines)
                started = printable(info.workflow_type)
                self._input_problem = f"invalid request: this worker runs {known}, not {started}"
                return
        try:
            raw = self._start_input(decoded(raw_inputs))
        except errors.InvalidRequest as err:
            self._input_problem = f"invalid request: {err}"
            return
        if pipeline is None:
            self._raw = raw
            return
        self._take_input(pipeline, raw)

    def _start_input(self, raw: Any) -> Any:
        """The request (or continued run) a decoded start input holds; a lab fork's is refused
        (``workflows.engine.lab`` takes it, on the lab's task queue only)."""
        if forks.is_fork_input(raw):
            raise errors.InvalidRequest("a lab fork's input runs on the lab's task queue only")
        return raw

    def _take_input(self, pipeline: Pipeline[Any, Any], raw: Any) -> None:
        """Install ``pipeline`` and the run's decoded start input ``raw``, or record why the run
        may not start."""
        info = workflow.info()
        self._pipeline = pipeline
        graph = pipeline.graph
        # What visibility holds: the AiState the run was started with (a starter sets the
        # state it will first rest in, for free), or a continued run's own (see _admit).
        self._published = record.published_at_start(graph)
        try:
            request, self._carried = continuation.parse_input(
                raw, graph, pipeline.request, pipeline.continued
            )
        except errors.InvalidRequest as err:
            self._input_problem = f"invalid request: {err}"
            return
        except ValidationError as err:
            self._input_problem = f"invalid request: {describe_validation_error(err)}"
            return
        self._ctx = Context(graph, request, pipeline.state(state=graph.initial), pipeline)
        self._input_problem = continuation.start_problem(
            pipeline=graph.name,
            carried=self._carried is not None,
            continued_run_id=info.continued_run_id,
            cron_schedule=info.cron_schedule,
            has_retry_policy=info.retry_policy is not None,
            attempt=info.attempt,
        )

    @workflow.dynamic_config
    def _config(self) -> workflow.DynamicWorkflowConfig:
        # A graph violation is a bug in this workflow; fail the run loudly instead of retrying
        # the workflow task forever.
        return workflow.DynamicWorkflowConfig(failure_exception_types=[errors.InvalidTransition])

    async def walk(self) -> RunResult:
        """The run: admit it, walk its graph to a terminal state, return its result."""
        ctx = await self._admit()
        pipeline, graph, run = self._require_pipeline(), ctx.graph, ctx.run
        try:
            while not graph.is_terminal(run.state):
                # A batched call's outcome is taken up by its step within this task.
                if not pipeline.in_task(ctx) and run.batch_result is None:
                    self._publish()
                await self._continue_as_new_if_due()
                self._after_reedit = False
                await self._handler(run.state)(ctx)
        except (asyncio.CancelledError, ActivityError) as err:
            # Any ActivityError that is not this run's cancel is a bug: let it fail the task.
            if isinstance(err, ActivityError) and not activity_policy.cancelled(err):
                raise
            detail = await pipeline.compensate(ctx)
            ctx.move(Event.CANCEL, detail=detail)
            self._publish()
            raise
        self._publish()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if run.state == COMPLETED:
            reviews.finished(ctx)
        return record.finish(run, pipeline.result(ctx))

    # Queries, signals and updates: the contract's names.

    @workflow.query(name=contract.QUERY_STATE)
    def state(self) -> str:
        return self._ctx.run.state if self._ctx is not None else "idle"

    @workflow.query(name=contract.QUERY_STATUS)
    def status(self) -> RunStatus:
        if self._ctx is None:
            return RunStatus(state="idle", status="Pending", progress=0)
        version = self._pipeline.version if self._pipeline is not None else None
        return record.status(self._ctx.graph, self._ctx.run, version=version)

    @workflow.query(name=contract.QUERY_REVIEW_VIEW)
    def review_view(self) -> ReviewView:
        if self._ctx is None or not self._admission.admitted:
            return ReviewView(
                pipeline=workflow.info().workflow_type, state="idle", status="Pending"
            )
        return record.review_view(
            self._ctx.graph, self._ctx.run, self._require_pipeline().review_view(self._ctx)
        )

    @workflow.signal(dynamic=True, description=", ".join(contract.SIGNALS))
    def _signal(self, name: str, args: Sequence[RawValue]) -> None:
        match name:
            case contract.SIGNAL_REVIEW:
                self._reviews.signal(args)
            case contract.SIGNAL_BUDGET_DECISION:
                self._budgets.signal(args)
            case contract.SIGNAL_EXPIRE_REVIEW:
                self._operator.expire_review(args)
            case contract.SIGNAL_DEAD_LETTER:
                self._operator.dead_letter(args)
            case contract.SIGNAL_REVOKE:
                self._operator.revoke(args)
            case _:
                # Not the contract's: ignored (the name is the sender's text, kept out of logs;
                # the history shows it).
                pass

    @workflow.update(dynamic=True, description=", ".join(contract.UPDATES))
    async def _update(self, name: str, args: Sequence[RawValue]) -> RunStatus:
        """A review or budget decision (validated first): answers with the run's status once
        the decision is applied."""
        await self._inbox(name).submit(args)
        return self.status()

    @_update.validator
    def _validate_update(self, name: str, args: Sequence[RawValue]) -> None:
        self._inbox(name).validate(args)

    def _inbox(self, update: str) -> DecisionInbox[Any, Any]:
        """The inbox an update's decision goes to.

        Raises:
            ValueError: the contract has no update of that name (the update is rejected).
        """
        if update == contract.UPDATE_SUBMIT_REVIEW:
            return self._reviews
        if update == contract.UPDATE_DECIDE_BUDGET:
            return self._budgets
        raise ValueError(f"no update named {printable(update)!r}")

    # The engine's states.

    def _handler(self, state: str) -> Handler:
        role = self._context().graph.info(state).role
        if role == Role.WORK:
            return self._require_pipeline().handlers[state]
        engine: dict[Role, Handler] = {
            Role.START: self._start,
            Role.REVIEW: self._await_review,
            Role.ESCALATION: self._escalate,
            Role.RETRY: waits.retry,
            Role.CAPACITY: waits.await_capacity,
            Role.BUDGET: self._await_budget,
            Role.BATCH: waits.await_batch,
        }
        return engine[role]

    async def _start(self, ctx: Context[Any, Any]) -> None:
        # The run's start time, not the task's: the first task's time is not stable across
        # replays when the server splits it around a local activity in it.
        ctx.move(Event.START, at=workflow.info().workflow_start_time)

    async def _await_budget(self, ctx: Context[Any, Any]) -> None:
        await budgets.wait_for_decision(ctx, self._budgets)

    async def _await_review(self, ctx: Context[Any, Any]) -> None:
        if not await self._reviewed(ctx, "review timeout"):
            reviews.escalate(ctx)

    async def _escalate(self, ctx: Context[Any, Any]) -> None:
        if not await self._reviewed(ctx, "escalation timeout"):
            await reviews.escalation_timed_out(ctx)

    # Helpers.

    async def _admit(self) -> Context[Any, Any]:
        """Fail the run on a bad start; install a continued run's state once it is vouched for.

        Raises:
            ApplicationError: ``InvalidRequest`` (non-retryable): the run fails at once.
        """
        vouched = False
        if self._input_problem is None and self._source is not None and self._ctx is None:
            vouched = await self._resolve(self._source)
        if self._input_problem is None and self._carried is not None:
            verdict = (
                ContinuationVerdict(accepted=True)
                if vouched
                else await commands.verify_continuation()
            )
            if verdict.accepted:
                assert self._ctx is not None
                self._ctx.run, self._published = self._carried, self._carried.state
            else:
                self._input_problem = f"carried state refused: {verdict.reason}"
        if self._input_problem is None and self._ctx is not None:
            self._input_problem = continuation.id_problem(
                workflow.info().workflow_id, self._ctx.request.request_id
            )
        if self._input_problem is not None or self._ctx is None:
            # What was held is judged against the blank state, so no update waits on a run
            # that will not start.
            self._admission.admit()
            problem = self._input_problem or "invalid request"
            raise ApplicationError(problem, type=errors.INVALID_REQUEST, non_retryable=True)
        if self._carried is None:
            self._ctx.run.started_at = workflow.info().workflow_start_time
        self._admission.admit()
        return self._ctx

    async def _resolve(self, source: PipelineSource) -> bool:
        """Find the pipeline of a source's run (its commands are recorded), then take the
        run's input as a registered pipeline's run takes it in ``__init__``. A continued run
        carries its pipeline too: it is vouched for first, so nothing a forged continuation
        carries is even read. Returns whether it was vouched for."""
        continued = continuation.carries_state(self._raw)
        if continued:
            verdict = await commands.verify_continuation()
            if not verdict.accepted:
                self._input_problem = f"carried state refused: {verdict.reason}"
                return False
        try:
            pipeline = await source.resolve(workflow.info().workflow_type, self._raw)
        except errors.InvalidRequest as err:
            self._input_problem = f"invalid request: {err}"
            return False
        self._take_input(pipeline, self._raw)
        return continued

    def _publish(self) -> None:
        ctx = self._context()
        self._published = record.publish_state(
            ctx.graph, ctx.run, self._published, version=self._require_pipeline().version
        )

    def _context(self) -> Context[Any, Any]:
        if self._ctx is None:
            raise errors.InvalidTransition("idle", "(no request)", "input not admitted")
        return self._ctx

    def _require_pipeline(self) -> Pipeline[Any, Any]:
        if self._pipeline is None:
            raise errors.InvalidTransition("idle", "(no pipeline)", "input not admitted")
        return self._pipeline

    def _started(self) -> Context[Any, Any] | None:
        """The run the decision rules judge against; None for a run that never started (its
        input was refused): what was held for it is refused, and counted nowhere."""
        return self._ctx

    async def _reviewed(self, ctx: Context[Any, Any], summary: str) -> bool:
        """Wait for a review (``summary``: the wait's Web UI line): True once one came and was
        applied, False when the wait timed out or an operator ended it."""
        decision = await reviews.wait_for_decision(
            ctx.run, lambda: self._reviews.pending, summary, self._hand_over
        )
        if decision is None:
            return False
        if decision.decision == "reedit":
            self._rounds_this_run += 1
            self._after_reedit = True
        self._reviews.take()  # wakes the update that sent it, if one did
        reviews.apply(ctx, decision)
        return True

    async def _continue_as_new_if_due(self) -> None:
        """After a reedit, before the step it leads to: hand a long loop to a fresh run."""
        run = self._context().run
        if not self._after_reedit or run.plan is None:
            return
        if continuation.due(
            rounds=self._rounds_this_run, rounds_per_run=run.plan.reedit_rounds_per_run
        ):
            await self._hand_over(f"after {self._rounds_this_run} review rounds")

    async def _hand_over(self, when: str) -> NoReturn:
        ctx = self._context()
        request: RequestBase = ctx.request
        await continuation.hand_over(ctx.run, request, self._require_pipeline().continued, when)
