"""Statistics over many runs: how many are in each state, and how long they take.

Counts come from visibility (`aiorch.ops.visibility`), so no worker is needed to look; the
results of recently closed runs supply the history for the approval delay (overall, and per
pipeline and the review policy's group that decided) and the count of auto-approvals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio.client import Client, WorkflowExecution

from aiorch.ops import pipelines, visibility
from aiorch.ops.results import NoResult, run_result
from workflows.engine.graph import Event
from workflows.payloads import HistoryEntry


@dataclass(frozen=True)
class StateCount:
    """How many runs of ``pipeline`` carry ``AiState = state``, open and closed."""

    pipeline: str
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


# The group an approval made under no review policy's group is counted in.
NO_GROUP = "-"


@dataclass(frozen=True)
class Approval:
    """One approval a reviewer made: how long after the round began, and the group that
    decided (``NO_GROUP`` outside a policy's group)."""

    delay: timedelta
    group: str = NO_GROUP


@dataclass(frozen=True)
class RunStats:
    """The answer of ``starter.py stats``: ``approval_by`` is the approval delay per (pipeline,
    group); ``auto_approved`` the results an auto-approve rule approved."""

    states: list[StateCount]
    total: int
    processing: dict[str, DurationSummary]
    approval_delay: DurationSummary
    runs_sampled: int
    approval_by: dict[tuple[str, str], DurationSummary] = field(default_factory=dict)
    auto_approved: int = 0

    def count(self, state: str, pipeline: str | None = None) -> int:
        """Runs in ``state`` (of ``pipeline``, or of every pipeline)."""
        return sum(
            c.total
            for c in self.states
            if c.state == state and (pipeline is None or c.pipeline == pipeline)
        )

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
    """For each approval by a reviewer, the time since the run asked for that review (entered
    a review state from outside one).

    An escalation in between counts toward the delay; a reedit starts a new round; an approval
    by an auto-approve rule is no reviewer's.
    """
    return [approval.delay for approval in approvals(history)]


def approvals(history: Sequence[HistoryEntry]) -> list[Approval]:
    """Each approval by a reviewer, its delay (see `approval_delays`) and its group."""
    waiting = pipelines.review_states()
    found: list[Approval] = []
    asked: datetime | None = None
    for entry in history:
        if entry.from_state == entry.to_state:
            continue  # a note (continued as new, a vote), not a transition
        if entry.to_state in waiting and entry.from_state not in waiting:
            asked = entry.at
        elif entry.event in (Event.APPROVE, Event.CORRECT) and asked is not None:
            if entry.rule is None:
                found.append(Approval(entry.at - asked, entry.group or NO_GROUP))
            asked = None
    return found


def auto_approvals(history: Sequence[HistoryEntry]) -> int:
    """The approvals an auto-approve rule made."""
    return sum(1 for entry in history if entry.event == Event.APPROVE and entry.rule is not None)


async def count_by_state(client: Client) -> tuple[list[StateCount], int]:
    """Runs per pipeline and ``AiState`` value, open and closed, plus the total.

    The dev server's visibility cannot ``GROUP BY`` a custom search attribute, so this asks
    one count per pipeline, state and status, all at once: exact, and no listing of runs.
    """

    async def count(*clauses: str, pipeline: str | None = None) -> int:
        query = visibility.runs_query(*clauses, pipeline=pipeline)
        return (await client.count_workflows(query)).count

    cells = [(p.name, state) for p in pipelines.every() for state in p.graph.states]
    counts = await asyncio.gather(
        count(),
        *(count(visibility.state_is(s), visibility.OPEN, pipeline=p) for p, s in cells),
        *(count(visibility.state_is(s), visibility.CLOSED, pipeline=p) for p, s in cells),
    )
    total, opened, closed = counts[0], counts[1 : len(cells) + 1], counts[len(cells) + 1 :]
    rows = [
        StateCount(pipeline, state, o, c)
        for (pipeline, state), o, c in zip(cells, opened, closed, strict=True)
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

    async def history_of(execution: WorkflowExecution) -> list[HistoryEntry]:
        async with gate:
            try:
                result = await run_result(client, execution.id, execution.run_id)
            except NoResult:
                return []
        return result.history

    histories = await asyncio.gather(*(history_of(e) for e in closed))
    by: dict[tuple[str, str], list[timedelta]] = {}
    every: list[timedelta] = []
    for execution, history in zip(closed, histories, strict=True):
        pipeline = pipelines.of_type(execution.workflow_type)
        name = pipeline.name if pipeline is not None else execution.workflow_type
        for approval in approvals(history):
            by.setdefault((name, approval.group), []).append(approval.delay)
            every.append(approval.delay)
    return RunStats(
        states,
        total,
        processing,
        mean_duration(every),
        len(closed),
        approval_by={key: mean_duration(values) for key, values in sorted(by.items())},
        auto_approved=sum(auto_approvals(history) for history in histories),
    )
