"""AiOrchestrator: the workflow that walks the state graph.

The workflow never decides a transition on its own: each state's handler does that state's work
(usually one activity) and reports an event; ``workflows.graph`` says where that event leads and
refuses what the graph does not allow. Every move appends a history entry, upserts the ``AiState``
search attribute and refreshes the Web UI's current details in the same workflow task, so the
bookkeeping rides on commands the task sends anyway.

Deterministic code only: time, randomness and I/O come from ``workflow.*`` or activities.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows import contract, errors
    from workflows.backoff import full_jitter_delay
    from workflows.graph import Event, State, is_terminal, progress_of, status_of
    from workflows.graph import next_state as graph_next_state
    from workflows.payloads import (
        DeadLetterInput,
        DeadLetterMessage,
        DeadLetterReceipt,
        EmbeddingInput,
        EmbeddingResult,
        HistoryEntry,
        LlmCallInput,
        LlmCallResult,
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

# The LLM activity gets exactly one attempt per call: retries are the graph's retry_llm state,
# so each attempt, its error and its backoff are visible in history and in status.attempts.
SINGLE_ATTEMPT = RetryPolicy(maximum_attempts=1)
FETCH_RETRY = RetryPolicy(
    maximum_attempts=5,
    non_retryable_error_types=[errors.INVALID_REQUEST, errors.INPUT_UNAVAILABLE],
)
EMBEDDING_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=[errors.EMBEDDING_FAILED],
)
# A dead letter must never be lost: keep trying (visibly, in the pending activity) until the
# queue accepts it, however long the queue is down.
DEAD_LETTER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
)
COMPENSATION_RETRY = RetryPolicy(maximum_attempts=10, maximum_interval=timedelta(seconds=30))
HEARTBEAT_TIMEOUT = timedelta(seconds=10)


def _error_text(err: BaseException) -> str:
    """The innermost message of an activity failure, for last_error and history."""
    cause = err.cause if isinstance(err, ActivityError) and err.cause is not None else err
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    if isinstance(cause, ActivityTimeoutError):
        return f"Timeout: activity timed out ({cause.type.name if cause.type else 'unknown'})"
    return str(cause) or type(cause).__name__


def _is_permanent(err: ActivityError) -> bool:
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.non_retryable


def _retry_after(err: ActivityError) -> timedelta | None:
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.next_retry_delay
    return None


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
                await handlers[self._state]()
        except asyncio.CancelledError:
            await self._compensate_cancel()
            raise
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
        )

    @workflow.signal(name=contract.SIGNAL_REVIEW)
    def review(self, raw_decision: Any) -> None:
        # A signal cannot be refused, so a bad or untimely one is logged and dropped; callers
        # that need to know use the submit_review update instead.
        try:
            decision = ReviewDecision.model_validate(raw_decision)
        except ValidationError as err:
            workflow.logger.warning("ignored review signal: %s", describe_validation_error(err))
            return
        problem = self._review_refusal()
        if problem:
            workflow.logger.warning("ignored review signal from %s: %s", decision.reviewer, problem)
            return
        self._pending_review = decision

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
            ReviewDecision.model_validate(raw_decision)
        except ValidationError as err:
            raise ValueError(f"invalid review: {describe_validation_error(err)}") from None
        problem = self._review_refusal()
        if problem:
            raise ValueError(problem)

    # State handlers: each does its state's work and reports one event.

    async def _start(self) -> None:
        self._move(Event.START)

    async def _fetch_prompt(self) -> None:
        assert self._request is not None
        try:
            self._plan = await workflow.execute_activity(
                contract.ACTIVITY_FETCH_PROMPT,
                PromptInput(request=self._request),
                result_type=PromptPlan,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=FETCH_RETRY,
                summary="fetch_prompt: load input, build prompt",
            )
        except ActivityError as err:
            self._last_error = _error_text(err)
            self._move(Event.PERMANENT_ERROR, detail=self._last_error)
            return
        self._move(Event.PROMPT_READY)

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
        )
        try:
            reply = await workflow.execute_activity(
                contract.ACTIVITY_INVOKE_LLM,
                call,
                result_type=LlmCallResult,
                start_to_close_timeout=timedelta(seconds=plan.llm_timeout_s + 15),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=SINGLE_ATTEMPT,
                summary=f"invoke_llm: attempt {self._attempts} on {model}",
            )
        except ActivityError as err:
            self._last_error = _error_text(err)
            self._retry_after = _retry_after(err)
            self._corrective_next = (
                isinstance(err.cause, ApplicationError)
                and err.cause.type == errors.LLM_MALFORMED_REPLY
            )
            if _is_permanent(err):
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
            self._move(Event.NEEDS_REVIEW, detail=f"answered by {reply.model}")
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
            self._move(Event.REVIEW_TIMEOUT, detail=f"no review in {plan.review_timeout_s:g}s")
        else:
            self._apply_review(decision)

    async def _escalate(self) -> None:
        plan = self._require_plan()
        decision = await self._wait_for_review(plan.escalation_timeout_s, "escalation timeout")
        if decision is None:
            self._last_error = f"no review after escalation ({plan.escalation_timeout_s:g}s)"
            await self._dead_letter(failed_state=State.ESCALATE)
            self._move(Event.ESCALATION_TIMEOUT, detail=self._last_error)
        else:
            self._apply_review(decision)

    async def _generate_embedding(self) -> None:
        assert self._request is not None and self._reply is not None
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
                retry_policy=EMBEDDING_RETRY,
                summary="generate_embedding: embed and upsert",
            )
        except ActivityError as err:
            self._last_error = _error_text(err)
            await self._dead_letter(failed_state=State.GENERATE_EMBEDDING)
            self._move(Event.EXHAUSTED, detail=self._last_error)
            return
        self._embedding_id = result.embedding_id
        self._move(Event.EMBEDDED, detail=f"embedding {result.embedding_id}")

    # Helpers.

    def _parse_request(self, raw_request: Any) -> PipelineRequest:
        try:
            return PipelineRequest.model_validate(raw_request)
        except ValidationError as err:
            # Fails the run (not the workflow task), so bad input from any client ends at once.
            raise ApplicationError(
                f"invalid request: {describe_validation_error(err)}",
                type=errors.INVALID_REQUEST,
                non_retryable=True,
            ) from None

    def _require_plan(self) -> PromptPlan:
        if self._plan is None:
            raise errors.InvalidTransition(self._state, "(no prompt plan)", "fetch_prompt not run")
        return self._plan

    def _choose_model(self, plan: PromptPlan) -> str:
        if plan.fallback_model and self._consecutive_failures >= plan.fallback_after:
            return plan.fallback_model
        return plan.model

    def _review_refusal(self) -> str | None:
        if self._state not in REVIEW_STATES:
            return f"run is not awaiting review (state: {self._state.value})"
        if self._pending_review is not None:
            return "a review for this round has already been submitted"
        return None

    async def _wait_for_review(self, timeout_s: float, summary: str) -> ReviewDecision | None:
        try:
            await workflow.wait_condition(
                lambda: self._pending_review is not None,
                timeout=timedelta(seconds=timeout_s),
                timeout_summary=summary,
            )
        except TimeoutError:
            return None
        decision = self._pending_review
        assert decision is not None
        return decision

    def _apply_review(self, decision: ReviewDecision) -> None:
        detail = f"{decision.decision} by {decision.reviewer}"
        if decision.feedback:
            detail += f": {decision.feedback}"
        if decision.decision == "reedit":
            self._feedback.append(decision.feedback or "Please revise the answer.")
        elif decision.decision == "reject":
            self._last_error = f"rejected by {decision.reviewer}"
        self._pending_review = None
        self._reviews_applied += 1
        self._move(Event(decision.decision), detail=detail)

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
            retry_policy=DEAD_LETTER_RETRY,
            summary=f"send_dead_letter: {failed_state.value}",
        )
        workflow.logger.info("dead-lettered as SQS message %s", receipt.message_id)

    async def _compensate_cancel(self) -> None:
        detail = "no side effects to undo"
        if self._state in (State.GENERATE_EMBEDDING, State.COMPLETED) or self._embedding_id:
            deleted = await workflow.execute_activity(
                contract.ACTIVITY_DELETE_EMBEDDING,
                workflow.info().workflow_id,
                result_type=int,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=COMPENSATION_RETRY,
                summary="compensate: delete embedding",
            )
            detail = f"compensation: deleted {deleted} vector(s)"
        self._move(Event.CANCEL, detail=detail)

    def _move(self, event: Event, detail: str | None = None) -> None:
        """Take one graph edge: validate, record, and publish the new state."""
        target = graph_next_state(self._state, event)
        now = workflow.now()
        self._history.append(
            HistoryEntry(
                from_state=self._state.value,
                to_state=target.value,
                event=event.value,
                at=now,
                attempt=self._attempts,
                detail=detail,
            )
        )
        self._state = target
        workflow.upsert_search_attributes(
            [AI_STATE.value_set(target.value), AI_STATE_SINCE.value_set(now)]
        )
        workflow.set_current_details(self._details())

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
