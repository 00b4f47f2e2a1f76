"""Review many runs at once: ``starter.py review-all approve --state await_review``.

The runs are found through visibility (``AiState``), never by querying each run. Each run's
decision names the run's current review round (read with the ``status`` query, then built by a
`aiorch.ops.reviews.DecisionFor`) and is sent through `aiorch.ops.reviews.submit_review`, so its
update id is per round and every decision is validated by the run itself: a run that left the review
state or moved to another round in the meantime refuses it, and that refusal is counted, not
fatal. A run counts as *applied* only when the update's result shows this very decision recorded
for that round. At most ``concurrency`` runs are in flight; transient server errors (a restart,
a full queue) are retried with backoff (`aiorch.ops.retries`), with the same decision, so a
retry can never decide a later round; a progress bar shows decisions per second.
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

from aiorch.ops import reviews, visibility
from workflows.payloads import ReviewDecision

DEFAULT_CONCURRENCY = 32


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


def waiting_query(state: str) -> str:
    """The visibility query for open runs waiting in ``state``."""
    return visibility.runs_query(visibility.OPEN, visibility.state_is(state))


async def waiting_runs(client: Client, state: str, limit: int | None = None) -> list[str]:
    """Ids of the open runs that visibility shows in ``state`` (at most ``limit``)."""
    ids: list[str] = []
    async for execution in client.list_workflows(waiting_query(state), page_size=1000):
        ids.append(execution.id)
        if limit is not None and len(ids) >= limit:
            break
    return ids


async def review_one(
    client: Client,
    workflow_id: str,
    decide: reviews.DecisionFor,
    signer: reviews.Signer | None = None,
) -> reviews.ReviewOutcome | None:
    """Read the run's round, build its decision once, and send it (retrying transient errors),
    signed for that run and round by ``signer`` when reviewer authentication is on.

    Returns None, sending nothing, when the run has no review round yet (it never awaited one).

    Raises:
        WorkflowUpdateFailedError: the run refused the decision.
        RPCError: no such open run, or a server error that outlasted the retries.
    """
    decision, target = await reviews.decision_for_current_round(client, workflow_id, decide)
    if decision.review_round is None:
        return None
    return await reviews.submit_review(client, workflow_id, decision, signer=signer, target=target)


async def review_all(
    client: Client,
    ids: list[str],
    decision: ReviewDecision | reviews.DecisionFor,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_done: Callable[[str, bool], None] | None = None,
    signer: reviews.Signer | None = None,
) -> BatchReviewOutcome:
    """Send a decision to every run in ``ids`` on its current round, ``concurrency`` at a time.

    ``decision`` is either the same decision for every run (its round is replaced by each run's)
    or a `aiorch.ops.reviews.DecisionFor` that builds one per (run, round); ``signer`` signs each
    for its run and round. ``on_done(workflow_id, applied)`` is called after each run (for a
    progress display).
    """
    decide = reviews.for_each_round(decision) if isinstance(decision, ReviewDecision) else decision
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
                sent = await review_one(client, workflow_id, decide, signer)
            except WorkflowUpdateFailedError as err:
                outcome.refused[workflow_id] = str(err.cause or err)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    outcome.refused[workflow_id] = "no open run with this id (it has finished)"
                else:
                    outcome.errors[workflow_id] = err.message
            else:
                applied = sent is not None and sent.applied
                if applied:
                    outcome.applied += 1
                elif sent is None:
                    outcome.refused[workflow_id] = "run is not awaiting review (no review round)"
                else:
                    outcome.refused[workflow_id] = sent.describe(workflow_id)
            if on_done is not None:
                on_done(workflow_id, applied)

    began = time.monotonic()
    await asyncio.gather(*(reviewer() for _ in range(max(1, min(concurrency, len(ids))))))
    outcome.seconds = time.monotonic() - began
    return outcome


async def review_all_with_progress(
    client: Client,
    ids: list[str],
    decision: ReviewDecision | reviews.DecisionFor,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    console: Console | None = None,
    signer: reviews.Signer | None = None,
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
        label = decision.decision if isinstance(decision, ReviewDecision) else "review"
        task = bar.add_task(label, total=len(ids), rate=0.0)
        began = time.monotonic()

        def advance(workflow_id: str, applied: bool) -> None:
            done = bar.tasks[task].completed + 1
            rate = done / max(time.monotonic() - began, 1e-6)
            bar.update(task, advance=1, rate=rate)

        return await review_all(
            client, ids, decision, concurrency=concurrency, on_done=advance, signer=signer
        )
