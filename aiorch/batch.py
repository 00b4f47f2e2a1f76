"""Review many runs at once: ``starter.py review-all approve --state await_review``.

The runs are found through visibility (``AiState``), never by querying each run, and each one is
reviewed with the ``submit_review`` update, so every decision is validated by the run itself: a
run that left the review state in the meantime refuses it, and that refusal is counted, not
fatal. At most ``concurrency`` updates are in flight; transient server errors (a restart, a full
queue) are retried with backoff; a progress bar shows decisions per second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.reviews import update_id
from workflows import contract
from workflows.graph import State
from workflows.payloads import ReviewDecision, RunStatus

DEFAULT_CONCURRENCY = 32
REVIEWABLE_STATES = (State.AWAIT_REVIEW, State.ESCALATE)
_TRANSIENT = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED}
)
_ATTEMPTS = 8


@dataclass
class BatchReviewOutcome:
    """What a batch review did, run by run."""

    found: int = 0
    applied: int = 0
    refused: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        """Decisions applied per second of the whole batch."""
        return self.applied / self.seconds if self.seconds > 0 else 0.0


def waiting_query(state: State) -> str:
    """The visibility query for open runs waiting in ``state``."""
    return (
        f"WorkflowType = '{contract.WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
        f"AND {contract.SEARCH_ATTRIBUTE_STATE} = '{state.value}'"
    )


async def waiting_runs(client: Client, state: State, limit: int | None = None) -> list[str]:
    """Ids of the open runs that visibility shows in ``state`` (at most ``limit``)."""
    ids: list[str] = []
    async for execution in client.list_workflows(waiting_query(state), page_size=1000):
        ids.append(execution.id)
        if limit is not None and len(ids) >= limit:
            break
    return ids


async def _review_one(client: Client, workflow_id: str, decision: ReviewDecision) -> RunStatus:
    handle = client.get_workflow_handle(workflow_id)
    for attempt in range(_ATTEMPTS):
        try:
            # The same update id on a retry returns the first result instead of deciding again.
            status: RunStatus = await handle.execute_update(
                contract.UPDATE_SUBMIT_REVIEW,
                decision,
                id=update_id(workflow_id, decision.review_round, decision.reviewer),
                result_type=RunStatus,
            )
            return status
        except RPCError as err:
            if err.status not in _TRANSIENT or attempt == _ATTEMPTS - 1:
                raise
        await asyncio.sleep(min(0.25 * 2**attempt, 5.0))
    raise AssertionError("unreachable")


async def review_all(
    client: Client,
    ids: list[str],
    decision: ReviewDecision,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_done: Callable[[str, bool], None] | None = None,
) -> BatchReviewOutcome:
    """Send ``decision`` to every run in ``ids``, at most ``concurrency`` at a time.

    ``on_done(workflow_id, applied)`` is called after each run (for a progress display).
    """
    outcome = BatchReviewOutcome(found=len(ids))
    queue: asyncio.Queue[str] = asyncio.Queue()
    for workflow_id in ids:
        queue.put_nowait(workflow_id)

    async def reviewer() -> None:
        while True:
            try:
                workflow_id = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            applied = False
            try:
                await _review_one(client, workflow_id, decision)
                outcome.applied += 1
                applied = True
            except WorkflowUpdateFailedError as err:
                outcome.refused[workflow_id] = str(err.cause or err)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    outcome.refused[workflow_id] = "no open run with this id (it has finished)"
                else:
                    outcome.errors[workflow_id] = err.message
            if on_done is not None:
                on_done(workflow_id, applied)

    began = time.monotonic()
    await asyncio.gather(*(reviewer() for _ in range(max(1, min(concurrency, len(ids))))))
    outcome.seconds = time.monotonic() - began
    return outcome


async def review_all_with_progress(
    client: Client,
    ids: list[str],
    decision: ReviewDecision,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    console: Console | None = None,
) -> BatchReviewOutcome:
    """`review_all` with a progress bar (decisions done, rate, time left) on ``console``."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]:.0f}/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console or Console(stderr=True), transient=False) as bar:
        task = bar.add_task(f"{decision.decision}", total=len(ids), rate=0.0)
        began = time.monotonic()

        def advance(workflow_id: str, applied: bool) -> None:
            done = bar.tasks[task].completed + 1
            rate = done / max(time.monotonic() - began, 1e-6)
            bar.update(task, advance=1, rate=rate)

        return await review_all(client, ids, decision, concurrency=concurrency, on_done=advance)
