"""What the inbox shows: the runs waiting for a reviewer, and one run in full, each as its own
pipeline shows it.

The list comes from visibility: open runs of every pipeline on the worker's task queue (a
look-alike on another one decides its own query answers, so it is never asked) whose ``AiState``
is a review state, oldest wait first (``AiStateSince``), with the round they wait on
(``AiReviewRound``, where the workflow publishes it). What a reviewer reads of a run (what it
works on, the result under review, the problems found, until when it waits, who may decide) is
the run's own answer to the ``review_view`` query, built by its pipeline: the inbox never reads
a pipeline's activities out of the event history. A query is a billed action, so the list asks
each waiting run once per wait (cached by run and ``AiStateSince``: a new round or the
escalation is a new wait); the run page asks afresh (one action per page view, as the ``status``
query it replaces did).

A reviewer sees only the runs they may decide, only while those wait: a run whose reviewers
(``allowed_reviewers``) leave them out, one they requested, or one that no longer waits is left
off their list, and its page answers as if there were no such run.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops import pipelines, visibility
from aiorch.ops.retries import retrying
from workflows import contract
from workflows.engine.graph import Event
from workflows.payloads import HistoryEntry, ReviewView

MAX_LISTED: Final = 200
_CACHE_SIZE: Final = 2048
# Queries in flight at once while the list is read.
_CONCURRENT_QUERIES: Final = 16


def waiting_query() -> str:
    """Open runs of every pipeline that wait in a review state."""
    return visibility.waiting_for_review()


class RunUnreadable(Exception):
    """The run cannot be read or decoded here (the message says why, no content)."""


class NotYours(Exception):
    """The run is not one this reviewer may decide now (or not one at all): their pages show
    nothing of it."""


def may_review(view: ReviewView, reviewer: str) -> bool:
    """Whether ``reviewer`` may decide the run ``view`` shows, now."""
    allowed = view.allowed_reviewers is None or reviewer in view.allowed_reviewers
    return view.waiting and allowed and reviewer != view.requested_by


@dataclass(frozen=True)
class WaitingRun:
    """One row of the inbox."""

    workflow_id: str
    run_id: str
    state: str
    since: datetime | None
    review_round: int | None
    view: ReviewView | None
    problem: str | None = None

    @property
    def deadline(self) -> datetime | None:
        """When this wait times out (escalates, or from escalate dead-letters)."""
        return self.view.deadline if self.view else None

    @property
    def escalated(self) -> bool:
        """Whether the wait is a review's escalation (its second chance)."""
        return self.state not in _FIRST_WAITS


@dataclass(frozen=True)
class RunView:
    """One run in full, for its page."""

    workflow_id: str
    run_id: str
    view: ReviewView
    feedback: list[HistoryEntry] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Whether the run waits for a reviewer now."""
        return self.view.waiting

    @property
    def deadline(self) -> datetime | None:
        return self.view.deadline

    @property
    def escalated(self) -> bool:
        """Whether the wait is a review's escalation (from there it is dead-lettered)."""
        return self.view.state not in _FIRST_WAITS


# The first review wait of each pipeline (the states a REVIEW_TIMEOUT leaves).
_FIRST_WAITS: Final = frozenset(
    t.source
    for graph in pipelines.graphs()
    for t in graph.transitions
    if t.event == Event.REVIEW_TIMEOUT
)


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
    return [entry for entry in history if entry.event == Event.REEDIT and entry.feedback]


class RunReader:
    """Reads runs through one client (its data converter decodes, encryption included)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._cache: OrderedDict[str, ReviewView] = OrderedDict()

    async def waiting(self, reviewer: str, limit: int = MAX_LISTED) -> list[WaitingRun]:
        """The runs waiting for ``reviewer`` (see `may_review`; a run that cannot be read is
        listed with its problem), oldest wait first (at most ``limit``)."""
        executions = [e async for e in self._client.list_workflows(waiting_query(), limit=limit)]
        gate = asyncio.Semaphore(_CONCURRENT_QUERIES)

        async def row(execution: WorkflowExecution) -> WaitingRun:
            attributes = execution.typed_search_attributes
            since = attributes.get(contract.AI_STATE_SINCE)
            view: ReviewView | None = None
            problem: str | None = None
            async with gate:
                try:
                    # Keyed by the wait's start too: a new round (or the escalation) is a new
                    # wait, with a new result to show.
                    view = await self._view(execution.id, execution.run_id, wait=since)
                except (RunUnreadable, RPCError) as err:
                    problem = str(err) if isinstance(err, RunUnreadable) else "not readable now"
            return WaitingRun(
                workflow_id=execution.id,
                run_id=execution.run_id,
                state=attributes.get(contract.AI_STATE) or "?",
                since=since,
                review_round=attributes.get(contract.AI_REVIEW_ROUND),
                view=view,
                problem=problem,
            )

        rows = [
            found
            for found in await asyncio.gather(*(row(e) for e in executions))
            if found.view is None or may_review(found.view, reviewer)
        ]
        oldest = datetime.max.replace(tzinfo=UTC)
        rows.sort(key=lambda found: found.since or oldest)
        return rows

    async def view(self, workflow_id: str, reviewer: str) -> RunView:
        """The run's latest execution in full, asked afresh, for ``reviewer``.

        Raises:
            NotYours: ``reviewer`` may not decide it now (see `may_review`), or it is no run.
            RunUnreadable: its answer cannot be decoded here.
            temporalio.service.RPCError: Temporal is unreachable.
        """
        try:
            description = await retrying(self._client.get_workflow_handle(workflow_id).describe)
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise NotYours(workflow_id) from None
            raise
        if (
            description.task_queue != pipelines.task_queue()
            or pipelines.of_type(description.workflow_type) is None
        ):
            # A look-alike decides what its queries answer: never ask it.
            raise NotYours(workflow_id)
        view = await self._view(workflow_id, description.run_id, fresh=True)
        if not may_review(view, reviewer):
            raise NotYours(workflow_id)
        return RunView(
            workflow_id=workflow_id,
            run_id=description.run_id,
            view=view,
            feedback=earlier_feedback(view.history),
        )

    async def _view(
        self,
        workflow_id: str,
        run_id: str,
        *,
        wait: datetime | None = None,
        fresh: bool = False,
    ) -> ReviewView:
        """The run's ``review_view``, cached by run id and the start of the wait
        (``AiStateSince``); ``fresh`` asks anew."""
        key = f"{run_id}@{wait.isoformat() if wait else '-'}"
        cached = self._cache.get(key)
        if cached is not None and not fresh and wait is not None:
            self._cache.move_to_end(key)
            return cached
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            found: ReviewView = await retrying(
                lambda: handle.query(contract.QUERY_REVIEW_VIEW, result_type=ReviewView)
            )
        except RPCError:
            raise
        except Exception as err:  # the codec's and the converter's own errors
            raise RunUnreadable(
                f"the run cannot be read ({type(err).__name__}); does this inbox have the "
                "worker's PAYLOAD_KEYS?"
            ) from None
        self._cache[key] = found
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return found
