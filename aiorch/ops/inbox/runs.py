"""What the inbox shows: the runs waiting for a reviewer, and one run in full.

The list comes from visibility alone (no query, so no billed action per listed run): open
``AiOrchestrator`` runs whose ``AiState`` is ``await_review`` or ``escalate``, oldest wait first
(``AiStateSince``), with the round they wait on (``AiReviewRound``, where the workflow publishes
it). The deadline of a wait is ``AiStateSince`` plus the plan's ``review_timeout_s`` (in
``await_review``) or ``escalation_timeout_s`` (in ``escalate``): exactly when the workflow's own
timer fires, continue-as-new included (the wait keeps its start).

What visibility does not hold comes from the run's event history, decoded with the client's
data converter in the workflow's serialization context, so it works with payload encryption
on: the request (the start event's input; for a continued run, the request and state it
carries), the plan (``fetch_prompt``'s result: an activity, or the marker of the local activity
that fetches an inline message) and the reply under review (the last ``invoke_llm`` result, or
the carried one). What the list reads is cached per run and wait (``AiStateSince``): a new round
is a new wait, with a new reply. The run page reads afresh and adds the ``status`` query (one
billed action per page view): the history, earlier feedback and the current round.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter, WorkflowSerializationContext
from temporalio.service import RPCError

from workflows import contract
from workflows.continuation import parse_input
from workflows.payloads import (
    HistoryEntry,
    LlmCallResult,
    PipelineRequest,
    PromptPlan,
    RunStatus,
)

REVIEW_STATES: Final = ("await_review", "escalate")
MAX_LISTED: Final = 200
_CACHE_SIZE: Final = 2048
_LOCAL_ACTIVITY_MARKER: Final = "core_local_activity"
AI_STATE: Final = contract.AI_STATE
AI_STATE_SINCE: Final = contract.AI_STATE_SINCE
# Published by the workflow with every review wait; a run published by an older worker has
# none, which costs it only the round on the list (its page reads the round from status).
AI_REVIEW_ROUND: Final = contract.AI_REVIEW_ROUND
WAITING_QUERY: Final = (
    f"WorkflowType = '{contract.WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' AND "
    f"{contract.SEARCH_ATTRIBUTE_STATE} IN ('await_review', 'escalate')"
)


class RunUnreadable(Exception):
    """The run's history cannot be read or decoded here (the message says why, no content)."""


@dataclass(frozen=True)
class RunFacts:
    """What a run's event history says that visibility does not."""

    request: PipelineRequest | None
    plan: PromptPlan | None
    reply: LlmCallResult | None


@dataclass(frozen=True)
class WaitingRun:
    """One row of the inbox."""

    workflow_id: str
    run_id: str
    state: str
    since: datetime | None
    review_round: int | None
    facts: RunFacts | None
    problem: str | None = None

    @property
    def deadline(self) -> datetime | None:
        """When this wait times out (escalates, or from escalate dead-letters)."""
        return wait_deadline(self.state, self.since, self.facts.plan if self.facts else None)


@dataclass(frozen=True)
class RunView:
    """One run in full, for its page."""

    workflow_id: str
    run_id: str
    status: RunStatus
    since: datetime | None
    facts: RunFacts
    feedback: list[HistoryEntry] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Whether the run waits for a reviewer now."""
        return self.status.state in REVIEW_STATES

    @property
    def deadline(self) -> datetime | None:
        return wait_deadline(self.status.state, self.since, self.facts.plan)


def wait_deadline(state: str, since: datetime | None, plan: PromptPlan | None) -> datetime | None:
    """``since`` plus the plan's timeout for ``state``; None when either is unknown."""
    if since is None or plan is None or state not in REVIEW_STATES:
        return None
    seconds = plan.review_timeout_s if state == "await_review" else plan.escalation_timeout_s
    return since + timedelta(seconds=seconds)


def time_left(deadline: datetime | None, now: datetime) -> str:
    """``deadline`` as a short human duration from ``now`` ("3 h 5 min", "overdue")."""
    if deadline is None:
        return "unknown"
    seconds = int((deadline - now).total_seconds())
    if seconds <= 0:
        return "due now"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def earlier_feedback(history: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """The reedit decisions that came with feedback, oldest first."""
    return [entry for entry in history if entry.event == "reedit" and entry.feedback]


class RunReader:
    """Reads runs through one client (its data converter decodes, encryption included)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._cache: OrderedDict[str, RunFacts] = OrderedDict()

    async def waiting(self, limit: int = MAX_LISTED) -> list[WaitingRun]:
        """The runs waiting for a reviewer, oldest wait first (at most ``limit``)."""
        rows: list[WaitingRun] = []
        async for execution in self._client.list_workflows(WAITING_QUERY, limit=limit):
            attributes = execution.typed_search_attributes
            state = attributes.get(AI_STATE) or "?"
            facts: RunFacts | None = None
            problem: str | None = None
            since = attributes.get(AI_STATE_SINCE)
            try:
                # Keyed by the wait's start too: a new round (or the escalation) is a new
                # wait, with a new reply to show.
                facts = await self.facts(execution.id, execution.run_id, wait=since)
            except RunUnreadable as err:
                problem = str(err)
            rows.append(
                WaitingRun(
                    workflow_id=execution.id,
                    run_id=execution.run_id,
                    state=state,
                    since=since,
                    review_round=attributes.get(AI_REVIEW_ROUND),
                    facts=facts,
                    problem=problem,
                )
            )
        oldest = datetime.max.replace(tzinfo=UTC)
        rows.sort(key=lambda row: row.since or oldest)
        return rows

    async def view(self, workflow_id: str) -> RunView:
        """The run's latest execution in full.

        Raises:
            RunUnreadable: its history or a payload cannot be decoded here.
            temporalio.service.RPCError: no such run, or Temporal is unreachable.
        """
        handle = self._client.get_workflow_handle(workflow_id)
        description = await handle.describe()
        run_id = description.run_id
        facts = await self.facts(workflow_id, run_id, fresh=True)
        try:
            status: RunStatus = await self._client.get_workflow_handle(
                workflow_id, run_id=run_id
            ).query(contract.QUERY_STATUS, result_type=RunStatus)
        except RPCError:
            raise
        except Exception as err:  # the codec's and the converter's own errors
            raise RunUnreadable(
                f"the run's status cannot be read ({type(err).__name__}); does this inbox have "
                "the worker's PAYLOAD_KEYS?"
            ) from None
        since = description.typed_search_attributes.get(AI_STATE_SINCE)
        return RunView(
            workflow_id=workflow_id,
            run_id=run_id,
            status=status,
            since=since,
            facts=facts,
            feedback=earlier_feedback(status.history),
        )

    async def facts(
        self,
        workflow_id: str,
        run_id: str,
        *,
        wait: datetime | None = None,
        fresh: bool = False,
    ) -> RunFacts:
        """Request, plan and latest reply of one run, cached by run id and the start of the
        wait (``AiStateSince``): the reply changes with each round; ``fresh`` reads anew."""
        key = f"{run_id}@{wait.isoformat() if wait else '-'}"
        cached = self._cache.get(key)
        if cached is not None and not fresh and wait is not None:
            self._cache.move_to_end(key)
            return cached
        converter = self._client.data_converter.with_context(
            WorkflowSerializationContext(namespace=self._client.namespace, workflow_id=workflow_id)
        )
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            events = [event async for event in handle.fetch_history_events()]
            found = await _read_facts(events, converter)
        except (RunUnreadable, RPCError):
            raise
        except Exception as err:  # the codec's, the converter's and pydantic's own errors
            raise RunUnreadable(
                f"the run's history cannot be decoded ({type(err).__name__}); does this inbox "
                "have the worker's PAYLOAD_KEYS?"
            ) from None
        self._cache[key] = found
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return found


async def _decode_one(converter: DataConverter, payloads: Sequence[Payload]) -> Any:
    values = await converter.decode(list(payloads))
    return values[0] if values else None


def _marker_activity_type(event: HistoryEvent) -> str | None:
    """The activity type a local-activity marker records (its ``data`` detail, plain JSON
    written by the SDK's core, not by the payload codec)."""
    attributes = event.marker_recorded_event_attributes
    if attributes.marker_name != _LOCAL_ACTIVITY_MARKER or "data" not in attributes.details:
        return None
    for payload in attributes.details["data"].payloads:
        try:
            value = json.loads(payload.data)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("activity_type"), str):
            return str(value["activity_type"])
    return None


async def _read_facts(events: Sequence[HistoryEvent], converter: DataConverter) -> RunFacts:
    request: PipelineRequest | None = None
    plan: PromptPlan | None = None
    reply: LlmCallResult | None = None
    scheduled: dict[int, str] = {}
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            raw = await _decode_one(
                converter, event.workflow_execution_started_event_attributes.input.payloads
            )
            request, carried = parse_input(raw)
            if carried is not None:
                plan, reply = carried.plan, carried.reply
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes_done = event.activity_task_completed_event_attributes
            name = scheduled.get(attributes_done.scheduled_event_id)
            if name in (contract.ACTIVITY_FETCH_PROMPT, contract.ACTIVITY_INVOKE_LLM):
                value = await _decode_one(converter, attributes_done.result.payloads)
                if name == contract.ACTIVITY_FETCH_PROMPT:
                    plan = PromptPlan.model_validate(value)
                else:
                    reply = LlmCallResult.model_validate(value)
        elif (
            kind == EventType.EVENT_TYPE_MARKER_RECORDED
            and _marker_activity_type(event) == contract.ACTIVITY_FETCH_PROMPT
        ):
            details = event.marker_recorded_event_attributes.details
            if "result" in details:
                value = await _decode_one(converter, details["result"].payloads)
                plan = PromptPlan.model_validate(value)
    return RunFacts(request=request, plan=plan, reply=reply)
