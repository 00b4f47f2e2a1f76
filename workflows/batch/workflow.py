"""``LlmBatch``: one run per group of batched model calls, from its submission to the provider's
batch API to the last answer handed back (docs/cost.md).

A run's ``invoke_llm`` in the batch lane puts its call in its model's open group (the capacity
store keeps the calls) and starts this group's workflow; the call that fills the group signals
``batch_full``. The workflow waits for that signal or the group's delay (one timer), then:

1. ``submit_batch`` writes the group's calls as one JSONL file, uploads it, creates the batch
   and records its id before anything else can fail, then tells each call's run which batch
   holds it (each run's ``invoke_llm`` completes, and the run waits in its batch state). A
   retried submission finds a batch it already created (recorded, or by a key in its
   metadata), so a group is never submitted twice;
2. polls the batch on durable timers (``poll_batch``), from a second apart up to the group's
   ``poll_s``;
3. ``collect_batch`` reads the answers and errors, prices and settles each call once, and
   completes each run's ``await_batch`` with its outcome;
4. an expired batch's unfinished calls are submitted again (a new round), at most ``rounds``
   batches in all; a cancelled or failed batch's fail, and their runs take their retry path.

Nothing a run waits for is in this workflow's history: calls and answers stay in the store, so
its history stays small however large the group (a few dozen events).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

import workflows.contract as contract
import workflows.engine.activity_policy as activity_policy
from workflows.payloads import (
    BatchCollected,
    BatchGroup,
    BatchPolled,
    BatchRound,
    BatchSubmitted,
)

# Submitting and collecting touch every call of a group (a file of up to 50,000 lines): long
# activities that heartbeat. Each is retried until it succeeds: a submission that cannot be made
# leaves its calls to time out in their runs (which retry), and a collection must hand back every
# answer the provider was paid for.
SUBMIT_TIMEOUT = timedelta(minutes=30)
COLLECT_TIMEOUT = timedelta(minutes=30)
POLL_TIMEOUT = timedelta(seconds=60)
UNTIL_IT_WORKS = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
)
# The first poll comes this soon after the submission; each later one twice as late, up to the
# group's poll_s (a real batch takes minutes to hours; the simulator's, seconds).
FIRST_POLL = timedelta(seconds=1)


@workflow.defn(name=contract.WORKFLOW_TYPE_LLM_BATCH)
class LlmBatch:
    """One group of batched model calls, submitted, polled and collected (module docstring)."""

    def __init__(self) -> None:
        self._full = False

    @workflow.signal(name=contract.SIGNAL_BATCH_FULL)
    def full(self) -> None:
        """The group is full: submit it now rather than after its delay."""
        self._full = True

    @workflow.run
    async def run(self, group: BatchGroup) -> BatchCollected:
        """Wait for the group to fill or its delay, then submit, poll and collect it."""
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: self._full,
                timeout=timedelta(seconds=group.delay_s),
                timeout_summary=f"group {group.group} of {group.model} fills",
            )
        total = BatchCollected()
        for number in range(group.rounds):
            batch = BatchRound(
                scope=group.scope, model=group.model, group=group.group, round=number
            )
            submitted: BatchSubmitted = await workflow.execute_activity(
                contract.ACTIVITY_SUBMIT_BATCH,
                batch,
                result_type=BatchSubmitted,
                start_to_close_timeout=SUBMIT_TIMEOUT,
                heartbeat_timeout=activity_policy.HEARTBEAT_TIMEOUT,
                retry_policy=UNTIL_IT_WORKS,
                summary=f"submit_batch: group {group.group}, round {number}",
            )
            if submitted.batch_id is None:
                break
            polled = await self._until_done(submitted.batch_id, group.poll_s)
            last = number == group.rounds - 1 or polled.status != "expired"
            collected: BatchCollected = await workflow.execute_activity(
                contract.ACTIVITY_COLLECT_BATCH,
                batch.model_copy(update={"batch_id": submitted.batch_id, "last": last}),
                result_type=BatchCollected,
                start_to_close_timeout=COLLECT_TIMEOUT,
                heartbeat_timeout=activity_policy.HEARTBEAT_TIMEOUT,
                retry_policy=UNTIL_IT_WORKS,
                summary=f"collect_batch: {submitted.batch_id} ({polled.status})",
            )
            total = BatchCollected(
                answered=total.answered + collected.answered,
                failed=total.failed + collected.failed,
                unfinished=collected.unfinished,
            )
            if last or not collected.unfinished:
                break
        return total

    async def _until_done(self, batch_id: str, poll_s: float) -> BatchPolled:
        """Poll the batch on timers, each twice as far apart as the last (up to ``poll_s``),
        until its status is final."""
        interval = min(FIRST_POLL, timedelta(seconds=poll_s))
        while True:
            await workflow.sleep(interval, summary=f"poll {batch_id}")
            polled: BatchPolled = await workflow.execute_activity(
                contract.ACTIVITY_POLL_BATCH,
                batch_id,
                result_type=BatchPolled,
                start_to_close_timeout=POLL_TIMEOUT,
                retry_policy=UNTIL_IT_WORKS,
                summary=f"poll_batch: {batch_id}",
            )
            if polled.done:
                return polled
            interval = min(interval * 2, timedelta(seconds=poll_s))
