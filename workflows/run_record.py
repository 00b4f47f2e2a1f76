"""The record of one run: the state it is in, every move it made, and how both are shown.

``RunRecord`` is the part of ``AiOrchestrator`` that keeps that record. ``_move`` takes one graph
edge and records it (a history entry, a span and metrics, the Web UI's current details);
``_publish_state`` upserts ``AiState``/``AiStateSince`` once per workflow task, with the state
the task ends in, so the bookkeeping rides on commands the task sends anyway and adds no
visibility write nobody could observe; ``_status`` and ``_result`` are what the queries, the
update and the run's result return; continue-as-new carries the record to a fresh run.

Workflow code, passed through the sandbox like ``workflows.graph`` and
``workflows.observability``: built once per worker, not for every run. The sandbox does not
check it at run time, so ``tests/unit/test_workflow_code.py`` checks it (and every module of
``workflows/``) for wall clock, randomness, environment and I/O instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import SearchAttributeKey

import workflows.continuation as continuation
import workflows.contract as contract
import workflows.errors as errors
import workflows.observability as observability
from workflows.graph import REVIEW_STATES, Event, State, progress_of, status_of
from workflows.graph import next_state as graph_next_state
from workflows.payloads import (
    NOTE_CONTINUED_AS_NEW,
    NOTE_REVIEW_REFUSED,
    CarriedState,
    ContinuedRun,
    HistoryEntry,
    LlmCallResult,
    PipelineRequest,
    PipelineResult,
    PromptPlan,
    RunStatus,
    describe_validation_error,
)

AI_STATE = SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE)
AI_STATE_SINCE = SearchAttributeKey.for_datetime(contract.SEARCH_ATTRIBUTE_STATE_SINCE)


class RunRecord:
    """The run's state and history, kept and shown; ``AiOrchestrator.__init__`` sets them."""

    _state: State
    _state_since: datetime | None
    _published_state: State
    _history: list[HistoryEntry]
    _history_dropped: int
    _attempts: int
    _consecutive_failures: int
    _corrective_next: bool
    _model: str | None
    _last_error: str | None
    _feedback: list[str]
    _review_round: int
    _rounds_this_run: int
    _request: PipelineRequest | None
    _plan: PromptPlan | None
    _reply: LlmCallResult | None
    _embedding_id: str | None
    _input_problem: str | None

    def _status(self) -> RunStatus:
        """What the ``status`` query and the ``submit_review`` update return."""
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
