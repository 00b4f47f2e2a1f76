"""A recorded run as the replay lab reads it: its request, when it first entered the fork
state, the outputs of the activities it ran before then (a fork's seed), and how it ended from
there (the report's "original").

Everything is read from the run's event history, decoded with the run's converter
(`aiorch.ops.results.run_converter`, so encrypted runs are read with the workers' keys), and
its transitions and model calls through the ledger's projection (`aiorch.ops.ledger.project`).
Nothing is written: the original's history stays as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from aiorch.ops import pipelines
from aiorch.ops.lab.outcomes import ForkOutcome, ModelUse
from aiorch.ops.ledger import Projection, project
from aiorch.ops.results import run_converter
from workflows import errors
from workflows.engine.forks import MAX_RECORDED, RecordedOutput
from workflows.engine.graph import DEAD_LETTER, FAILED, Graph
from workflows.payloads import Assignment, HistoryEntry

_ACTIVITY_FAILURES = frozenset(
    {
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
    }
)


class NotForkable(Exception):
    """This run cannot be forked from that state; the message says why (the lab's skipped)."""


@dataclass(frozen=True)
class Original:
    """A recorded run, read for a fork from ``from_state``."""

    workflow_id: str
    run_id: str
    workflow_type: str
    pipeline: str
    request: dict[str, Any]
    forked_at: datetime
    recorded: list[RecordedOutput]
    outcome: ForkOutcome
    assignment: Assignment | None = None


async def _decoded(converter: DataConverter, payloads: Sequence[Any]) -> Any:
    values = await converter.decode(list(payloads)) if payloads else []
    return values[0] if values else None


def model_use(projection: Projection, since: datetime) -> ModelUse:
    """The model calls of a projected run scheduled at or after ``since`` (naive UTC)."""
    calls = [call for call in projection.model_calls if call["scheduled_at"] >= since]
    return ModelUse(
        calls=len(calls),
        prompt_tokens=sum(call["prompt_tokens"] for call in calls),
        completion_tokens=sum(call["completion_tokens"] for call in calls),
        cost_usd=round(sum(call["cost_usd"] for call in calls), 9),
        latency_s=round(sum(call["latency_s"] or 0.0 for call in calls), 6),
    )


async def read_original(client: Client, workflow_id: str, run_id: str, from_state: str) -> Original:
    """Run ``run_id`` of ``workflow_id``, read for a fork from ``from_state``.

    Raises:
        NotForkable: it never entered ``from_state``, it is a continued run, it is not a
            pipeline's run, or an activity failed before ``from_state`` (a failure is not an
            output a fork can be given).
        temporalio.service.RPCError: the history could not be read.
    """
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    events = history.events
    converter = run_converter(client, workflow_id)
    start = events[0].workflow_execution_started_event_attributes
    if start.continued_execution_run_id:
        raise NotForkable("a continued run (continue-as-new): its earlier steps are not in it")
    pipeline = pipelines.of_type(start.workflow_type.name)
    if pipeline is None:
        raise NotForkable(f"no registered pipeline runs {start.workflow_type.name}")
    projection = await project(workflow_id, run_id, events, converter)
    entered = next((t for t in projection.transitions if t["to_state"] == from_state), None)
    if entered is None:
        raise NotForkable(f"it never reached {from_state}")
    forked_at: datetime = entered["at"]
    request = await _decoded(converter, start.input.payloads)
    result = await _result(converter, events[-1])
    return Original(
        workflow_id=workflow_id,
        run_id=run_id,
        workflow_type=start.workflow_type.name,
        pipeline=pipeline.name,
        request=request if isinstance(request, dict) else {},
        forked_at=forked_at,
        recorded=await _outputs_before(converter, events, forked_at, from_state),
        outcome=_outcome(workflow_id, run_id, projection, result, pipeline.graph, forked_at),
        assignment=projection.assignment,
    )


async def read_outcome(client: Client, workflow_id: str, run_id: str) -> ForkOutcome:
    """How run ``run_id`` of ``workflow_id`` ended, as the lab reads an original's outcome
    (from the run's start: its result, its problems, whether a reviewer decided it).

    Raises:
        NotForkable: it is not a pipeline's run.
        temporalio.service.RPCError: the history could not be read.
    """
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    events = history.events
    converter = run_converter(client, workflow_id)
    start = events[0].workflow_execution_started_event_attributes
    pipeline = pipelines.of_type(start.workflow_type.name)
    if pipeline is None:
        raise NotForkable(f"no registered pipeline runs {start.workflow_type.name}")
    projection = await project(workflow_id, run_id, events, converter)
    result = await _result(converter, events[-1])
    started = events[0].event_time.ToDatetime()
    return _outcome(workflow_id, run_id, projection, result, pipeline.graph, started)


async def _outputs_before(
    converter: DataConverter, events: Sequence[HistoryEvent], until: datetime, from_state: str
) -> list[RecordedOutput]:
    """What each activity that ended by ``until`` returned, in the order they ended."""
    scheduled: dict[int, str] = {}
    outputs: list[RecordedOutput] = []
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
            continue
        if kind not in _ACTIVITY_FAILURES and kind != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        if event.event_time.ToDatetime() > until:
            break
        if kind in _ACTIVITY_FAILURES:
            raise NotForkable(f"an activity failed before {from_state}: a fork cannot replay it")
        completed = event.activity_task_completed_event_attributes
        result = await _decoded(converter, completed.result.payloads)
        outputs.append(
            RecordedOutput(activity=scheduled[completed.scheduled_event_id], result=result)
        )
    if len(outputs) > MAX_RECORDED:
        raise NotForkable(f"it ran {len(outputs)} activities before {from_state}")
    return outputs


async def _result(converter: DataConverter, close: HistoryEvent) -> dict[str, Any]:
    """The run's result (a completed run's, or the one its ``RunFailed`` failure carries)."""
    found: Any = None
    if close.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        payloads = close.workflow_execution_completed_event_attributes.result.payloads
        found = await _decoded(converter, payloads)
    elif close.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        failure = close.workflow_execution_failed_event_attributes.failure
        error = await converter.decode_failure(failure)
        if isinstance(error, ApplicationError) and error.type == errors.RUN_FAILED:
            found = next((d for d in error.details if isinstance(d, dict)), None)
    return found if isinstance(found, dict) else {}


def _outcome(
    workflow_id: str,
    run_id: str,
    projection: Projection,
    result: dict[str, Any],
    graph: Graph,
    since: datetime,
) -> ForkOutcome:
    """How the original did from the fork state: its end, its result, whether a reviewer
    (not an auto-approve rule) decided it after ``since``, its model calls since."""
    problems = [
        f"{problem.get('field')}: {problem.get('message')}"
        for problem in result.get("problems") or []
        if isinstance(problem, dict)
    ]
    entries = [HistoryEntry.model_validate(entry) for entry in result.get("history") or []]
    # A reviewer's decision (or a wait that timed out) leaves a review state without a rule.
    reviewed = any(
        entry.from_state in graph.review_states
        and entry.rule is None
        and entry.at.astimezone(UTC).replace(tzinfo=None) >= since
        for entry in entries
    )
    state = projection.run["state"] or "unknown"
    return ForkOutcome(
        kind="original",
        workflow_id=workflow_id,
        run_id=run_id,
        state=state,
        # A run that failed is an outcome with an error, as a failed fork is: no rule passes it.
        error=f"the run ended {state}" if state in (FAILED, DEAD_LETTER) else None,
        model=projection.run["model"],
        text=result.get("content"),
        fields=result.get("fields"),
        problems=problems,
        needs_review=reviewed,
        use=model_use(projection, since),
    )
