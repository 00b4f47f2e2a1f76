"""Operating on many runs at once: statistics, stuck-run detection and bulk actions.

Everything is read from visibility, so no worker is needed to look: ``AiState`` (Keyword) says
where each run is and ``AiStateSince`` (Datetime) since when; both are upserted on every
transition. A run no worker ever picked up has no ``AiStateSince`` yet; its start time stands
in. Results of closed runs supply the history for the approval delay.

Bulk actions on stuck runs are the ones an operator reaches for after an incident like "1,200
runs stuck waiting for review":

- ``timeout``: the ``expire_review`` signal ends the current review wait as its timeout would
  (``await_review`` -> ``escalate``, ``escalate`` -> ``dead_letter``);
- ``dead-letter``: the ``dead_letter`` signal times out every review wait at once, so the run
  dead-letters through its normal ``escalate`` path and sends its dead-letter message;
- ``cancel``: Temporal cancellation; the run compensates and ends ``cancelled``.

The two signals act only on runs in a review state (the workflow ignores them elsewhere), so
runs in other states are skipped, and reported as such.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from temporalio.client import Client, WorkflowExecution
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops.results import NoResult, run_result
from workflows import contract
from workflows.graph import REVIEW_STATES, STATES, Event, State
from workflows.observability import GRAPH_EVENTS
from workflows.payloads import HistoryEntry, OperatorRequest

AI_STATE = SearchAttributeKey.for_keyword(contract.SEARCH_ATTRIBUTE_STATE)
AI_STATE_SINCE = SearchAttributeKey.for_datetime(contract.SEARCH_ATTRIBUTE_STATE_SINCE)
FINAL_RESULT_STATES = (State.COMPLETED, State.FAILED, State.DEAD_LETTER)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


class StuckAction(StrEnum):
    """What to do with the stuck runs found."""

    NONE = "none"
    TIMEOUT = "timeout"
    CANCEL = "cancel"
    DEAD_LETTER = "dead-letter"


# The states each action can act on; None = any state.
ACTION_STATES: dict[StuckAction, frozenset[str] | None] = {
    StuckAction.NONE: frozenset(),
    StuckAction.TIMEOUT: REVIEW_STATES,
    StuckAction.DEAD_LETTER: REVIEW_STATES,
    StuckAction.CANCEL: None,
}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h30m``, ``2d``, ``500ms`` as a timedelta.

    Raises:
        ValueError: not a sequence of number+unit parts (units: ms, s, m, h, d, w).
    """
    compact = text.strip().lower().replace(" ", "")
    if not compact or _DURATION.sub("", compact):
        raise ValueError(
            f"{text!r} is not a duration; write it like 90s, 15m, 1h30m or 2d "
            "(units: ms, s, m, h, d, w)"
        )
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(compact))
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A short human form: ``850ms``, ``12.3s``, ``4m05s``, ``3h12m``, ``2d04h``."""
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def visibility_time(moment: datetime) -> str:
    """A datetime as a visibility query literal (RFC 3339, UTC)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def runs_query(extra: str = "") -> str:
    """The project's runs, optionally narrowed by a further clause."""
    query = f"WorkflowType = '{contract.WORKFLOW_TYPE}'"
    return f"{query} AND {extra}" if extra else query


def stuck_query(cutoff: datetime, state: State | None = None) -> str:
    """Open runs that entered their current state before ``cutoff`` (or never left idle)."""
    since, at = contract.SEARCH_ATTRIBUTE_STATE_SINCE, visibility_time(cutoff)
    clause = (
        f"ExecutionStatus = 'Running' AND "
        f"({since} < '{at}' OR ({since} IS NULL AND StartTime < '{at}'))"
    )
    if state is not None:
        clause += f" AND {contract.SEARCH_ATTRIBUTE_STATE} = '{state.value}'"
    return runs_query(clause)


@dataclass(frozen=True)
class StuckRun:
    """An open run and how long it has been in its state."""

    workflow_id: str
    state: str | None
    since: datetime

    def age(self, now: datetime) -> timedelta:
        return now - self.since


def stuck_run(execution: WorkflowExecution) -> StuckRun:
    attributes = execution.typed_search_attributes
    return StuckRun(
        workflow_id=execution.id,
        state=attributes.get(AI_STATE),
        since=attributes.get(AI_STATE_SINCE) or execution.start_time,
    )


async def find_stuck(
    client: Client,
    older_than: timedelta,
    *,
    state: State | None = None,
    now: datetime | None = None,
    limit: int | None = None,
) -> list[StuckRun]:
    """Open runs in one state for longer than ``older_than``, oldest first."""
    cutoff = (now or datetime.now(UTC)) - older_than
    runs = [
        stuck_run(execution)
        async for execution in client.list_workflows(stuck_query(cutoff, state), limit=limit)
    ]
    return sorted(runs, key=lambda run: run.since)


def applies(action: StuckAction, run: StuckRun) -> bool:
    """Whether ``action`` can act on ``run`` in its current state."""
    states = ACTION_STATES[action]
    return states is None or run.state in states


@dataclass
class ActionReport:
    """What a bulk action did, run by run."""

    action: StuckAction
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


async def apply_action(
    client: Client,
    runs: Sequence[StuckRun],
    action: StuckAction,
    *,
    operator: str = "starter.py stuck",
    reason: str | None = None,
    on_progress: Callable[[StuckRun], None] | None = None,
    concurrency: int = 20,
) -> ActionReport:
    """Apply ``action`` to every run it applies to, ``concurrency`` at a time.

    Runs are addressed by workflow id (their latest run). A run that closed meanwhile lands in
    ``failed`` with the server's reason; the others are unaffected.
    """
    report = ActionReport(action)
    gate = asyncio.Semaphore(concurrency)
    payload = OperatorRequest(operator=operator, reason=reason)

    async def one(run: StuckRun) -> None:
        async with gate:
            try:
                if not applies(action, run) or action is StuckAction.NONE:
                    report.skipped.append(run.workflow_id)
                    return
                handle = client.get_workflow_handle(run.workflow_id)
                if action is StuckAction.CANCEL:
                    await handle.cancel()
                else:
                    signal = (
                        contract.SIGNAL_EXPIRE_REVIEW
                        if action is StuckAction.TIMEOUT
                        else contract.SIGNAL_DEAD_LETTER
                    )
                    await handle.signal(signal, payload)
                report.done.append(run.workflow_id)
            except RPCError as error:
                gone = error.status == RPCStatusCode.NOT_FOUND
                report.failed[run.workflow_id] = "run is closed" if gone else error.message
            finally:
                if on_progress is not None:
                    on_progress(run)

    await asyncio.gather(*(one(run) for run in runs))
    return report


# Statistics.


@dataclass(frozen=True)
class StateCount:
    """How many runs carry ``AiState = state``, open and closed."""

    state: str
    open: int
    closed: int

    @property
    def total(self) -> int:
        return self.open + self.closed


@dataclass(frozen=True)
class DurationSummary:
    """A mean over some samples (None when there were none)."""

    mean: timedelta | None
    samples: int


@dataclass(frozen=True)
class RunStats:
    """The answer of ``starter.py stats``."""

    states: list[StateCount]
    total: int
    processing: dict[str, DurationSummary]
    approval_delay: DurationSummary
    runs_sampled: int

    def count(self, state: State | str) -> int:
        return next((c.total for c in self.states if c.state == str(state)), 0)

    @property
    def without_state(self) -> int:
        """Runs with no ``AiState`` (started by another tool before any worker took them)."""
        return self.total - sum(c.total for c in self.states)


def mean_duration(values: Iterable[timedelta]) -> DurationSummary:
    items = list(values)
    if not items:
        return DurationSummary(None, 0)
    return DurationSummary(sum(items, timedelta()) / len(items), len(items))


def approval_delays(history: Sequence[HistoryEntry]) -> list[timedelta]:
    """For each approval, the time since the run asked for that review (entered await_review).

    An escalation in between counts toward the delay; a reedit starts a new round.
    """
    delays: list[timedelta] = []
    asked: datetime | None = None
    for entry in history:
        if entry.event not in GRAPH_EVENTS:
            continue  # a note (refused review, continue-as-new), not a transition
        if entry.to_state == State.AWAIT_REVIEW.value:
            asked = entry.at
        elif entry.event == Event.APPROVE.value and asked is not None:
            delays.append(entry.at - asked)
            asked = None
    return delays


async def count_by_state(client: Client) -> tuple[list[StateCount], int]:
    """Runs per ``AiState`` value, open and closed, plus the total.

    The dev server's visibility cannot ``GROUP BY`` a custom search attribute, so this asks
    one count per state and status, all at once: exact, and no listing of runs.
    """
    key = contract.SEARCH_ATTRIBUTE_STATE

    async def count(clause: str) -> int:
        return (await client.count_workflows(runs_query(clause))).count

    states = list(STATES)
    counts = await asyncio.gather(
        count(""),
        *(count(f"{key} = '{s.value}' AND ExecutionStatus = 'Running'") for s in states),
        *(count(f"{key} = '{s.value}' AND ExecutionStatus != 'Running'") for s in states),
    )
    total, opened, closed = counts[0], counts[1 : len(states) + 1], counts[len(states) + 1 :]
    rows = [
        StateCount(state.value, o, c)
        for state, o, c in zip(states, opened, closed, strict=True)
        if o or c
    ]
    return rows, total


async def collect_stats(client: Client, *, sample: int = 200, concurrency: int = 10) -> RunStats:
    """Counts by state, and averages over the ``sample`` most recent runs that ended with a
    result (completed, or closed as failed with their result in the failure).

    Processing time is close minus start time (from visibility), per final state and overall;
    the approval delay comes from those runs' result histories (`approval_delays`).
    """
    states, total = await count_by_state(client)
    finals = ", ".join(f"'{s.value}'" for s in FINAL_RESULT_STATES)
    query = runs_query(
        f"ExecutionStatus IN ('Completed', 'Failed') "
        f"AND {contract.SEARCH_ATTRIBUTE_STATE} IN ({finals})"
    )
    closed = [e async for e in client.list_workflows(query, limit=sample)]
    by_state: dict[str, list[timedelta]] = {}
    for execution in closed:
        if execution.close_time is None:
            continue
        final = execution.typed_search_attributes.get(AI_STATE) or "?"
        elapsed = execution.close_time - execution.start_time
        by_state.setdefault(final, []).append(elapsed)
        by_state.setdefault("all", []).append(elapsed)
    processing = {name: mean_duration(values) for name, values in sorted(by_state.items())}

    gate = asyncio.Semaphore(concurrency)

    async def delays_of(execution: WorkflowExecution) -> list[timedelta]:
        async with gate:
            try:
                result = await run_result(client, execution.id, execution.run_id)
            except NoResult:
                return []
        return approval_delays(result.history)

    per_run = await asyncio.gather(*(delays_of(e) for e in closed))
    approval = mean_duration(delay for delays in per_run for delay in delays)
    return RunStats(states, total, processing, approval, len(closed))
