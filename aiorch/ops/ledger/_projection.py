"""One run's rows in the ledger, projected from its event history (the source of truth).

What a run recorded is read from the events Temporal keeps, decoded with the run's converter
(`aiorch.ops.results.run_converter`, so encrypted runs are read with the workers' keys):

- the start event: the pipeline (workflow type), the request (tenant, requester), the run chain
  (its first run id) and, for a continued run, the state carried into it;
- search-attribute upserts: the state the run rests in and since when, its pipeline version
  and review round (the model call's step is the state published before it was scheduled);
- the model activities (``invoke_llm``, ``await_batch``): each scheduled call, its attempt and
  model, and its outcome: the reply's usage and cost, or how it failed;
- the plan (a plan activity's result, local or not, or the plan a continued run carried in):
  the rollout experiment and variant the run was assigned (docs/rollouts.md);
- the close event: the result (completed, or carried in a ``RunFailed`` failure) or, for a run
  that continued as new, the state it carried on. Its history entries give the transitions
  and review decisions and votes, its corrections the corrected fields.

A run's history entries include those its chain carried in from earlier runs; each run keeps
the entries recorded since it started, so a chain's entries appear once. An entry is keyed by
its content and its occurrence (identical entries are numbered), which a bound that drops the
oldest entries does not move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel, Field, ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter, decode_typed_search_attributes
from temporalio.exceptions import ApplicationError

from aiorch.ops import pipelines
from aiorch.ops.ledger._entries import (
    NOTES,
    correction_rows,
    decides,
    decision_row,
    entry_ids,
    utc,
)
from aiorch.ops.results import result_in
from workflows import contract, errors
from workflows.data import ACTIVITY_PLAN_PIPELINE
from workflows.engine.continuation import carries_state
from workflows.payloads import (
    DEFAULT_TENANT,
    Assignment,
    Correction,
    HistoryEntry,
    LlmCallResult,
)

MODEL_ACTIVITIES: Final = frozenset({contract.ACTIVITY_INVOKE_LLM, contract.ACTIVITY_AWAIT_BATCH})
# The activities whose result is a run's plan (the LLM pipeline's, the engine's, a pipeline
# file's); a plan made under an experiment holds the run's assignment.
PLAN_ACTIVITIES: Final = frozenset(
    {contract.ACTIVITY_FETCH_PROMPT, contract.ACTIVITY_PLAN_RUN, ACTIVITY_PLAN_PIPELINE}
)
LOCAL_ACTIVITY_MARKER: Final = "core_local_activity"
# Outcomes of a model call that reached the model (an attempt), as opposed to a wait, a budget
# refusal or a hand-over to the batch lane.
ATTEMPTS: Final = frozenset({"answered", "failed", "timed_out"})
MAX_ERROR_CHARS: Final = 500

_CLOSES: Final = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "continued_as_new",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed_out",
}
_ACTIVITY_ENDS: Final = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "failed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "timed_out",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "cancelled",
}


class Recorded(BaseModel):
    """What a run's result (or the state it carried on) holds for the ledger."""

    state: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    corrections: list[Correction] = Field(default_factory=list)


@dataclass
class Projection:
    """One run's rows, by table name."""

    run: dict[str, Any]
    transitions: list[dict[str, Any]] = field(default_factory=list)
    model_calls: list[dict[str, Any]] = field(default_factory=list)
    review_decisions: list[dict[str, Any]] = field(default_factory=list)
    corrections: list[dict[str, Any]] = field(default_factory=list)
    assignment: Assignment | None = None
    """The rollout variant the run was planned under (its plan's), if any."""


async def _decoded(converter: DataConverter, payloads: Sequence[Any]) -> Any:
    values = await converter.decode(list(payloads)) if payloads else []
    return values[0] if values else None


@dataclass
class _Call:
    row: dict[str, Any]
    started_at: datetime | None = None


class _Reader:
    """Walks one run's events in order, gathering what the module docstring lists."""

    def __init__(self, workflow_id: str, run_id: str, converter: DataConverter) -> None:
        self.workflow_id, self.run_id, self.converter = workflow_id, run_id, converter
        self.attributes: dict[str, Any] = {}
        self.calls: dict[int, _Call] = {}
        self.plans: set[int] = set()
        self.assignment: Assignment | None = None
        self.recorded = Recorded()
        self.status = "running"
        self.ended_at: datetime | None = None
        self.last_attempt = 0

    async def read(self, events: Sequence[HistoryEvent]) -> None:
        for event in events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
                found = event.upsert_workflow_search_attributes_event_attributes.search_attributes
                self._publish(found)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                await self._scheduled(event)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attributes = event.activity_task_started_event_attributes
                if (call := self.calls.get(attributes.scheduled_event_id)) is not None:
                    call.started_at = utc(event.event_time)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                await self._completed(event)
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                await self._marker(event)
            elif kind in _ACTIVITY_ENDS:
                await self._failed(event, _ACTIVITY_ENDS[kind])
            elif kind in _CLOSES:
                self.status, self.ended_at = _CLOSES[kind], utc(event.event_time)
                await self._closed(event)

    def _publish(self, found: Any) -> None:
        typed = decode_typed_search_attributes(found)
        for key in (contract.AI_STATE, contract.AI_STATE_SINCE, contract.AI_REVIEW_ROUND):
            value = typed.get(key)
            if value is not None:
                self.attributes[key.name] = value
        version = typed.get(contract.AI_PIPELINE_VERSION)
        if version is not None:
            self.attributes[contract.AI_PIPELINE_VERSION.name] = version

    async def _scheduled(self, event: HistoryEvent) -> None:
        attributes = event.activity_task_scheduled_event_attributes
        activity = attributes.activity_type.name
        if activity in PLAN_ACTIVITIES:
            self.plans.add(event.event_id)
        if activity not in MODEL_ACTIVITIES:
            return
        given = await _decoded(self.converter, attributes.input.payloads) or {}
        attempt = int(given.get("attempt", self.last_attempt))
        self.last_attempt = attempt
        self.calls[event.event_id] = _Call(
            {
                "run_id": self.run_id,
                "event_id": event.event_id,
                "workflow_id": self.workflow_id,
                "activity": activity,
                "step": self.attributes.get(contract.AI_STATE.name),
                "attempt": attempt,
                "model": str(given.get("model", "")),
                "lane": "batch"
                if activity == contract.ACTIVITY_AWAIT_BATCH
                else given.get("lane", "sync"),
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cached_tokens": 0,
                "cost_usd": 0.0,
                "scheduled_at": utc(event.event_time),
                "ended_at": None,
                "latency_s": None,
                "outcome": "pending",
                "error": None,
            }
        )

    def _ended(self, call: _Call, event: HistoryEvent, outcome: str) -> dict[str, Any]:
        row = call.row
        row["ended_at"] = utc(event.event_time)
        row["latency_s"] = (
            row["ended_at"] - (call.started_at or row["scheduled_at"])
        ).total_seconds()
        row["outcome"] = outcome
        return row

    async def _completed(self, event: HistoryEvent) -> None:
        attributes = event.activity_task_completed_event_attributes
        if attributes.scheduled_event_id in self.plans:
            self.planned(await _decoded(self.converter, attributes.result.payloads))
        call = self.calls.get(attributes.scheduled_event_id)
        if call is None:
            return
        reply = LlmCallResult.model_validate(
            await _decoded(self.converter, attributes.result.payloads)
        )
        row = self._ended(call, event, reply.outcome)
        row.update(
            model=reply.model or row["model"],
            lane=reply.lane,
            prompt_tokens=reply.usage.prompt_tokens,
            completion_tokens=reply.usage.completion_tokens,
            cached_tokens=reply.usage.cached_tokens,
            cost_usd=reply.cost_usd or 0.0,
            error=reply.failure.error[:MAX_ERROR_CHARS] if reply.failure else None,
        )

    async def _marker(self, event: HistoryEvent) -> None:
        attributes = event.marker_recorded_event_attributes
        if attributes.marker_name != LOCAL_ACTIVITY_MARKER or "result" not in attributes.details:
            return
        data = await _decoded(self.converter, attributes.details["data"].payloads)
        if isinstance(data, dict) and data.get("activity_type") in PLAN_ACTIVITIES:
            self.planned(await _decoded(self.converter, attributes.details["result"].payloads))

    def planned(self, plan: Any) -> None:
        """Note the assignment a run's ``plan`` (decoded JSON) holds, if any."""
        found = plan.get("assignment") if isinstance(plan, dict) else None
        if found is not None:
            self.assignment = Assignment.model_validate(found)

    async def _failed(self, event: HistoryEvent, outcome: str) -> None:
        if outcome == "failed":
            attributes: Any = event.activity_task_failed_event_attributes
        elif outcome == "timed_out":
            attributes = event.activity_task_timed_out_event_attributes
        else:
            attributes = event.activity_task_canceled_event_attributes
        call = self.calls.get(attributes.scheduled_event_id)
        if call is None:
            return
        row = self._ended(call, event, outcome)
        if outcome != "cancelled":
            error = await self.converter.decode_failure(attributes.failure)
            kind = error.type if isinstance(error, ApplicationError) else type(error).__name__
            row["error"] = f"{kind}: {error}"[:MAX_ERROR_CHARS]

    async def _closed(self, event: HistoryEvent) -> None:
        kind = event.event_type
        found: Any = None
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
            found = await _decoded(self.converter, payloads)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            error = await self.converter.decode_failure(failure)
            if isinstance(error, ApplicationError) and error.type == errors.RUN_FAILED:
                result = result_in(error.details)
                found = result.model_dump(mode="json") if result is not None else None
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            payloads = event.workflow_execution_continued_as_new_event_attributes.input.payloads
            carried = await _decoded(self.converter, payloads)
            found = carried.get("carried") if carries_state(carried) else None
        if isinstance(found, dict):
            try:
                self.recorded = Recorded.model_validate(found)
            except ValidationError:
                # Not a result any pipeline returns (a run that ended without one): the run's
                # row and model calls are still its history's; it recorded no entries.
                self.recorded = Recorded()


async def project(
    workflow_id: str, run_id: str, events: Sequence[HistoryEvent], converter: DataConverter
) -> Projection:
    """The rows of run ``run_id`` of ``workflow_id`` from its ``events``, decoded with
    ``converter`` (the run's: `aiorch.ops.results.run_converter`).

    Raises:
        ValueError: the history does not start with the run's start event.
        Exception: the codec's or the converter's own errors (a payload this reader cannot
            decrypt or decode).
    """
    if not events or events[0].event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise ValueError(f"run {run_id} of {workflow_id} has no start event")
    start = events[0].workflow_execution_started_event_attributes
    started_at = utc(events[0].event_time)
    chain_id = start.first_execution_run_id or run_id
    given = await _decoded(converter, start.input.payloads)
    request = given.get("request", {}) if carries_state(given) else given
    request = request if isinstance(request, dict) else {}

    reader = _Reader(workflow_id, run_id, converter)
    reader._publish(start.search_attributes)
    if carries_state(given) and isinstance(given["carried"], dict):
        reader.planned(given["carried"].get("plan"))
    await reader.read(events)

    workflow_type = start.workflow_type.name
    pipeline = pipelines.of_type(workflow_type)
    calls = [call.row for call in reader.calls.values()]
    history = reader.recorded.history
    own = [
        (index, key, entry)
        for index, (key, entry) in enumerate(zip(entry_ids(history), history, strict=True))
        if utc(entry.at) >= started_at
    ]
    ids = {"chain_id": chain_id, "run_id": run_id, "workflow_id": workflow_id}
    decisions = [
        decision_row(ids, key, entry, history[:index])
        for index, key, entry in own
        if decides(entry)
    ]
    corrections = [
        row
        for correction in reader.recorded.corrections
        if utc(correction.at) >= started_at
        for row in correction_rows(ids, correction)
    ]
    attributes = reader.attributes
    state = reader.recorded.state or attributes.get(contract.AI_STATE.name)
    since = attributes.get(contract.AI_STATE_SINCE.name)
    answered = [call for call in calls if call["outcome"] == "answered"]
    rounds = [attributes.get(contract.AI_REVIEW_ROUND.name) or 0]
    rounds += [row["review_round"] or 0 for row in decisions]
    return Projection(
        assignment=reader.assignment,
        run={
            **ids,
            "workflow_type": workflow_type,
            "pipeline": pipeline.name if pipeline is not None else workflow_type,
            "pipeline_version": attributes.get(contract.AI_PIPELINE_VERSION.name)
            or next((c.pipeline_version for c in reader.recorded.corrections), None),
            "tenant": request.get("tenant") or DEFAULT_TENANT,
            "requester": request.get("requested_by"),
            "state": state,
            "state_since": utc(since) if since is not None else None,
            "awaiting_review": reader.status == "running" and state in pipelines.review_states(),
            "status": reader.status,
            "started_at": started_at,
            "ended_at": reader.ended_at,
            "cost_usd": round(sum(call["cost_usd"] for call in calls), 9),
            "prompt_tokens": sum(call["prompt_tokens"] for call in calls),
            "completion_tokens": sum(call["completion_tokens"] for call in calls),
            "cached_tokens": sum(call["cached_tokens"] for call in calls),
            "attempts": sum(call["outcome"] in ATTEMPTS for call in calls),
            "model": (answered or calls)[-1]["model"] if calls else None,
            "lane": calls[-1]["lane"] if calls else None,
            "review_rounds": max(rounds),
            "history_length": len(events),
            "experiment": reader.assignment.experiment if reader.assignment else None,
            "variant": reader.assignment.variant.name if reader.assignment else None,
        },
        transitions=[
            {
                **ids,
                "entry_id": key,
                "position": position,
                "from_state": entry.from_state,
                "to_state": entry.to_state,
                "event": entry.event,
                "at": utc(entry.at),
                "reason": entry.detail,
                "attempt": entry.attempt,
            }
            for position, (key, entry) in enumerate(
                (key, entry) for _, key, entry in own if entry.event not in NOTES
            )
        ],
        model_calls=calls,
        review_decisions=decisions,
        corrections=corrections,
    )
