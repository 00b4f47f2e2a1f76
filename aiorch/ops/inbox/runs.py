"""What the inbox shows: the runs waiting for a reviewer, and one run in full, each as its own
pipeline shows it.

The list comes from visibility: open runs of every pipeline on the worker's task queue (a
look-alike on another one decides its own query answers, so it is never asked) whose ``AiState``
is a review state, oldest wait first (``AiStateSince``), with the round they wait on
(``AiReviewRound``, where the workflow publishes it). What a reviewer reads of a run (what it
works on, the result under review, the problems found, until when it waits, who may decide) is
the run's own answer to the ``review_view`` query, built by its pipeline, read as
``aiorch review show`` reads it (`aiorch.ops.review_views`): the inbox never reads
a pipeline's activities out of the event history. A query is a billed action, so the list asks
each waiting run once per wait (cached by run and ``AiStateSince``: a new round or the
escalation is a new wait); the run page asks afresh (one action per page view, as the ``status``
query it replaces did). What each run works on (the list's summary) and the schema of its
fields come from its request, read from its start event once per run (``run_requests``; a
history read, not a billed action).

A reviewer sees only the runs they may decide, only while those wait: a run whose reviewers
(``allowed_reviewers``) leave them out, one they requested, or one that no longer waits is left
off their list, and its page answers as if there were no such run.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError

from aiorch.ops import visibility
from aiorch.ops.inbox.run_requests import RequestReader, fields_schema, summary
from aiorch.ops.review_views import (
    NoSuchRun,
    RunUnreadable,
    RunView,
    is_escalation,
    query_view,
    read_run,
)
from workflows import contract
from workflows.payloads import ReviewView

MAX_LISTED: Final = 200
_CACHE_SIZE: Final = 2048
# Queries in flight at once while the list is read.
_CONCURRENT_QUERIES: Final = 16


def waiting_query() -> str:
    """Open runs of every pipeline that wait in a review state."""
    return visibility.waiting_for_review()


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
    # What the run works on, in a few words (``run_requests.summary``).
    summary: str | None = None

    @property
    def deadline(self) -> datetime | None:
        """When this wait times out (escalates, or from escalate dead-letters)."""
        return self.view.deadline if self.view else None

    @property
    def escalated(self) -> bool:
        """Whether the wait is a review's escalation (its second chance)."""
        return is_escalation(self.state)


class RunReader:
    """Reads runs through one client (its data converter decodes, encryption included)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._cache: OrderedDict[str, ReviewView] = OrderedDict()
        self._requests = RequestReader(client)

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
                found = await self._requests.request(
                    execution.id, execution.run_id, execution.workflow_type or ""
                )
            return WaitingRun(
                workflow_id=execution.id,
                run_id=execution.run_id,
                state=attributes.get(contract.AI_STATE) or "?",
                since=since,
                review_round=attributes.get(contract.AI_REVIEW_ROUND),
                view=view,
                problem=problem,
                summary=summary(*found) if found is not None else None,
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
            run = await read_run(self._client, workflow_id)
        except NoSuchRun:
            raise NotYours(workflow_id) from None
        if not may_review(run.view, reviewer):
            raise NotYours(workflow_id)
        return run

    async def fields_schema(self, run: RunView) -> dict[str, Any] | None:
        """The JSON Schema ``run``'s fields are corrected against (``run_requests``; None: its
        pipeline names none, or its request cannot be read now)."""
        found = await self._requests.request(run.workflow_id, run.run_id, run.view.pipeline)
        return fields_schema(*found) if found is not None else None

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
        found = await query_view(self._client, workflow_id, run_id)
        self._cache[key] = found
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return found
