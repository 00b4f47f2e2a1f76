"""The batch lane (docs/cost.md): model calls made through the provider's batch API (OpenAI's
Files and Batches, which compatible providers copy), at about half the price, answered within
24 hours.

- ``BatchLane.enqueue`` (inside a run's ``invoke_llm``, once the call is admitted and its spend
  reserved): the call joins its model's open group in the capacity store, the group's
  ``LlmBatch`` workflow is started (or, by the call that fills the group, signalled), and the
  activity is left to be completed by that workflow once the call's batch is submitted.
- ``submit_batch``: the group's calls as one JSONL file (one Chat Completions request a line,
  named by the call's ``custom_id``), uploaded; the batch created; its id recorded at once; then
  each run told which batch holds its call (its ``invoke_llm`` completes). The create call takes
  no idempotency key, so a retried submission first looks for the batch an earlier attempt may
  have created, by the key in its ``metadata``: a group is submitted at most once a round. Calls
  whose runs stopped waiting are left out (their runs retry).
- ``poll_batch``: the batch's status.
- ``collect_batch``: the output and error files, matched to calls by ``custom_id`` (not in
  input order). Each answered call is priced at the batch rate, its spend settled once (by its
  idempotency key: a collection run again counts nothing twice), its metrics recorded then, and
  its outcome handed to the run's ``await_batch`` (or kept for it). A failed call goes back as a
  failure (the run's retry path); a call an expired batch left unfinished is submitted again.
- ``await_batch`` (the run, waiting in its batch state): the call's outcome if it is in, else
  the activity is left to be completed by the collection.

Activities are completed by their task tokens, which stay in the store (never in a history, a
signal or a search attribute): nothing but this worker fleet can hand a run an answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import openai
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.batch_calls import batched, hold_text, item_name, unavailable
from activities.batch_collection import BatchCollection
from activities.batch_groups import HeldByAnother, new_owner, start_group
from activities.batch_submission import BatchSubmission
from activities.capacity import CallGate
from activities.llm_errors import classify
from activities.redaction import scrubbed_error
from activities.spend import SpendHold
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStoreError
from aiorch_runtime.capacity_keys import scope_name
from workflows import contract, errors
from workflows.payloads import (
    AwaitBatchInput,
    BatchGroup,
    BatchPolled,
    CallFailure,
    LlmCallInput,
    LlmCallResult,
)

FINAL_STATUSES: Final = frozenset({"completed", "failed", "expired", "cancelled"})
# A call whose run's invoke_llm has less than this left is not submitted: the run is about to
# stop waiting for it (and retry), and nobody would take up its answer.
QUEUE_MARGIN: Final = timedelta(seconds=30)


@dataclass(frozen=True)
class BatchSettings:
    """How the batch lane groups calls: at most ``size`` a group, submitted ``delay`` after
    its first call (or once full), polled at most every ``poll``; its ``LlmBatch`` workflows
    run on ``task_queue``, for the provider at ``base_url``."""

    size: int
    delay: timedelta
    poll: timedelta
    task_queue: str
    base_url: str


class BatchLane:
    """Hands a run's admitted call to the batch lane (see the module docstring)."""

    def __init__(
        self,
        store: BatchStore,
        temporal: Client,
        settings: BatchSettings,
        *,
        gate: CallGate | None = None,
    ) -> None:
        self._store = store
        self._temporal = temporal
        self._settings = settings
        self._gate = gate

    async def enqueue(
        self, call: LlmCallInput, hold: SpendHold | None, *, pipeline: str, digest: str | None
    ) -> LlmCallResult:
        """Queue ``call`` (its spend ``hold`` reserved) in its model's open group and make
        sure the group's workflow runs; the activity is then completed by that workflow once
        the call's batch is submitted (``activity.raise_complete_async``). Returns at once
        only for a call queued before whose batch is known.

        Raises:
            ApplicationError: ``LlmRetryable`` when the store or Temporal cannot take the call
                (its reservation is given back; the run retries).
        """
        info = activity.info()
        scope = scope_name(self._settings.base_url, call.model)
        item = item_name(call)
        try:
            queued = await self._store.enqueue(
                scope,
                item,
                call=call.model_dump_json(),
                token=info.task_token,
                pipeline=pipeline,
                spend=hold_text(hold),
                cache=digest or "",
                size=self._settings.size,
                queue=_time_left(info) - QUEUE_MARGIN,
                owner=new_owner(),
                run=info.workflow_id or "",
            )
            if queued.again and (batch_id := await self._store.batch_of(scope, queued.group, 0)):
                return batched(call, item, batch_id)
        except CapacityStoreError as err:
            await self._give_back(hold)
            raise unavailable(f"the batch lane cannot queue the call ({err})") from None
        group = BatchGroup(
            scope=scope,
            model=call.model,
            group=queued.group,
            delay_s=self._settings.delay.total_seconds(),
            poll_s=self._settings.poll.total_seconds(),
        )
        try:
            if queued.full:
                await self._start(group, queued.owner, full=True)
            elif not queued.started:
                await self._start(group, queued.owner, full=False)
                await self._store.mark_started(scope, queued.group)
        except HeldByAnother:
            # Nobody joins this group any more; the run retries into the next one.
            with contextlib.suppress(CapacityStoreError):
                await self._store.claim(scope, queued.group)
                await self._store.withdraw(scope, queued.group, item)
            await self._give_back(hold)
            raise unavailable(
                f"group {queued.group}'s workflow id is held by a run the batch lane did not "
                "start; the call goes into the next group"
            ) from None
        except (RPCError, CapacityStoreError) as err:
            # Not withdrawn, the call is submitted after all: its answer then goes unused.
            with contextlib.suppress(CapacityStoreError):
                await self._store.withdraw(scope, queued.group, item)
            await self._give_back(hold)
            raise unavailable(f"the batch lane cannot start group {queued.group} ({err})") from None
        activity.raise_complete_async()

    async def _start(self, group: BatchGroup, owner: str, *, full: bool) -> None:
        await start_group(self._temporal, group, owner, self._settings.task_queue, full=full)

    async def _give_back(self, hold: SpendHold | None) -> None:
        if self._gate is not None and hold is not None:
            await self._gate.release(hold)


class BatchActivities(BatchSubmission, BatchCollection):
    """``submit_batch``, ``poll_batch``, ``collect_batch`` and ``await_batch``, with the
    provider's client, Temporal's, the store and the LLM activity's pricing, metrics and
    request building injected by the worker (see the module docstring). Submission and
    collection are their own modules (``activities.batch_submission``,
    ``activities.batch_collection``)."""

    @property
    def activities(self) -> tuple[Callable[..., Any], ...]:
        """The four activities, for a worker to register."""
        return (self.submit_batch, self.poll_batch, self.collect_batch, self.await_batch)

    @activity.defn(name=contract.ACTIVITY_POLL_BATCH)
    async def poll_batch(self, batch_id: str) -> BatchPolled:
        """The batch's status and request counts."""
        try:
            found = await self._client.batches.retrieve(batch_id)
        except openai.OpenAIError as err:
            raise scrubbed_error(classify(err), [self._client.api_key]) from None
        counts = found.request_counts
        return BatchPolled(
            status=found.status,
            done=found.status in FINAL_STATUSES,
            completed=counts.completed if counts else 0,
            failed=counts.failed if counts else 0,
            total=counts.total if counts else 0,
        )

    @activity.defn(name=contract.ACTIVITY_AWAIT_BATCH)
    async def await_batch(self, waiting: AwaitBatchInput) -> LlmCallResult:
        """The batched call's outcome if its batch answered, else none yet: the activity is
        completed by the batch's collection (``activity.raise_complete_async``)."""
        scope = scope_name(self._base_url, waiting.model)
        info = activity.info()
        try:
            state, result = await self._store.awaiting(
                scope, waiting.item, info.task_token, info.workflow_id or ""
            )
        except CapacityStoreError as err:
            raise unavailable(f"the batch lane's store cannot be reached ({err})") from None
        if state == "another_run":
            raise ApplicationError(
                f"batched call {waiting.item} was made by another run; its answer goes there",
                type=errors.UNKNOWN_CALLER,
                non_retryable=True,
            )
        if state == "answered" and result is not None:
            await self._stored(self._store.delivered(scope, waiting.item))
            return LlmCallResult.model_validate_json(result)
        if state == "unknown":
            return LlmCallResult(
                model=waiting.model,
                outcome="failed",
                lane="batch",
                batch_id=waiting.batch_id,
                failure=CallFailure(
                    error=f"{errors.LLM_RETRYABLE}: the capacity store no longer knows this "
                    f"call of batch {waiting.batch_id}",
                    type=errors.LLM_RETRYABLE,
                ),
            )
        activity.raise_complete_async()


def _time_left(info: activity.Info) -> timedelta:
    """How long the running activity has until its start-to-close timeout."""
    timeout = info.start_to_close_timeout or timedelta(hours=1)
    return info.started_time + timeout - datetime.now(UTC)
