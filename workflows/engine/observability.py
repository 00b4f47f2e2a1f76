"""Spans and metrics for state transitions: deterministic-safe, called from the workflow.

``record_transition`` runs inside ``record.move`` for every graph edge a run takes. It
sends no commands, so it cannot change what the workflow does, and it is replay-safe:

- spans come from the global OpenTelemetry tracer, which the worker makes replay-safe
  (``temporalio.contrib.opentelemetry.create_tracer_provider``): a span started while history is
  replayed is never ended, so never exported twice; span ids come from the workflow's seeded
  random, so a replay rebuilds the same ids. With no tracer provider set, spans are no-ops.
- counters and histograms go through ``workflow.metric_meter()``, which drops recordings made
  during replay.

Prompt and reply text (and the history entry's ``detail``, which can quote a reviewer or a
malformed reply) stay out of spans unless the run's plan says ``capture_content``
(``OTEL_CAPTURE_CONTENT`` on the worker that planned the run).

The metric names are the project's catalogue; the activity side (tokens, cost) and the worker's
histogram buckets use the same constants.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue
from temporalio import workflow

from workflows.engine.graph import DEAD_LETTER, FAILED, Event, Graph, Role
from workflows.payloads import HistoryEntry, LlmCallResult, RunCore

# Workflow side (workflow.metric_meter(): replay-safe).
METRIC_TRANSITIONS = "aiorch_transitions"
METRIC_LLM_RETRIES = "aiorch_llm_retries"
METRIC_DEAD_LETTERS = "aiorch_dead_letters"
METRIC_REVIEW_WAIT = "aiorch_review_wait_seconds"
METRIC_RUN_DURATION = "aiorch_run_duration_seconds"
METRIC_REVIEWS_REFUSED = "aiorch_reviews_refused"
METRIC_APPROVAL_DELAY = "aiorch_approval_delay_seconds"
METRIC_AUTO_APPROVALS = "aiorch_auto_approvals"
# The group label of a decision made under no review policy's group.
NO_GROUP = "-"
# Activity side (activity.metric_meter()).
METRIC_LLM_TOKENS = "aiorch_llm_tokens"
METRIC_LLM_COST = "aiorch_llm_cost_usd"
METRIC_RESULT_CACHE = "aiorch_llm_result_cache"

TRACER_NAME = "ai-orchestrator.workflow"
ERROR_EVENTS = frozenset(
    {Event.RETRYABLE_ERROR.value, Event.PERMANENT_ERROR.value, Event.EXHAUSTED.value}
)
UNKNOWN_REASON = "Unknown"
# The workflow writes errors as "Type: message" (ApplicationError type or "Timeout").
_ERROR_TYPE = re.compile(r"^([A-Za-z][A-Za-z0-9_.]{0,63}): ")


def error_reason(last_error: str | None) -> str:
    """The stable error type at the front of a ``last_error`` text, for a low-cardinality label."""
    match = _ERROR_TYPE.match(last_error or "")
    return match.group(1) if match else UNKNOWN_REASON


def failed_state(graph: Graph, entry: HistoryEntry) -> str:
    """The state a dead-lettered run failed in, as its dead-letter message names it.

    Exhausted retries leave from the retry state (``retry_llm``) but failed in the step it
    retries (``invoke_llm``).
    """
    if graph.info(entry.from_state).role == Role.RETRY:
        return graph.target_of(entry.from_state, Event.BACKOFF_ELAPSED) or entry.from_state
    return entry.from_state


def span_name(entry: HistoryEntry) -> str:
    """``transition invoke_llm->await_review``."""
    return f"transition {entry.from_state}->{entry.to_state}"


def transition_attributes(
    workflow_id: str,
    entry: HistoryEntry,
    *,
    model: str | None,
    answer: LlmCallResult | None,
    prompt: str | None,
    capture_content: bool,
    last_error: str | None,
) -> dict[str, AttributeValue]:
    """The span attributes of one transition (``answer``: the model's reply it reports, with
    the ``prompt`` it answered); text content only when ``capture_content`` allows it."""
    attributes: dict[str, AttributeValue] = {
        "aiorch.workflow_id": workflow_id,
        "aiorch.from_state": entry.from_state,
        "aiorch.to_state": entry.to_state,
        "aiorch.event": entry.event,
        "aiorch.attempt": entry.attempt,
    }
    if answer is not None:
        model = answer.model
        attributes["gen_ai.usage.input_tokens"] = answer.usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = answer.usage.completion_tokens
        attributes["gen_ai.usage.cache_read.input_tokens"] = answer.usage.cached_tokens
        attributes["aiorch.tokens.total"] = answer.usage.total_tokens
        attributes["aiorch.lane"] = answer.lane
        if answer.cached_reply:
            attributes["aiorch.result_cache"] = "hit"
    if model:
        attributes["gen_ai.response.model"] = model
    if entry.event in ERROR_EVENTS:
        attributes["aiorch.error_type"] = error_reason(last_error)
    if capture_content:
        if entry.detail:
            attributes["aiorch.detail"] = entry.detail
        if answer is not None:
            if prompt is not None:
                attributes["aiorch.prompt"] = prompt
            attributes["aiorch.reply"] = answer.content
    return attributes


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def record_transition(
    graph: Graph,
    run: RunCore[Any],
    entry: HistoryEntry,
    *,
    entered_at: datetime,
    answer: LlmCallResult | None = None,
    prompt: str | None = None,
) -> None:
    """Emit the span and metrics for ``entry``, the transition ``run`` just took (``answer``:
    the model's reply it reports, answering ``prompt``).

    The span covers the time spent in the state being left: from ``entered_at`` (when the run
    entered ``from_state``) to the transition.
    """
    info = workflow.info()
    # A run continued as new starts again; the chain it continues started earlier.
    started_at = min(info.workflow_start_time, run.started_at or info.workflow_start_time)
    attributes = transition_attributes(
        info.workflow_id,
        entry,
        model=run.model,
        answer=answer,
        prompt=prompt,
        capture_content=run.plan is not None and run.plan.capture_content,
        last_error=run.last_error,
    )
    span = trace.get_tracer(TRACER_NAME).start_span(
        span_name(entry), attributes=attributes, start_time=_ns(entered_at)
    )
    if entry.to_state in (FAILED, DEAD_LETTER):
        span.set_status(Status(StatusCode.ERROR, f"{entry.event}: {error_reason(run.last_error)}"))
    span.end(end_time=_ns(entry.at))
    _record_metrics(graph, entry, entered_at, started_at, run.last_error)


def _record_metrics(
    graph: Graph,
    entry: HistoryEntry,
    entered_at: datetime,
    started_at: datetime,
    last_error: str | None,
) -> None:
    meter = workflow.metric_meter()
    edge: Mapping[str, str] = {
        "from_state": entry.from_state,
        "to_state": entry.to_state,
        "event": entry.event,
    }
    meter.create_counter(
        METRIC_TRANSITIONS, "State transitions taken, by from/to state and event"
    ).add(1, edge)
    if entry.event == Event.RETRYABLE_ERROR.value:
        meter.create_counter(
            METRIC_LLM_RETRIES, "LLM attempts that failed retryably (each goes to retry_llm)"
        ).add(1, {"reason": error_reason(last_error)})
    if entry.to_state == DEAD_LETTER:
        meter.create_counter(METRIC_DEAD_LETTERS, "Runs sent to the dead-letter queue").add(
            1, {"failed_state": failed_state(graph, entry)}
        )
    if entry.from_state in graph.review_states:
        meter.create_histogram_float(
            METRIC_REVIEW_WAIT, "Time a run waited in a review state", "s"
        ).record(
            (entry.at - entered_at).total_seconds(),
            {"state": entry.from_state, "outcome": entry.event},
        )
    if graph.is_terminal(entry.to_state):
        meter.create_histogram_float(
            METRIC_RUN_DURATION, "Run duration from start to its final state", "s"
        ).record((entry.at - started_at).total_seconds(), {"final_state": entry.to_state})


def count_refused_review(code: str) -> None:
    """Count a review signal the run refused, by the refusal's stable code."""
    workflow.metric_meter().create_counter(
        METRIC_REVIEWS_REFUSED, "Review signals refused (not applied), by reason"
    ).add(1, {"reason": code})


def record_approval_delay(pipeline: str, group: str | None, decision: str, seconds: float) -> None:
    """The time from a round's start (its result waiting) to the reviewers' decision, by
    pipeline, the deciding stage's group and the decision (``approve``, ``correct``,
    ``reedit``, ``reject``)."""
    workflow.metric_meter().create_histogram_float(
        METRIC_APPROVAL_DELAY,
        "Time from a result waiting for review to the reviewers' decision",
        "s",
    ).record(seconds, {"pipeline": pipeline, "group": group or NO_GROUP, "decision": decision})


def count_auto_approval(pipeline: str, rule: str) -> None:
    """Count a result an auto-approve rule approved, by pipeline and rule."""
    workflow.metric_meter().create_counter(
        METRIC_AUTO_APPROVALS, "Results approved by an auto-approve rule, with no reviewer"
    ).add(1, {"pipeline": pipeline, "rule": rule})
