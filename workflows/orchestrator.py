"""AiOrchestrator: the workflow that walks the state graph.

The workflow never decides a transition on its own: each state's handler does that state's work
(usually one activity) and reports an event; ``workflows.graph`` says where that event leads and
refuses what the graph does not allow. Each move is recorded by ``workflows.run_record``
(history, spans and metrics, the Web UI's details, ``AiState`` once per workflow task), and
reviews and operator actions arrive through ``workflows.review_desk``: the two base classes of
``AiOrchestrator``, passed through the sandbox (see ``workflows.run_record``).

Deterministic code only: time, randomness and I/O come from ``workflow.*`` or activities. The
worker imports this package once (``aiorch.sandbox``); the tests run it under the SDK's sandbox,
which imports this module afresh for every run, hence the pass-through below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
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
    from workflows.backoff import full_jitter_delay
    from workflows.graph import Event, State, is_terminal
    from workflows.payloads import (
        DeadLetterInput,
        DeadLetterMessage,
        DeadLetterReceipt,
        EmbeddingInput,
        EmbeddingResult,
        LlmCallInput,
        LlmCallResult,
        PipelineRequest,
        PipelineResult,
        PromptInput,
        PromptPlan,
        RunStatus,
        describe_validation_error,
    )

    # The record and the review desk are this class's bases. Passed through like the other
    # workflow-side modules, their handlers are built once per worker, not for every run
    # (replaying a recorded happy path costs 1-2 ms less); tests/unit/test_workflow_code.py
    # holds every module of workflows/ to the sandbox's rules instead.
    from workflows.review_desk import ReviewDesk


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
class AiOrchestrator(ReviewDesk):
    """Runs one request through fetch -> LLM -> (review) -> embed, with retries and escalation."""

    @workflow.init
    def __init__(self, raw_request: Any) -> None:
        self._state = State.IDLE
        self._state_since = None
        self._history = []
        self._attempts = 0
        self._consecutive_failures = 0
        self._corrective_next = False
        self._model = None
        self._last_error = None
        self._pending_review = None
        self._reviews_applied = 0
        self._feedback = []
        self._request = None
        self._plan = None
        self._reply = None
        self._embedding_id = None
        self._retry_after: timedelta | None = None
        self._review_round = 0
        self._rounds_this_run = 0
        self._history_dropped = 0
        self._input_problem = None
        # Operator actions (expire_review: one wait; dead_letter: every wait until dead_letter).
        self._forced_timeout = None
        self._dead_letter_requested = None
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

    # Queries: the contract's names (the review signal and update are in ReviewDesk).

    @workflow.query(name=contract.QUERY_STATE)
    def state(self) -> str:
        return self._state.value

    @workflow.query(name=contract.QUERY_STATUS)
    def status(self) -> RunStatus:
        return self._status()

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
