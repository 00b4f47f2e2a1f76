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
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import NoReturn

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
    import workflows.observability as observability
    import workflows.review_desk as review_desk
    import workflows.run_record as run_record
    import workflows.steps as steps
    from workflows.backoff import full_jitter_delay
    from workflows.graph import Event, State, is_terminal
    from workflows.inbound import NO_ARGUMENT, decoded, inbound
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
    )


@workflow.defn(
    name=contract.WORKFLOW_TYPE,
    # A graph violation is a bug in this workflow; fail the run loudly instead of retrying the
    # workflow task forever.
    failure_exception_types=[errors.InvalidTransition],
)
class AiOrchestrator:
    """Runs one request through fetch -> LLM -> (review) -> embed, with retries and escalation."""

    @workflow.init
    def __init__(self, raw_input: RawValue) -> None:
        self._run = RunState()
        self._request: PipelineRequest | None = None
        # A continued run's state, installed only once verify_continuation vouches for it.
        self._carried: RunState | None = None
        self._input_problem: str | None = None
        self._pending_review: ReviewDecision | None = None
        self._reviews_applied = 0
        self._pending_budget: BudgetDecision | None = None
        self._budget_decisions = 0
        self._rounds_this_run = 0
        self._after_reedit = False
        # What visibility holds: the AiState the run was started with (a starter sets the
        # state it will first rest in, for free), or a continued run's own (see _admit).
        self._published = run_record.published_at_start()
        try:
            self._request, self._carried = continuation.parse_input(decoded(raw_input))
        except errors.InvalidRequest as err:
            self._input_problem = f"invalid request: {err}"
            return
        except ValidationError as err:
            self._input_problem = f"invalid request: {describe_validation_error(err)}"
            return
        info = workflow.info()
        self._input_problem = continuation.start_problem(
            carried=self._carried is not None,
            continued_run_id=info.continued_run_id,
            cron_schedule=info.cron_schedule,
            has_retry_policy=info.retry_policy is not None,
            attempt=info.attempt,
        )

    @workflow.run
    async def run(self, raw_input: RawValue) -> PipelineResult:
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

    # Queries, the review signal and update, operator signals: the contract's names.

    @workflow.query(name=contract.QUERY_STATE)
    def state(self) -> str:
        return self._run.state.value

    @workflow.query(name=contract.QUERY_STATUS)
    def status(self) -> RunStatus:
        return run_record.status(self._run)

    @workflow.signal(name=contract.SIGNAL_REVIEW)
    def review(self, raw_decision: RawValue) -> None:
        # A signal cannot be refused: one the rules refuse is counted and not acted on.
        try:
            decision = inbound(raw_decision, ReviewDecision)
        except errors.InvalidRequest as err:
            self._count_refusal(review_desk.invalid(str(err)))
            return
        refused = self._refusal(decision)
        if refused is not None:
            self._count_refusal(refused)
            return
        self._pending_review = decision

    @workflow.update(name=contract.UPDATE_SUBMIT_REVIEW)
    async def submit_review(self, raw_decision: RawValue) -> RunStatus:
        decision = inbound(raw_decision, ReviewDecision)
        applied_before = self._reviews_applied
        self._pending_review = decision
        await workflow.wait_condition(lambda: self._reviews_applied > applied_before)
        return run_record.status(self._run)

    @submit_review.validator
    def _validate_review(self, raw_decision: RawValue) -> None:
        try:
            decision = inbound(raw_decision, ReviewDecision)
        except errors.InvalidRequest as err:
            raise ValueError(f"invalid review: {err}") from None
        refused = self._refusal(decision)
        if refused is not None:
            raise ValueError(refused.reason)

    @workflow.signal(name=contract.SIGNAL_BUDGET_DECISION)
    def budget_decision(self, raw_decision: RawValue) -> None:
        # A signal cannot be refused: one the rules refuse is counted and not acted on.
        try:
            decision = inbound(raw_decision, BudgetDecision)
        except errors.InvalidRequest as err:
            budget_desk.count_refusal(self._run, f"invalid budget decision: {err}")
            return
        refused = budget_desk.refusal(self._run, self._pending_budget)
        if refused is not None:
            budget_desk.count_refusal(self._run, refused)
            return
        self._pending_budget = decision

    @workflow.update(name=contract.UPDATE_DECIDE_BUDGET)
    async def decide_budget(self, raw_decision: RawValue) -> RunStatus:
        decision = inbound(raw_decision, BudgetDecision)
        decided_before = self._budget_decisions
        self._pending_budget = decision
        await workflow.wait_condition(lambda: self._budget_decisions > decided_before)
        return run_record.status(self._run)

    @decide_budget.validator
    def _validate_budget_decision(self, raw_decision: RawValue) -> None:
        try:
            inbound(raw_decision, BudgetDecision)
        except errors.InvalidRequest as err:
            raise ValueError(f"invalid budget decision: {err}") from None
        refused = budget_desk.refusal(self._run, self._pending_budget)
        if refused is not None:
            raise ValueError(refused)

    @workflow.signal(name=contract.SIGNAL_EXPIRE_REVIEW)
    def expire_review(self, raw_request: RawValue = NO_ARGUMENT) -> None:
        """Operator action: end the current review wait now, exactly as its timeout would."""
        reason = self._operator_reason(raw_request, "review timeout forced")
        if reason:
            self._run.forced_timeout = reason

    @workflow.signal(name=contract.SIGNAL_DEAD_LETTER)
    def request_dead_letter(self, raw_request: RawValue = NO_ARGUMENT) -> None:
        """Operator action: time out every review wait now, so the run takes its normal
        escalate -> dead_letter path (and sends its dead-letter message)."""
        reason = self._operator_reason(raw_request, "dead-lettered")
        if reason:
            self._run.dead_letter_requested = reason

    # State handlers: each does its state's work and reports one event.

    async def _start(self) -> None:
        # The run's start time, not the task's: the first task's time is not stable across
        # replays when the server splits it around the local fetch (see _fetch_prompt).
        run_record.move(self._run, Event.START, at=workflow.info().workflow_start_time)

    async def _fetch_prompt(self) -> None:
        request = self._require_request()
        local = self._fetches_locally()
        # Workflow time around a local activity is not stable: right after it, and in the task
        # it runs in, when the worker completed that task early and finished the fetch in the
        # next, the first execution and a replay (a query's) see different times. A local fetch
        # is part of starting the run, so its moves carry the run's start time; a fetch
        # activity's carry the time of the task that got its result.
        at = self._run.state_since if local else None
        try:
            plan = await steps.fetch_plan(request, local=local)
        except (ActivityError, ApplicationError) as err:
            # A local activity's failure arrives as the ApplicationError itself, not wrapped.
            if isinstance(err, ActivityError) and activity_policy.cancelled(err):
                raise
            detail = run_record.set_error(self._run, activity_policy.error_text(err))
            run_record.move(self._run, Event.PERMANENT_ERROR, detail=detail, at=at)
            return
        self._run.plan = plan
        run_record.move(self._run, Event.PROMPT_READY, at=at)

    async def _invoke_llm(self) -> None:
        run, plan = self._run, self._require_plan()
        self._after_reedit = False
        # An attempt counts once a call is made: waiting for capacity or a budget spends none.
        attempt = run.attempts + 1
        try:
            reply = await steps.call_llm(run, plan, attempt)
        except ActivityError as err:
            run.attempts = attempt
            if activity_policy.cancelled(err):
                raise
            detail = run_record.set_error(run, activity_policy.error_text(err))
            delay = activity_policy.retry_after(err)
            run.retry_after_s = delay.total_seconds() if delay else None
            run.corrective_next = (
                isinstance(err.cause, ApplicationError)
                and err.cause.type == errors.LLM_MALFORMED_REPLY
            )
            if activity_policy.is_permanent(err):
                run_record.move(run, Event.PERMANENT_ERROR, detail=detail)
            else:
                run.consecutive_failures += 1
                run_record.move(run, Event.RETRYABLE_ERROR, detail=detail)
            return
        if reply.outcome == "wait":
            run.capacity_wait_s = reply.wait_s or 0.0
            run_record.move(
                run,
                Event.CAPACITY_WAIT,
                detail=f"no capacity on {reply.model} for {run.capacity_wait_s:.2f}s",
            )
            return
        if reply.outcome == "over_budget":
            await self._over_budget(reply.budget or "a budget")
            return
        run.attempts = attempt
        run.cost_usd += reply.cost_usd or 0.0
        run.reply = reply
        run.model = reply.model
        run.consecutive_failures = 0
        run.corrective_next = False
        if plan.review == "always" or (plan.review == "auto" and reply.needs_review):
            run.review_round += 1
            run.review_deadline = workflow.now() + timedelta(seconds=plan.review_timeout_s)
            run_record.move(
                run,
                Event.NEEDS_REVIEW,
                detail=f"answered by {reply.model}",
                review_round=run.review_round,
            )
            steps.notify_reviewers(run, plan, "review_needed")
        else:
            run_record.move(run, Event.LLM_OK, detail=f"answered by {reply.model}")

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
        """The next call would cross ``budget``: wait for an operator, or dead-letter the run
        (to be redriven once the budget allows), as the plan's policy says."""
        run, plan = self._run, self._require_plan()
        detail = run_record.set_error(run, f"{errors.BUDGET_EXCEEDED}: {budget}")
        if plan.budget_policy == "wait":
            run.budget_deadline = workflow.now() + timedelta(seconds=plan.budget_timeout_s)
            run_record.move(run, Event.OVER_BUDGET, detail=detail)
            return
        refused = await self._dead_letter(failed_state=State.INVOKE_LLM)
        run_record.move(run, Event.BUDGET_EXCEEDED, detail=detail + refused)

    async def _await_budget(self) -> None:
        """Wait for an operator's budget decision until the plan's timeout (then dead-letter)."""
        run, plan = self._run, self._require_plan()
        remaining = (run.budget_deadline or workflow.now()) - workflow.now()
        if remaining > timedelta(0):
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._pending_budget is not None,
                    timeout=remaining,
                    timeout_summary="budget decision timeout",
                )
        decision, self._pending_budget = self._pending_budget, None
        if decision is not None:
            budget_desk.apply(run, decision)
            self._budget_decisions += 1
            return
        run.budget_deadline = None
        detail = run_record.set_error(
            run,
            f"{errors.BUDGET_EXCEEDED}: no budget decision in {plan.budget_timeout_s:g}s",
        )
        refused = await self._dead_letter(failed_state=State.AWAIT_BUDGET)
        run_record.move(run, Event.BUDGET_TIMEOUT, detail=detail + refused)

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
        run, plan = self._run, self._require_plan()
        decision = await self._wait_for_review("review timeout")
        if decision is not None:
            self._apply_review(decision)
            return
        detail = review_desk.take_forced_reason(run) or f"no review in {plan.review_timeout_s:g}s"
        run.review_deadline = workflow.now() + timedelta(seconds=plan.escalation_timeout_s)
        run_record.move(run, Event.REVIEW_TIMEOUT, detail=detail)
        if run.dead_letter_requested is None:  # an operator's dead-letter is no news to reviewers
            steps.notify_reviewers(run, plan, "escalated")

    async def _escalate(self) -> None:
        run, plan = self._run, self._require_plan()
        decision = await self._wait_for_review("escalation timeout")
        if decision is not None:
            self._apply_review(decision)
            return
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
            problem = self._input_problem or "invalid request"
            raise ApplicationError(problem, type=errors.INVALID_REQUEST, non_retryable=True)
        if self._carried is None:
            self._run.started_at = workflow.info().workflow_start_time
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

    def _refusal(self, decision: ReviewDecision) -> review_desk.Refusal | None:
        return review_desk.refusal(
            self._run,
            decision,
            workflow_id=workflow.info().workflow_id,
            pending=self._pending_review,
            now=workflow.now(),
        )

    def _count_refusal(self, refused: review_desk.Refusal) -> None:
        review_desk.count_refusal(self._run, refused)
        observability.count_refused_review(refused.code)

    def _operator_reason(self, raw_request: RawValue, action: str) -> str | None:
        # Signals cannot be refused: an invalid or untimely one is dropped (state unchanged).
        try:
            request = inbound(raw_request, OperatorRequest) if raw_request else OperatorRequest()
        except errors.InvalidRequest:
            return None
        return review_desk.operator_reason(self._run, request, action)

    async def _wait_for_review(self, summary: str) -> ReviewDecision | None:
        """The decision for this wait, or None when it timed out (or an operator ended it).

        A flood of signals cannot make the wait outlive Temporal's history limits: when the
        history grows large the run continues as new, and the new run resumes this wait with
        the same deadline.
        """
        run = self._run
        deadline = run.review_deadline or workflow.now()
        while True:
            remaining = deadline - workflow.now()
            if remaining <= timedelta(0):
                return None
            try:
                await workflow.wait_condition(
                    lambda: (
                        self._pending_review is not None
                        or run.forced_timeout is not None
                        or run.dead_letter_requested is not None
                        or self._history_is_large()
                    ),
                    timeout=remaining,
                    timeout_summary=summary,
                )
            except TimeoutError:
                return None
            decision = self._pending_review
            if decision is not None:
                run.forced_timeout = None  # a review that came with it wins
                return decision
            if run.forced_timeout is not None or run.dead_letter_requested is not None:
                return None
            await self._continue_as_new("while waiting for review")

    def _apply_review(self, decision: ReviewDecision) -> None:
        if decision.decision == "reedit":
            self._rounds_this_run += 1
            self._after_reedit = True
        self._pending_review = None
        self._reviews_applied += 1
        review_desk.apply(self._run, decision)

    def _history_is_large(self) -> bool:
        """Time to continue as new while waiting for review (and no update is in flight,
        which must finish on this run)."""
        return workflow.all_handlers_finished() and continuation.due()

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
        """Send the run's dead-letter message; returns a note for history when the queue
        refused it for good (the run still ends dead_letter: nothing retries forever)."""
        try:
            await steps.send_dead_letter(self._run, self._require_request(), failed_state)
        except ActivityError as err:
            if activity_policy.cancelled(err):
                raise
            return (
                f"; the dead-letter queue refused the message ({activity_policy.error_text(err)})"
            )
        return ""

    async def _compensate_cancel(self) -> None:
        run = self._run
        detail = "no side effects to undo"
        if run.state in (State.GENERATE_EMBEDDING, State.COMPLETED) or run.embedding_id:
            deleted = await steps.delete_embedding()
            detail = f"compensation: deleted {deleted} vector(s)"
        run_record.move(run, Event.CANCEL, detail=detail)
