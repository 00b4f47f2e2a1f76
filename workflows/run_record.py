"""The record of one run: every move it made and how it is shown, as functions over ``RunState``.

``move`` takes one graph edge and records it (a history entry, a span and metrics, the Web UI's
current details); ``publish_state`` upserts ``AiState``/``AiStateSince`` once per workflow task,
with the state the task ends in, so the bookkeeping rides on commands the task sends anyway;
``status`` and ``result`` are what the queries, the update and the run's result return.

Everything a run keeps is bounded whatever clients send: history entries are appended through
``append``, which drops the oldest past ``HISTORY_MAX_BYTES`` (``history_dropped`` counts them),
and error texts are cut at ``MAX_ERROR_CHARS``. So the status, update results, the carried state
and the result stay far below Temporal's payload limits.

Workflow code, passed through the sandbox; ``tests/unit/test_workflow_code.py`` holds it to the
sandbox's rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import ApplicationError

import workflows.contract as contract
import workflows.errors as errors
import workflows.observability as observability
from workflows.graph import REVIEW_STATES, SHOWN_STATES, Event, State, progress_of, status_of
from workflows.graph import next_state as graph_next_state
from workflows.payloads import (
    FinalState,
    HistoryEntry,
    PipelineRequest,
    PipelineResult,
    RunProgress,
    RunState,
    RunStatus,
)

# Several hundred review rounds fit; the result, status and carried state stay small.
HISTORY_MAX_BYTES = 128 * 1024
MAX_ERROR_CHARS = 2000
FINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.DEAD_LETTER})


def bounded_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    return text if len(text) <= limit else text[: limit - 6] + " [cut]"


def set_error(run: RunState, text: str) -> str:
    """Record ``text`` as the run's last error (bounded); returns what was recorded."""
    run.last_error = bounded_text(text, MAX_ERROR_CHARS)
    return run.last_error


def append(run: RunState, entry: HistoryEntry) -> None:
    """Add ``entry`` to the history, dropping the oldest entries past ``HISTORY_MAX_BYTES``."""
    run.history.append(entry)
    run.history_bytes += _size(entry)
    while run.history_bytes > HISTORY_MAX_BYTES and len(run.history) > 1:
        run.history_bytes -= _size(run.history.pop(0))
        run.history_dropped += 1


def _size(entry: HistoryEntry) -> int:
    return len(entry.model_dump_json()) + 1


def move(
    run: RunState,
    event: Event,
    *,
    detail: str | None = None,
    at: datetime | None = None,
    reviewer: str | None = None,
    feedback: str | None = None,
    review_round: int | None = None,
) -> None:
    """Take one graph edge: validate, record it (at ``at``, default now) and show it."""
    target = graph_next_state(run.state, event)
    now = at or workflow.now()
    entered_at = min(run.state_since or now, now)
    entry = HistoryEntry(
        from_state=run.state.value,
        to_state=target.value,
        event=event.value,
        at=now,
        attempt=run.attempts,
        detail=bounded_text(detail, MAX_ERROR_CHARS) if detail else None,
        reviewer=reviewer,
        feedback=feedback,
        review_round=review_round,
    )
    append(run, entry)
    run.state = target
    run.state_since = now
    observability.record_transition(run, entry, entered_at=entered_at)
    workflow.set_current_details(details(run))


def note(run: RunState, event: str, detail: str) -> None:
    """Record something that happened without moving the run (continue-as-new)."""
    append(
        run,
        HistoryEntry(
            from_state=run.state.value,
            to_state=run.state.value,
            event=event,
            at=workflow.now(),
            attempt=run.attempts,
            detail=detail,
            review_round=run.review_round or None,
        ),
    )


def published_at_start() -> State | None:
    """The state the run's ``AiState`` held when it started (a starter sets the state the run
    will first rest in; a continued run inherits its own), if it names one."""
    value = workflow.info().typed_search_attributes.get(contract.AI_STATE)
    return next((state for state in State if state.value == value), None)


def publish_state(run: RunState, published: State | None) -> State | None:
    """Upsert ``AiState``/``AiStateSince`` (and ``AiReviewRound`` in a review state) if the run
    rests in a shown state other than ``published``; returns what visibility now holds.

    Called whenever the run is about to wait on the server (an activity, a timer, a review)
    and when it ends, that is, before every point where a workflow task can end. Visibility
    only ever sees the state at those points, so one upsert per task says everything, and
    states the run only passes through (``graph.SHOWN_STATES``) are not worth an upsert: each
    upsert is a billable action.
    """
    if run.state is published or run.state not in SHOWN_STATES or run.state_since is None:
        return published
    updates: list[SearchAttributeUpdate[Any]] = [
        contract.AI_STATE.value_set(run.state.value),
        contract.AI_STATE_SINCE.value_set(run.state_since),
    ]
    if run.state in REVIEW_STATES:
        updates.append(contract.AI_REVIEW_ROUND.value_set(run.review_round))
    workflow.upsert_search_attributes(updates)
    return run.state


def details(run: RunState) -> str:
    """The Web UI's current-details line: where the run is, never content."""
    parts = [f"**{run.state.value}** ({status_of(run.state).value}, {progress_of(run.state)}%)"]
    if run.attempts:
        parts.append(f"LLM attempt {run.attempts}")
    if run.model:
        parts.append(f"model {run.model}")
    if run.state in REVIEW_STATES:
        parts.append("waiting for a reviewer: starter.py review <id> approve|reedit|reject")
    if run.state is State.AWAIT_CAPACITY and run.capacity_wait_s is not None:
        parts.append(f"queued for the model's capacity for {run.capacity_wait_s:.1f}s")
    if run.state is State.AWAIT_BUDGET:
        parts.append("over budget: starter.py budget <id> approve|reject --operator NAME")
    if run.last_error and run.state in (State.RETRY_LLM, State.FAILED, State.AWAIT_BUDGET):
        parts.append(f"last error: {observability.error_reason(run.last_error)}")
    return " · ".join(parts)


def status(run: RunState) -> RunStatus:
    """What the ``status`` query and the ``submit_review`` update return."""
    return RunStatus(
        state=run.state.value,
        status=status_of(run.state).value,
        progress=progress_of(run.state),
        tenant=run.plan.tenant if run.plan is not None else None,
        **{name: getattr(run, name) for name in RunProgress.model_fields},
    )


def finish(run: RunState, request: PipelineRequest) -> PipelineResult:
    """The result of a completed run.

    A run that ended in ``failed`` or ``dead_letter`` closes as a failed Temporal run (so the
    Web UI, ``ExecutionStatus='Failed'`` and the SDK's failure metrics see it): this raises a
    non-retryable ``RunFailed`` whose details carry the same ``PipelineResult``.

    Raises:
        ApplicationError: ``RunFailed``, the run ended in failed or dead_letter.
    """
    ended = result(run, request)
    if ended.state == State.COMPLETED.value:
        return ended
    reason = observability.error_reason(run.last_error)
    shown = "" if reason == observability.UNKNOWN_REASON else f" ({reason})"
    raise ApplicationError(
        f"run ended in {ended.state}{shown}", ended, type=errors.RUN_FAILED, non_retryable=True
    )


def result(run: RunState, request: PipelineRequest) -> PipelineResult:
    """The run's result, once it is in a final state."""
    if run.state not in FINAL_STATES:
        raise errors.InvalidTransition(run.state, "(finish)", "run ended in a non-final state")
    return PipelineResult(
        request_id=request.request_id,
        state=cast(FinalState, run.state.value),
        content=run.reply.content if run.reply else None,
        model=run.model,
        embedding_id=run.embedding_id,
        history=list(run.history),
    )
