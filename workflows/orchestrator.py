"""AiOrchestrator: the workflow that walks the state graph.

The workflow never decides a transition on its own: each state's handler does that state's work
(usually one activity) and reports an event; ``workflows.graph`` says where that event leads and
refuses what the graph does not allow. The run's whole state is one ``RunState``: moves are
recorded by ``workflows.run_record`` and reviews judged by ``workflows.review_desk``, both plain
functions over it, and continue-as-new carries it whole (``workflows.continuation``).

Everything a client sends arrives undecoded (``RawValue``) and is decoded by
``workflows.inbound``: a bad start fails the run at once, a bad review is refused or counted.

Deterministic code only: time, randomness and I/O come from ``workflow.*`` or activities.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Literal, NoReturn

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    # One `import` per module: `from workflows import x` bypasses the sandbox pass-through, so
    # x would be re-imported for every new run. Imports add no commands.
    import workflows.activity_policy as activity_policy
    import workflows.budget_desk as budget_desk
    import workflows.continuation as continuation
    import workflows.contract as contract
    import workflows.errors as errors
    import workflows.llm_outcome as llm_outcome
    import workflows.observability as observability
    import workflows.review_desk as review_desk
    import workflows.run_record as run_record
    import workflows.steps as steps
    from workflows.backoff import full_jitter_delay
    from workflows.graph import Event, State, is_terminal
    from workflows.inbound import Admission, DecisionInbox, decoded, inbound
    from workflows.payloads import (
        BudgetDecision,
        OperatorRequest,
        PipelineRequest,
        PipelineResult,
        PromptPlan,
        ReviewDecision,
        RunState,
        RunStatus,
        describe_validation_error,
        printable,
    )


@workflow.defn(dynamic=True)
class AiOrchestrator:
    """Runs one request through fetch -> LLM -> (review) -> embed, with retries and escalation.

    Dynamic, as its signal and update handlers are: the SDK hands a dynamic workflow its start's
    arguments raw, however many came, where a named one would fail the workflow task on every
    retry when they are not exactly as many as it takes (a stuck run). It runs the contract's
    workflow type only, and fails any other started on its task queue at once.
    """

    @workflow.init
    def __init__(self, raw_inputs: Sequence[RawValue]) -> None:
        self._run = RunState()
        self._request: PipelineRequest | None = None
        # A continued run's state, installed only once verify_continuation vouches for it.
        self._carried: RunState | None = None
        self._input_problem: str | None = None
        # Signals and updates wait for the run's state (see _admit); reviews and budget
        # decisions come by signal or update, each under one set of rules.
        self._admission = Admission()
        self._reviews = DecisionInbox(
            ReviewDecision,
            self._admission,
            refusal=self._refusal,
            invalid=review_desk.invalid,
            count=self._count_refusal,
            reason=lambda refused: refused.reason,
        )
        self._budgets = DecisionInbox(
            BudgetDecision,
            self._admission,
            refusal=lambda _, pending: budget_desk.refusal(self._run, pending),
            invalid=lambda problem: f"invalid budget decision: {problem}",
            count=lambda reason: budget_desk.count_refusal(self._run, reason),
            reason=str,
        )
        self._rounds_this_run = 0
        self._after_reedit = False
        # What visibility holds: the AiState the run was started with (a starter sets the
        # state it will first rest in, for free), or a continued run's own (see _admit).
        self._published = run_record.published_at_start()
        info = workflow.info()
        try:
            if info.workflow_type != contract.WORKFLOW_TYPE:
                started = printable(info.workflow_type)
                raise errors.InvalidRequest(
                    f"this worker runs {contract.WORKFLOW_TYPE}, not {started}"
                )
            self._request, self._carried = continuation.parse_input(decoded(raw_inputs))
        except errors.InvalidRequest as err:
            self._input_problem = f"invalid request: {err}"
            return
        except ValidationError as err:
            self._input_problem = f"invalid request: {describe_validation_error(err)}"
            return
        self._input_problem = continuation.start_problem(
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

    @workflow.run
    async def run(self, raw_inputs: Sequence[RawValue]) -> PipelineResult:
        request = await self._admit()
        handlers: dict[State, Callable[[], Awaitable[None]]] = {
            State.IDLE: self._start,
            State.FETCH_PROMPT: self._fetch_prompt,
            State.INVOKE_LLM: self._invoke_llm,
            State.AWAIT_CAPACITY: self._await_capacity,
            State.AWAIT_BUDGET: self._await_budget,
            State.RETRY_LLM: self._retry_llm,
            State.AWAIT_REVIEW: self._await_review,
            State.ESCALATE: self._escalate,
            State.GENERATE_EMBEDDING: self._generate_embedding,
        }
        try:
            while not is_terminal(self._run.state):
                if not self._fetches_locally():
                    self._publish()
                await self._continue_as_new_if_due()
                await handlers[self._run.state]()
        except (asyncio.CancelledError, ActivityError) as err:
            # Any ActivityError that is not this run's cancel is a bug: let it fail the task.
            if isinstance(err, ActivityError) and not activity_policy.cancelled(err):
                raise
            await self._compensate_cancel()
            self._publish()
            raise
        self._publish()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return run_record.finish(self._run, request)

    # Queries, signals and updates: the contract's names.

    @workflow.query(name=contract.QUERY_STATE)
    def state(self) -> str:
        return self._run.state.value

    @workflow.query(name=contract.QUERY_STATUS)
    def status(self) -> RunStatus:
        return run_record.status(self._run)

    # Signals and updates come to one dynamic handler each, which the SDK hands the arguments
    # raw, however many the client sent. A named handler it would call with all of them, and any
    # number but the one it takes would fail the workflow task on every retry: a stuck run, which
    # anyone who can signal could cause.

    @workflow.signal(dynamic=True, description=", ".join(contract.SIGNALS))
    def _signal(self, name: str, args: Sequence[RawValue]) -> None:
        match name:
            case contract.SIGNAL_REVIEW:
                self._reviews.signal(args)
            case contract.SIGNAL_BUDGET_DECISION:
                self._budgets.signal(args)
            case contract.SIGNAL_EXPIRE_REVIEW:
                # End the current review wait now, exactly as its timeout would.
                self._operator_action(args, "review timeout forced", "forced_timeout")
            case contract.SIGNAL_DEAD_LETTER:
                # Time out every review wait now, so the run takes its normal
                # escalate -> dead_letter path (and sends its dead-letter message).
                self._operator_action(args, "dead-lettered", "dead_letter_requested")
            case _:
                # Not the contract's: ignored (the name is the sender's text, kept out of logs;
                # the history shows it).
                pass

    @workflow.update(dynamic=True, description=", ".join(contract.UPDATES))
    async def _update(self, name: str, args: Sequence[RawValue]) -> RunStatus:
        """A review or budget decision (validated first): answers with the run's status once
        the decision is applied."""
        await self._inbox(name).submit(args)
        return run_record.status(self._run)

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

    # State handlers: each does its state's work and reports one event.

    async def _start(self) -> None:
        # The run's start time, not the task's: the first task's time is not stable across
        # replays when the server splits it around the local fetch (see _fetch_prompt).
        run_record.move(self._run, Event.START, at=workflow.info().workflow_start_time)

    async def _fetch_prompt(self) -> None:
        await steps.fetch_prompt(self._run, self._require_request(), local=self._fetches_locally())

    async def _invoke_llm(self) -> None:
        run, plan = self._run, self._require_plan()
        self._after_reedit = False
        attempt = run.attempts + 1
        try:
            reply = await steps.call_llm(run, plan, attempt)
        except ActivityError as err:
            if activity_policy.cancelled(err):
                run.attempts = attempt
                raise
            llm_outcome.failed(run, err, attempt)
            return
        if reply.outcome == "wait":
            llm_outcome.must_wait(run, reply)
        elif reply.outcome == "over_budget":
            await self._over_budget(reply.budget or "a budget")
        else:
            llm_outcome.answered(run, plan, reply, attempt)

    async def _await_capacity(self) -> None:
        """Wait on a timer (no call, no attempt, no activity slot) until the model's shared
        capacity should cover the call, then ask again from invoke_llm."""
        run = self._run
        delay = timedelta(seconds=run.capacity_wait_s or 0.0)
        await workflow.sleep(delay, summary=f"await_capacity {delay.total_seconds():.1f}s")
        run.capacity_wait_s = None
        run_record.move(
            run, Event.CAPACITY_READY, detail=f"waited {delay.total_seconds():.2f}s for capacity"
        )

    async def _over_budget(self, budget: str) -> None:
        await budget_desk.over_budget(
            self._run, self._require_plan(), self._require_request(), budget
        )

    async def _await_budget(self) -> None:
        """Wait for an operator's budget decision until the plan's timeout (then dead-letter)."""
        run = self._run
        remaining = (run.budget_deadline or workflow.now()) - workflow.now()
        if remaining > timedelta(0):
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._budgets.pending is not None,
                    timeout=remaining,
                    timeout_summary="budget decision timeout",
                )
        decision = self._budgets.take()
        if decision is not None:
            budget_desk.apply(run, decision)
            return
        await budget_desk.timed_out(run, self._require_plan(), self._require_request())

    async def _retry_llm(self) -> None:
        run, plan = self._run, self._require_plan()
        if run.consecutive_failures >= plan.llm_max_attempts:
            refused = await self._dead_letter(failed_state=State.INVOKE_LLM)
            detail = f"gave up after {run.attempts} attempts{refused}"
            run_record.move(run, Event.EXHAUSTED, detail=detail)
            return
        delay = full_jitter_delay(
            run.consecutive_failures,
            initial=timedelta(seconds=plan.backoff_initial_s),
            cap=timedelta(seconds=plan.backoff_max_s),
            unit_random=workflow.random().random(),
            at_least=timedelta(seconds=run.retry_after_s) if run.retry_after_s else None,
        )
        await workflow.sleep(delay, summary=f"retry_llm backoff {delay.total_seconds():.1f}s")
        run_record.move(run, Event.BACKOFF_ELAPSED, detail=f"waited {delay.total_seconds():.2f}s")

    async def _await_review(self) -> None:
        if await self._reviewed("review timeout"):
            return
        run, plan = self._run, self._require_plan()
        detail = review_desk.take_forced_reason(run) or f"no review in {plan.review_timeout_s:g}s"
        run.review_deadline = workflow.now() + timedelta(seconds=plan.escalation_timeout_s)
        run_record.move(run, Event.REVIEW_TIMEOUT, detail=detail)
        if run.dead_letter_requested is None:  # an operator's dead-letter is no news to reviewers
            steps.notify_reviewers(run, plan, "escalated")

    async def _escalate(self) -> None:
        if await self._reviewed("escalation timeout"):
            return
        run, plan = self._run, self._require_plan()
        reason = review_desk.take_forced_reason(run)
        detail = run_record.set_error(
            run, reason or f"no review after escalation ({plan.escalation_timeout_s:g}s)"
        )
        run.review_deadline = None
        refused = await self._dead_letter(failed_state=State.ESCALATE)
        run_record.move(run, Event.ESCALATION_TIMEOUT, detail=detail + refused)

    async def _generate_embedding(self) -> None:
        run, request = self._run, self._require_request()
        assert run.reply is not None
        try:
            result = await steps.embed(request, run.reply.content)
        except ActivityError as err:
            if activity_policy.cancelled(err):
                raise
            detail = run_record.set_error(run, activity_policy.error_text(err))
            refused = await self._dead_letter(failed_state=State.GENERATE_EMBEDDING)
            run_record.move(run, Event.EXHAUSTED, detail=detail + refused)
            return
        run.embedding_id = result.embedding_id
        if workflow.cancellation_reason() is not None:
            # The cancel came too late to stop the write: the compensation deletes the vector.
            raise asyncio.CancelledError
        run_record.move(run, Event.EMBEDDED, detail=f"embedding {result.embedding_id}")

    # Helpers.

    async def _admit(self) -> PipelineRequest:
        """Fail the run on a bad start; install a continued run's state once it is vouched for.

        Raises:
            ApplicationError: ``InvalidRequest`` (non-retryable): the run fails at once.
        """
        if self._input_problem is None and self._carried is not None:
            verdict = await steps.verify_continuation()
            if verdict.accepted:
                self._run, self._published = self._carried, self._carried.state
            else:
                self._input_problem = f"carried state refused: {verdict.reason}"
        if self._input_problem is not None or self._request is None:
            # What was held is judged against the blank state, so no update waits on a run
            # that will not start.
            self._admission.admit()
            problem = self._input_problem or "invalid request"
            raise ApplicationError(problem, type=errors.INVALID_REQUEST, non_retryable=True)
        if self._carried is None:
            self._run.started_at = workflow.info().workflow_start_time
        self._admission.admit()
        return self._request

    def _publish(self) -> None:
        self._published = run_record.publish_state(self._run, self._published)

    def _fetches_locally(self) -> bool:
        """Whether this run's fetch_prompt runs as a local activity, inside the current task:
        an inline message needs no I/O, a reference (file://, s3://) does."""
        return (
            self._run.state is State.FETCH_PROMPT
            and self._request is not None
            and not self._request.is_reference
        )

    def _require_request(self) -> PipelineRequest:
        if self._request is None:
            raise errors.InvalidTransition(self._run.state, "(no request)", "input not admitted")
        return self._request

    def _require_plan(self) -> PromptPlan:
        if self._run.plan is None:
            raise errors.InvalidTransition(self._run.state, "(no plan)", "fetch_prompt not run")
        return self._run.plan

    def _refusal(
        self, decision: ReviewDecision, pending: ReviewDecision | None
    ) -> review_desk.Refusal | None:
        return review_desk.refusal(
            self._run,
            decision,
            workflow_id=workflow.info().workflow_id,
            pending=pending,
            now=workflow.now(),
        )

    def _count_refusal(self, refused: review_desk.Refusal) -> None:
        review_desk.count_refusal(self._run, refused)
        observability.count_refused_review(refused.code)

    def _operator_action(
        self,
        args: Sequence[RawValue],
        action: str,
        field: Literal["forced_timeout", "dead_letter_requested"],
    ) -> None:
        """An operator signal: once the run is admitted, record its reason in ``field`` of the
        run's state. Signals cannot be refused: an invalid or untimely one (the run is not
        waiting for review) is dropped, the state unchanged."""
        if self._admission.defer(lambda: self._operator_action(args, action, field)):
            return
        request = OperatorRequest()
        if args:
            try:
                request = inbound(args, OperatorRequest)
            except errors.InvalidRequest:
                return
        reason = review_desk.operator_reason(self._run, request, action)
        if reason:
            setattr(self._run, field, reason)

    async def _reviewed(self, summary: str) -> bool:
        """Wait for a review (``summary``: the wait's Web UI line): True once one came and was
        applied, False when the wait timed out or an operator ended it."""
        decision = await review_desk.wait_for_decision(
            self._run, self._require_request(), lambda: self._reviews.pending, summary
        )
        if decision is None:
            return False
        if decision.decision == "reedit":
            self._rounds_this_run += 1
            self._after_reedit = True
        self._reviews.take()  # wakes the update that sent it, if one did
        review_desk.apply(self._run, decision)
        return True

    async def _continue_as_new_if_due(self) -> None:
        """After a reedit, before the next LLM call: hand a long loop to a fresh run."""
        plan = self._run.plan
        if self._run.state is not State.INVOKE_LLM or not self._after_reedit or plan is None:
            return
        if continuation.due(
            rounds=self._rounds_this_run, rounds_per_run=plan.reedit_rounds_per_run
        ):
            await self._continue_as_new(f"after {self._rounds_this_run} review rounds")

    async def _continue_as_new(self, when: str) -> NoReturn:
        await continuation.hand_over(self._run, self._require_request(), when)

    async def _dead_letter(self, failed_state: State) -> str:
        return await steps.dead_letter(self._run, self._require_request(), failed_state)

    async def _compensate_cancel(self) -> None:
        await steps.compensate_cancel(self._run)
