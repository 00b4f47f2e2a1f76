"""Statistics over many runs: how many are in each state, and how long they take.

Counts come from visibility (`aiorch.ops.visibility`), so no worker is needed to look; the
results of recently closed runs supply the history for the approval delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.client import Client, WorkflowExecution

from aiorch.ops import visibility
from aiorch.ops.results import NoResult, run_result
from workflows.graph import STATES, Event, State
from workflows.observability import GRAPH_EVENTS
from workflows.payloads import HistoryEntry


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

    async def count(*clauses: str) -> int:
        return (await client.count_workflows(visibility.runs_query(*clauses))).count

    states = list(STATES)
    counts = await asyncio.gather(
        count(),
        *(count(visibility.state_is(s), visibility.OPEN) for s in states),
        *(count(visibility.state_is(s), visibility.CLOSED) for s in states),
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
    query = visibility.runs_query(
        visibility.ENDED_WITH_RESULT, visibility.state_in(visibility.FINAL_STATES)
    )
    closed = [e async for e in client.list_workflows(query, limit=sample)]
    by_state: dict[str, list[timedelta]] = {}
    for execution in closed:
        if execution.close_time is None:
            continue
        final = visibility.state_of(execution) or "?"
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
