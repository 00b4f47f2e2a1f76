"""Redrive: start dead-lettered runs again, trusting Temporal, never the queue.

``starter.py dlq redrive`` is a thin wrapper around `redrive`. Anyone who can write to the queue
can write a message, so a message is only a pointer to a run (workflow id, run id): redrive acts
only when Temporal confirms that this exact run ended in ``dead_letter``, and starts the run's
own request from its history (`aiorch.ops.dead_runs`), never the message's copy. The run must also
still be the latest of its workflow id, checked right before the start.

What happens to each message:

====================================================  ================  ==========================
finding                                               action            message
====================================================  ================  ==========================
the body is not a dead-letter message                 skipped           left (visible again)
the run is still running (sent just before it ends)   skipped           left
another redrive holds the message                     skipped           left to that redrive
no such run, not ours, not ended in ``dead_letter``,  refused           left (see below)
continued as new, or its input is not a request
ended in ``dead_letter`` but a newer run exists       already_redriven  deleted
verified; started (or found started by another)       started / ...     deleted after the start
Temporal or SQS failed                                failed            left
====================================================  ================  ==========================

Refused messages are never deleted: redrive deletes only what it verified as handled. A forged
message is evidence of who can write to the queue, and a genuine one whose run is past retention
needs an operator's decision (its body may hold the only copy of the request). They stay in
``dlq list`` and in each redrive's report (exit status 1) until an operator deletes them.

Two operators at once start each dead-lettered run at most once. Messages are received with a
hold (visibility timeout) and worked on one at a time; each message's hold is renewed right
before it is worked on, and the holds of those still waiting every third of the hold, so a long
``--all`` keeps its messages from other redrives; a message whose hold cannot be renewed
(another consumer has it) is skipped. Two copies of one dead letter (a retried send), or a hold
that ran out anyway, still give one new run: the start itself cannot duplicate
(`aiorch.ops.dead_runs.start_again`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops import dead_runs
from aiorch.ops.dead_letters import DeadLetter, DeadLetterQueue, DeadLetterQueueError
from workflows.errors import OrchestratorError
from workflows.payloads import RequestBase

# Received messages stay hidden this long from other consumers; renewed while redrive works.
REDRIVE_HOLD = timedelta(minutes=5)

RedriveAction = Literal["started", "already_redriven", "refused", "skipped", "failed"]
ACTIONS: tuple[RedriveAction, ...] = (
    "started",
    "already_redriven",
    "refused",
    "skipped",
    "failed",
)


@dataclass(frozen=True)
class RedriveOutcome:
    """What redrive did with one message."""

    message_id: str
    workflow_id: str | None
    action: RedriveAction
    detail: str
    new_run_id: str | None = None


class _Holds:
    """Keeps the chosen messages hidden from other consumers while redrive works through them."""

    def __init__(self, queue: DeadLetterQueue, letters: list[DeadLetter], hold: timedelta) -> None:
        self._queue = queue
        self._pending = {letter.message_id: letter for letter in letters}
        self._hold = hold
        self._renewed_at = time.monotonic()

    async def take(self, letter: DeadLetter) -> bool:
        """Renew ``letter``'s hold for a full period (and the others' when due); False when
        another consumer has it now."""
        waiting = [x for x in self._pending.values() if x.message_id != letter.message_id]
        due = time.monotonic() - self._renewed_at > self._hold.total_seconds() / 3
        lost = await asyncio.to_thread(
            self._queue.hold, [letter, *waiting] if due else [letter], self._hold
        )
        if due:
            self._renewed_at = time.monotonic()
        for message_id in lost - {letter.message_id}:
            self._pending.pop(message_id, None)
        return letter.message_id not in lost

    def done(self, letter: DeadLetter) -> None:
        self._pending.pop(letter.message_id, None)


async def redrive(
    client: Client,
    queue: DeadLetterQueue,
    *,
    task_queue: str,
    select: str | None,
    progress: Callable[[str], None] = lambda _line: None,
    hold: timedelta = REDRIVE_HOLD,
) -> list[RedriveOutcome]:
    """Verify each dead letter against Temporal and start the verified runs again.

    Args:
        client: connected to the namespace the runs live in, with the worker's data converter.
        queue: the dead-letter queue.
        task_queue: where the new runs go (``TEMPORAL_TASK_QUEUE``).
        select: a workflow id (or SQS message id) to redrive only its messages; None for all.
        progress: called with one line per step, for the operator.
        hold: how long received messages stay hidden from other consumers between renewals.

    Raises:
        DeadLetterQueueError: the queue cannot be read, or ``select`` matches no message.
    """
    letters = await asyncio.to_thread(queue.receive_all, hold)
    chosen = [x for x in letters if select is None or select in (x.workflow_id, x.message_id)]
    chosen_ids = {x.message_id for x in chosen}
    await asyncio.to_thread(queue.release, [x for x in letters if x.message_id not in chosen_ids])
    if select is not None and not chosen:
        raise DeadLetterQueueError(f"no dead letter for {select} in the {queue.where}")
    progress(f"redriving {len(chosen)} dead letter(s) from the {queue.where}")
    holds = _Holds(queue, chosen, hold)
    # Tells this redrive's starts from another's in the new run's start event.
    identity = f"{client.identity} redrive {uuid.uuid4().hex[:12]}"
    outcomes = []
    for letter in chosen:
        name = letter.workflow_id or f"message {letter.message_id}"
        try:
            if not await holds.take(letter):
                outcome = RedriveOutcome(
                    letter.message_id, letter.workflow_id, "skipped", "another redrive holds it"
                )
                progress(f"{name}: skipped, another redrive holds message {letter.message_id}")
            else:
                outcome = await _redrive_one(client, queue, letter, task_queue, identity, progress)
        except (OrchestratorError, RPCError) as err:
            # Visible again for the next try; if SQS is down too, the hold runs out by itself.
            with contextlib.suppress(DeadLetterQueueError):
                await asyncio.to_thread(queue.release, [letter])
            outcome = RedriveOutcome(letter.message_id, letter.workflow_id, "failed", str(err))
            progress(f"{name}: not redriven: {err}")
        holds.done(letter)
        outcomes.append(outcome)
    return outcomes


async def _redrive_one(
    client: Client,
    queue: DeadLetterQueue,
    letter: DeadLetter,
    task_queue: str,
    identity: str,
    progress: Callable[[str], None],
) -> RedriveOutcome:
    body = letter.body
    if body is None:
        await asyncio.to_thread(queue.release, [letter])
        progress(f"message {letter.message_id}: skipped, {letter.problem}")
        return RedriveOutcome(letter.message_id, None, "skipped", letter.problem or "")
    wid = body.workflow_id
    try:
        dead = await dead_runs.verify_dead_run(client, wid, body.run_id, task_queue=task_queue)
    except dead_runs.NotRedrivable as no:
        await asyncio.to_thread(queue.release, [letter])
        kept = "message left in the queue"
        progress(f"{wid}: {no.action}: {no}; {kept}")
        return RedriveOutcome(letter.message_id, wid, no.action, f"{no}; {kept}")
    latest = await dead_runs.latest_run(client, wid)
    if latest != dead.run_id:
        return await _delete(queue, letter, f"run {latest} replaced it", progress)
    note = ""
    if _differs(body.request, dead.request):
        note = "; the message's request differs from the run's own, which was started"
        progress(f"{wid}: the message's request differs from the run's own; using the run's own")
    try:
        new_run = await dead_runs.start_again(
            client, dead, task_queue=task_queue, identity=identity
        )
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise
        why = "another run of this id started meanwhile"
        return await _delete(queue, letter, why, progress)
    if await dead_runs.started_by(client, wid, new_run) != identity:
        why = f"another redrive started run {new_run} for it"
        return await _delete(queue, letter, why, progress, new_run)
    progress(f"{wid}: started run {new_run} (replaces dead-lettered run {dead.run_id})")
    await asyncio.to_thread(queue.delete, letter)
    progress(f"{wid}: deleted message {letter.message_id}")
    return RedriveOutcome(letter.message_id, wid, "started", f"started{note}", new_run)


def _differs(copy: dict[str, Any], request: RequestBase) -> bool:
    """True when the message holds a whole request that is not the run's own (a cut or
    content-free copy is no request and proves nothing)."""
    try:
        return type(request).model_validate(copy) != request
    except ValidationError:
        return False


async def _delete(
    queue: DeadLetterQueue,
    letter: DeadLetter,
    why: str,
    progress: Callable[[str], None],
    new_run_id: str | None = None,
) -> RedriveOutcome:
    """Delete the message of a dead run that has been redriven already."""
    await asyncio.to_thread(queue.delete, letter)
    progress(f"{letter.workflow_id}: already redriven ({why}); deleted message {letter.message_id}")
    return RedriveOutcome(
        letter.message_id, letter.workflow_id, "already_redriven", why, new_run_id
    )


def summarize(outcomes: Sequence[RedriveOutcome]) -> str:
    """One line: how many runs were started, found already redriven, refused, skipped, failed."""
    counts = dict.fromkeys(ACTIONS, 0)
    for outcome in outcomes:
        counts[outcome.action] += 1
    return (
        f"{counts['started']} started, {counts['already_redriven']} already redriven, "
        f"{counts['refused']} refused, {counts['skipped']} skipped, {counts['failed']} failed"
    )
