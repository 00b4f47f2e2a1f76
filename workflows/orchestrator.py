"""AiOrchestrator: the workflow that walks the state graph.

The workflow never decides a transition on its own: each state's handler does that state's work
(usually one activity) and reports an event; ``workflows.graph`` says where that event leads and
refuses what the graph does not allow. Every move appends a history entry and refreshes the Web
UI's current details; the ``AiState`` search attribute is published once per workflow task, with
the state the run has reached when the task ends (see ``_publish_state``), so the bookkeeping rides
on commands the task sends anyway and adds no visibility write nobody could observe.

Deterministic code only: time, randomness and I/O come from ``workflow.*`` or activities.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import CancelledError as ActivityCancelledError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    # One `import` per module: `from workflows import x` bypasses the sandbox pass-through, so
    # x would be re-imported (and recompiled) for every new run. Imports add no commands.
    import workflows.activity_policy as activity_policy
    import workflows.continuation as continuation
    import workflows.contract as contract
    import workflows.errors as errors
    import workflows.observability as observability
    import workflows.review_rules as review_rules
    from workflows.backoff import full_jitter_delay
    from workflows.graph import Event, State, is_terminal, progress_of, status_of
    from workflows.graph import next_state as graph_next_state
    from workflows.payloads import (
        NOTE_CONTINUED_AS_NEW,
        NOTE_REVIEW_REFUSED,
        CarriedState,
        ContinuedRun,
        DeadLetterInput,
        DeadLetterMessage,
        DeadLetterReceipt,
        EmbeddingInput,
        EmbeddingResult,
        HistoryEntry,
        LlmCallInput,
        LlmCallResult,
        OperatorRequest,
        PipelineRequest,
        PipelineResult,
        PromptInput,
        PromptPlan,
        ReviewDecision,
        RunStatus,
        describe_validation_error,
    )

AI_STATE = SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE)
AI_STATE_SINCE = SearchAttributeKey.for_datetime(contract.SEARCH_ATTRIBUTE_STATE_SINCE)

REVIEW_STATES = frozenset({State.AWAIT_REVIEW, State.ESCALATE})

# workflow.patched() ids of the cancellation fixes: runs recorded before them replay unchanged.
PATCH_CANCEL_IN_ACTIVITY = "cancel-in-activity-is-cancel"
PATCH_EMBEDDING_CANCEL_WAITS = "embedding-cancel-waits"
# Runs recorded before fetch_prompt ran as a local activity (for inline messages) replay it as
# a regular activity.
PATCH_LOCAL_FETCH = "fetch-prompt-local"


@workflow.defn(
    name=contract.WORKFLOW_TYPE,
    # A graph violation is a bug in this workflow; fail the run loudly instead of retrying the
    # workflow task forever.
    failure_exception_types=[errors.InvalidTransition],
)
class AiOrchestrator:
    """Runs one request through fetch -> LLM -> (review) -> embed, with retries and escalation."""

    @workflow.init
    def __init__(self, raw_request: Any) -> None:
        self._state = State.IDLE
        self._state_since: datetime | None = None
        self._history: list[HistoryEntry] = []
        self._attempts = 0
        self._consecutive_failures = 0
        self._corrective_next = False
        self._model: str | None = None
        self._last_error: str | None = None
        self._pending_review: ReviewDecision | None = None
        self._reviews_applied = 0
        self._feedback: list[str] = []
        self._request: PipelineRequest | None = None
        self._plan: PromptPlan | None = None
        self._reply: LlmCallResult | None = None
        self._embedding_id: str | None = None
        self._retry_after: timedelta | None = None
        self._review_round = 0
        self._rounds_this_run = 0
        self._history_dropped = 0
        self._input_problem: str | None = None
        # Operator actions (expire_review: one wait; dead_letter: every wait until dead_letter).
        self._forced_timeout: str | None = None
        self._dead_letter_requested: str | None = None
        self._restore(raw_request)
        # What visibility holds when this run starts: the starter's AiState=idle, or the
        # state a continued run inherits with its search attributes.
        self._published_state = self._state

    @workflow.run
    async def run(self, raw_request: Any) -> PipelineResult:
        request = self._parse_request(raw_request)
        self._request = request
        handlers: dict[State, Callable[[], Awaitable[None]]] = {
            State.IDLE: self._start,
            State.FETCH_PROMPT: self._fetch_prompt,
            State.INVOKE_LLM: self._invoke_llm,
            State.RETRY_LLM: self._retry_llm,
            State.AWAIT_REVIEW: self._await_review,
            State.ESCALATE: self._escalate,
            State.GENERATE_EMBEDDING: self._generate_embedding,
        }
        try:
            while not is_terminal(self._state):
                if not self._fetches_locally():
                    self._publish_state()
                await self._continue_as_new_if_due()
                await handlers[self._state]()
        except (asyncio.CancelledError, ActivityError) as err:
            # A cancel reaching an in-flight activity arrives as ActivityError, not
            # asyncio.CancelledError (see _cancelled); any other ActivityError here is a bug.
            if isinstance(err, ActivityError) and not self._cancelled(err):
                raise
            await self._compensate_cancel()
            self._publish_state()
            raise
        self._publish_state()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._result()

    # Queries, signal and update: the contract's names.

    @workflow.query(name=contract.QUERY_STATE)
    def state(self) -> str:
        return self._state.value

    @workflow.query(name=contract.QUERY_STATUS)
    def status(self) -> RunStatus:
        return RunStatus(
            state=self._state.value,
            status=status_of(self._state).value,
            progress=progress_of(self._state),
            attempts=self._attempts,
            model=self._model,
            last_error=self._last_error,
            history=list(self._history),
            review_round=self._review_round,
            history_dropped=self._history_dropped,
        )

    @workflow.signal(name=contract.SIGNAL_REVIEW)
    def review(self, raw_decision: Any) -> None:
        # A signal cannot be refused, so one the rules refuse (see workflows.review_rules) is
        # recorded as a review_refused note, with the state unchanged, and not acted on; callers
        # that need an answer use the submit_review update instead.
        try:
            decision = ReviewDecision.model_validate(raw_decision)
        except ValidationError as err:
            reviewer = raw_decision.get("reviewer") if isinstance(raw_decision, dict) else None
            self._refuse_signal(
                f"invalid review: {describe_validation_error(err)}",
                reviewer if isinstance(reviewer, str) else None,
            )
            return
        problem = self._review_refusal(decision)
        if problem:
            self._refuse_signal(problem, decision.reviewer)
            return
        self._pending_review = decision

    @workflow.signal(name=contract.SIGNAL_EXPIRE_REVIEW)
    def expire_review(self, raw_request: Any = None) -> None:
        """Operator action: end the current review wait now, exactly as its timeout would."""
        reason = self._operator_reason(raw_request, "review timeout forced")
        if reason:
            self._forced_timeout = reason

    @workflow.signal(name=contract.SIGNAL_DEAD_LETTER)
    def request_dead_letter(self, raw_request: Any = None) -> None:
        """Operator action: time out every review wait now, so the run takes its normal
        escalate -> dead_letter path (and sends its dead-letter message)."""
        reason = self._operator_reason(raw_request, "dead-lettered")
        if reason:
            self._dead_letter_requested = reason

    def _operator_reason(self, raw_request: Any, action: str) -> str | None:
        # Signals cannot be refused: an invalid or untimely one is logged and dropped.
        try:
            request = OperatorRequest.model_validate(raw_request or {})
        except ValidationError as err:
            workflow.logger.warning("ignored %s: %s", action, describe_validation_error(err))
            return None
        if self._state not in REVIEW_STATES:
            workflow.logger.warning(
                "ignored %s: run is not awaiting review (state: %s)", action, self._state.value
            )
            return None
        reason = f"{action} by {request.operator}"
        return f"{reason}: {request.reason}" if request.reason else reason

    def _take_forced_reason(self) -> str | None:
        reason = self._forced_timeout or self._dead_letter_requested
        self._forced_timeout = None
        return reason

    @workflow.update(name=contract.UPDATE_SUBMIT_REVIEW)
    async def submit_review(self, raw_decision: Any) -> RunStatus:
        decision = ReviewDecision.model_validate(raw_decision)
        applied_before = self._reviews_applied
        self._pending_review = decision
        await workflow.wait_condition(lambda: self._reviews_applied > applied_before)
        return self.status()

    @submit_review.validator
    def _validate_review(self, raw_decision: Any) -> None:
        try:
            decision = ReviewDecision.model_validate(raw_decision)
        except ValidationError as err:
            raise ValueError(f"invalid review: {describe_validation_error(err)}") from None
        problem = self._review_refusal(decision)
        if problem:
            raise ValueError(problem)

    # State handlers: each does its state's work and reports one event.

    async def _start(self) -> None:
        self._move(Event.START)

    async def _fetch_prompt(self) -> None:
        assert self._request is not None
        # Workflow time right after a local activity differs between the first execution and
        # a replay (a query's), so this state's moves carry the task's time, which does not.
        at = workflow.now()
        try:
            if self._fetches_locally():
                self._plan = await workflow.execute_local_activity(
                    contract.ACTIVITY_FETCH_PROMPT,
                    PromptInput(request=self._request),
                    result_type=PromptPlan,
                    start_to_close_timeout=activity_policy.LOCAL_FETCH_TIMEOUT,
                    retry_policy=activity_policy.FETCH_RETRY,
                    summary="fetch_prompt: build prompt (local)",
                )
            else:
                self._plan = await workflow.execute_activity(
                    contract.ACTIVITY_FETCH_PROMPT,
                    PromptInput(request=self._request),
                    result_type=PromptPlan,
                    start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=activity_policy.FETCH_RETRY,
                    summary="fetch_prompt: load input, build prompt",
                )
        except ActivityError as err:
            if self._cancelled(err):
                raise
            self._last_error = activity_policy.error_text(err)
            self._move(Event.PERMANENT_ERROR, detail=self._last_error, at=at)
            return
        self._move(Event.PROMPT_READY, at=at)

    async def _invoke_llm(self) -> None:
        plan = self._require_plan()
        self._attempts += 1
        model = self._choose_model(plan)
        call = LlmCallInput(
            workflow_id=workflow.info().workflow_id,
            system_prompt=plan.system_prompt,
            user_prompt=plan.user_prompt,
            input_ref=plan.input_ref,
            model=model,
            attempt=self._attempts,
            temperature=plan.temperature,
            feedback=list(self._feedback),
            corrective=self._corrective_next,
            max_reply_chars=plan.max_reply_chars,
        )
        try:
            reply = await workflow.execute_activity(
                contract.ACTIVITY_INVOKE_LLM,
                call,
                result_type=LlmCallResult,
                start_to_close_timeout=timedelta(seconds=plan.llm_timeout_s + 15),
                heartbeat_timeout=activity_policy.HEARTBEAT_TIMEOUT,
                retry_policy=activity_policy.SINGLE_ATTEMPT,
                summary=f"invoke_llm: attempt {self._attempts} on {model}",
            )
        except ActivityError as err:
            if self._cancelled(err):
                raise
            self._last_error = activity_policy.error_text(err)
            self._retry_after = activity_policy.retry_after(err)
            self._corrective_next = (
                isinstance(err.cause, ApplicationError)
                and err.cause.type == errors.LLM_MALFORMED_REPLY
            )
            if activity_policy.is_permanent(err):
                self._move(Event.PERMANENT_ERROR, detail=self._last_error)
            else:
                self._consecutive_failures += 1
                self._move(Event.RETRYABLE_ERROR, detail=self._last_error)
            return
        self._reply = reply
        self._model = reply.model
        self._consecutive_failures = 0
        self._corrective_next = False
        assert self._request is not None
        review = self._request.review
        if review == "always" or (review == "auto" and reply.needs_review):
            self._review_round += 1
            self._move(
                Event.NEEDS_REVIEW,
                detail=f"answered by {reply.model}",
                review_round=self._review_round,
            )
        else:
            self._move(Event.LLM_OK, detail=f"answered by {reply.model}")

    async def _retry_llm(self) -> None:
        plan = self._require_plan()
        if self._consecutive_failures >= plan.llm_max_attempts:
            await self._dead_letter(failed_state=State.INVOKE_LLM)
            self._move(Event.EXHAUSTED, detail=f"gave up after {self._attempts} attempts")
            return
        delay = full_jitter_delay(
            self._consecutive_failures,
            initial=timedelta(seconds=plan.backoff_initial_s),
            cap=timedelta(seconds=plan.backoff_max_s),
            unit_random=workflow.random().random(),
            at_least=self._retry_after,
        )
        await workflow.sleep(delay, summary=f"retry_llm backoff {delay.total_seconds():.1f}s")
        self._move(Event.BACKOFF_ELAPSED, detail=f"waited {delay.total_seconds():.2f}s")

    async def _await_review(self) -> None:
        plan = self._require_plan()
        decision = await self._wait_for_review(plan.review_timeout_s, "review timeout")
        if decision is None:
            detail = self._take_forced_reason() or f"no review in {plan.review_timeout_s:g}s"
            self._move(Event.REVIEW_TIMEOUT, detail=detail)
        else:
            self._apply_review(decision)

    async def _escalate(self) -> None:
        plan = self._require_plan()
        decision = await self._wait_for_review(plan.escalation_timeout_s, "escalation timeout")
        if decision is None:
            self._last_error = (
                self._take_forced_reason()
                or f"no review after escalation ({plan.escalation_timeout_s:g}s)"
            )
            await self._dead_letter(failed_state=State.ESCALATE)
            self._move(Event.ESCALATION_TIMEOUT, detail=self._last_error)
        else:
            self._apply_review(decision)

    async def _generate_embedding(self) -> None:
        assert self._request is not None and self._reply is not None
        # On cancel, wait until the activity has really stopped (it heartbeats, so the cancel
        # reaches it) before compensating: with TRY_CANCEL the delete could run while the
        # embedding call is still in flight, and the upsert after it would leave an orphan.
        wait_for_cancel = workflow.patched(PATCH_EMBEDDING_CANCEL_WAITS)
        try:
            result = await workflow.execute_activity(
                contract.ACTIVITY_GENERATE_EMBEDDING,
                EmbeddingInput(
                    workflow_id=workflow.info().workflow_id,
                    request_id=self._request.request_id,
                    content=self._reply.content,
                ),
                result_type=EmbeddingResult,
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=activity_policy.HEARTBEAT_TIMEOUT,
                retry_policy=activity_policy.EMBEDDING_RETRY,
                cancellation_type=(
                    workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                    if wait_for_cancel
                    else workflow.ActivityCancellationType.TRY_CANCEL
                ),
                summary="generate_embedding: embed and upsert",
            )
        except ActivityError as err:
            if self._cancelled(err):
                raise
            self._last_error = activity_policy.error_text(err)
            await self._dead_letter(failed_state=State.GENERATE_EMBEDDING)
            self._move(Event.EXHAUSTED, detail=self._last_error)
            return
        self._embedding_id = result.embedding_id
        if wait_for_cancel and workflow.cancellation_reason() is not None:
            # The cancel came too late to stop the write: the compensation deletes the vector.
            raise asyncio.CancelledError
        self._move(Event.EMBEDDED, detail=f"embedding {result.embedding_id}")

    # Helpers.

    def _parse_request(self, raw_request: Any) -> PipelineRequest:
        if self._input_problem is not None:
            raise ApplicationError(
                self._input_problem, type=errors.INVALID_REQUEST, non_retryable=True
            )
        try:
            request_part, _ = continuation.split_input(raw_request)
            return PipelineRequest.model_validate(request_part)
        except ValidationError as err:
            # Fails the run (not the workflow task), so bad input from any client ends at once.
            raise ApplicationError(
                f"invalid request: {describe_validation_error(err)}",
                type=errors.INVALID_REQUEST,
                non_retryable=True,
            ) from None

    def _fetches_locally(self) -> bool:
        """Whether this run's fetch_prompt runs as a local activity, inside the current task."""
        return (
            self._state is State.FETCH_PROMPT
            and self._request is not None
            and not self._request.is_reference
            and workflow.patched(PATCH_LOCAL_FETCH)
        )

    def _require_plan(self) -> PromptPlan:
        if self._plan is None:
            raise errors.InvalidTransition(self._state, "(no prompt plan)", "fetch_prompt not run")
        return self._plan

    def _choose_model(self, plan: PromptPlan) -> str:
        if plan.fallback_model and self._consecutive_failures >= plan.fallback_after:
            return plan.fallback_model
        return plan.model

    def _review_refusal(self, decision: ReviewDecision) -> str | None:
        return review_rules.refusal(
            workflow_id=workflow.info().workflow_id,
            state=self._state,
            decision=decision,
            review_round=self._review_round,
            pending=self._pending_review,
            plan=self._plan,
        )

    def _refuse_signal(self, reason: str, reviewer: str | None) -> None:
        workflow.logger.warning("review signal refused: %s", reason)
        self._history.append(
            review_rules.refusal_note(
                state=self._state,
                at=workflow.now(),
                attempt=self._attempts,
                reason=reason,
                reviewer=reviewer,
                review_round=self._review_round,
            )
        )

    async def _wait_for_review(self, timeout_s: float, summary: str) -> ReviewDecision | None:
        try:
            await workflow.wait_condition(
                lambda: (
                    self._pending_review is not None
                    or self._forced_timeout is not None
                    or self._dead_letter_requested is not None
                ),
                timeout=timedelta(seconds=timeout_s),
                timeout_summary=summary,
            )
        except TimeoutError:
            return None
        decision = self._pending_review
        if decision is None:
            return None  # an operator forced the timeout (expire_review or dead_letter)
        self._forced_timeout = None  # a review that came with it wins
        return decision

    def _apply_review(self, decision: ReviewDecision) -> None:
        if decision.decision == "reedit":
            self._feedback.append(decision.feedback or "Please revise the answer.")
            self._feedback = continuation.bounded_feedback(self._feedback)
            self._rounds_this_run += 1
        elif decision.decision == "reject":
            self._last_error = f"rejected by {decision.reviewer}"
        self._pending_review = None
        self._reviews_applied += 1
        self._move(
            Event(decision.decision),
            detail=review_rules.decision_detail(decision),
            reviewer=decision.reviewer,
            feedback=decision.feedback,
            review_round=self._review_round,
        )

    # Continue-as-new (see workflows.continuation): long reedit loops move to a fresh run.

    def _restore(self, raw_input: Any) -> None:
        """Take over a continued run's carried state (before any handler can run)."""
        try:
            _, carried = continuation.split_input(raw_input)
        except ValidationError as err:
            self._input_problem = f"invalid continued run: {describe_validation_error(err)}"
            return
        if carried is None:
            return
        if workflow.info().continued_run_id is None:
            self._input_problem = "carried state is accepted only from continue-as-new"
            return
        self._state = State(carried.state)
        self._history = list(carried.history)
        self._history_dropped = carried.history_dropped
        self._attempts = carried.attempts
        self._consecutive_failures = carried.consecutive_failures
        self._corrective_next = carried.corrective_next
        self._model = carried.model
        self._last_error = carried.last_error
        self._feedback = list(carried.feedback)
        self._review_round = carried.review_round
        self._plan = carried.plan

    async def _continue_as_new_if_due(self) -> None:
        """At the one safe point (a reedit just applied), hand the loop to a fresh run."""
        if self._state is not State.INVOKE_LLM or self._rounds_this_run == 0:
            return
        # The last transition, skipping notes (a refused signal may have arrived since).
        notes = (NOTE_REVIEW_REFUSED, NOTE_CONTINUED_AS_NEW)
        last = next((e for e in reversed(self._history) if e.event not in notes), None)
        if last is None or last.event != Event.REEDIT.value or self._plan is None:
            return
        due = continuation.is_due(
            rounds_this_run=self._rounds_this_run,
            rounds_per_run=self._plan.reedit_rounds_per_run,
            suggested=workflow.info().is_continue_as_new_suggested(),
            history_bytes=workflow.info().get_current_history_size(),
            history_events=workflow.info().get_current_history_length(),
        )
        # Histories recorded before this existed never continued as new: replay them unchanged.
        if not due or not workflow.patched(continuation.PATCH_ID):
            return
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._history.append(
            HistoryEntry(
                from_state=self._state.value,
                to_state=self._state.value,
                event=NOTE_CONTINUED_AS_NEW,
                at=workflow.now(),
                attempt=self._attempts,
                detail=(
                    f"continued as a new run after {self._rounds_this_run} review rounds "
                    f"({workflow.info().get_current_history_length()} events)"
                ),
                review_round=self._review_round,
            )
        )
        workflow.continue_as_new(self._carry())

    def _carry(self) -> ContinuedRun:
        assert self._request is not None and self._plan is not None
        history, dropped = continuation.bounded_history(self._history)
        return ContinuedRun(
            request=self._request,
            carried=CarriedState(
                state=self._state.value,
                history=history,
                history_dropped=self._history_dropped + dropped,
                attempts=self._attempts,
                consecutive_failures=self._consecutive_failures,
                corrective_next=self._corrective_next,
                model=self._model,
                last_error=self._last_error,
                feedback=list(self._feedback),
                review_round=self._review_round,
                plan=self._plan,
            ),
        )

    async def _dead_letter(self, failed_state: State) -> None:
        assert self._request is not None
        info = workflow.info()
        message = DeadLetterMessage(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            request=self._request.model_dump(mode="json"),
            failed_state=failed_state.value,
            attempts=self._attempts,
            last_error=self._last_error,
            history=list(self._history),
        )
        receipt = await workflow.execute_activity(
            contract.ACTIVITY_SEND_DEAD_LETTER,
            DeadLetterInput(message=message),
            result_type=DeadLetterReceipt,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=activity_policy.DEAD_LETTER_RETRY,
            summary=f"send_dead_letter: {failed_state.value}",
        )
        workflow.logger.info("dead-lettered as SQS message %s", receipt.message_id)

    def _cancelled(self, err: ActivityError) -> bool:
        """True when ``err`` is this run's cancel reaching an in-flight activity.

        The SDK reports such an activity as ActivityError (cause CancelledError), not as
        asyncio.CancelledError, so a state's ``except ActivityError`` must re-raise it rather
        than retry or dead-letter. Runs recorded before this check replay their old path.
        """
        return isinstance(err.cause, ActivityCancelledError) and workflow.patched(
            PATCH_CANCEL_IN_ACTIVITY
        )

    async def _compensate_cancel(self) -> None:
        detail = "no side effects to undo"
        if self._state in (State.GENERATE_EMBEDDING, State.COMPLETED) or self._embedding_id:
            deleted = await workflow.execute_activity(
                contract.ACTIVITY_DELETE_EMBEDDING,
                workflow.info().workflow_id,
                result_type=int,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=activity_policy.COMPENSATION_RETRY,
                summary="compensate: delete embedding",
            )
            detail = f"compensation: deleted {deleted} vector(s)"
        self._move(Event.CANCEL, detail=detail)

    def _move(
        self,
        event: Event,
        detail: str | None = None,
        at: datetime | None = None,
        **review: Any,
    ) -> None:
        """Take one graph edge: validate, record it (at ``at``, default now) and show it."""
        target = graph_next_state(self._state, event)
        now = at or workflow.now()
        self._history.append(
            HistoryEntry(
                from_state=self._state.value,
                to_state=target.value,
                event=event.value,
                at=now,
                attempt=self._attempts,
                detail=detail,
                **review,
            )
        )
        self._state = target
        self._state_since = now
        observability.record_transition(
            self._history,
            model=self._model,
            reply=self._reply,
            plan=self._plan,
            last_error=self._last_error,
        )
        workflow.set_current_details(self._details())

    def _publish_state(self) -> None:
        """Upsert ``AiState``/``AiStateSince`` if the state moved since the last upsert.

        Called whenever the run is about to wait on the server (an activity, a timer, a review)
        and when it ends, that is, before every point where a workflow task can end. Visibility
        only ever sees the state at those points, so one upsert per task says everything: moves
        made within one task (an inline fetch_prompt runs locally) need no visibility write each.
        """
        if self._state is self._published_state or self._state_since is None:
            return
        workflow.upsert_search_attributes(
            [AI_STATE.value_set(self._state.value), AI_STATE_SINCE.value_set(self._state_since)]
        )
        self._published_state = self._state

    def _details(self) -> str:
        parts = [
            f"**{self._state.value}** ({status_of(self._state).value}, {progress_of(self._state)}%)"
        ]
        if self._attempts:
            parts.append(f"LLM attempt {self._attempts}")
        if self._model:
            parts.append(f"model {self._model}")
        if self._state in REVIEW_STATES:
            parts.append("waiting for a reviewer: starter.py review <id> approve|reedit|reject")
        if self._last_error and self._state in (State.RETRY_LLM, State.FAILED):
            parts.append(f"last error: {self._last_error}")
        return " · ".join(parts)

    def _result(self) -> PipelineResult:
        assert self._request is not None
        final = self._state.value
        if final not in ("completed", "failed", "dead_letter"):
            raise errors.InvalidTransition(final, "(finish)", "run ended in a non-final state")
        return PipelineResult(
            request_id=self._request.request_id,
            state=final,
            content=self._reply.content if self._reply else None,
            model=self._model,
            embedding_id=self._embedding_id,
            history=list(self._history),
        )
