"""Submitting a group's round as one batch (``submit_batch``): its calls as one JSONL file,
uploaded, the batch created at most once a round (a retried submission finds the batch an
earlier attempt created by the key in its metadata), its id recorded at once, and each run told
which batch holds its call."""

from __future__ import annotations

import json
import logging
from typing import Final

import openai
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.batch_calls import (
    batched,
    count_calls,
    failed,
    queued_input,
    submission_key,
)
from activities.batch_groups import check_group
from activities.batch_handoff import BatchHandoff
from activities.heartbeat import HeartbeatPacer, heartbeat_while
from activities.llm import load_document
from activities.llm_errors import classify, failure_of
from activities.llm_request import build_messages
from activities.redaction import scrubbed_error
from aiorch_runtime.batch_store import QueuedCall
from workflows import contract
from workflows.payloads import BatchRound, BatchSubmitted

# The batch lane logs under the name it had as one module, so log filters keep matching.
log = logging.getLogger("activities.batch")

ENDPOINT: Final = "/v1/chat/completions"
COMPLETION_WINDOW: Final = "24h"
# The batch's metadata key that names the group and round it holds: how a submission whose
# outcome is unknown (its worker died after the create call) finds its batch again.
SUBMISSION_KEY: Final = "aiorch_submission"
# The most of the provider's recent batches a lookup reads (newest first).
LOOKUP_LIMIT: Final = 2000


class BatchSubmission(BatchHandoff):
    """The ``submit_batch`` activity (see the module docstring)."""

    @activity.defn(name=contract.ACTIVITY_SUBMIT_BATCH)
    async def submit_batch(self, batch: BatchRound) -> BatchSubmitted:
        """Submit a group's round (its unanswered calls) as one batch, at most once, and tell
        each run of round 0 which batch holds its call."""
        await check_group(self._temporal, self._store, batch)
        scope, group, number = batch.scope, batch.group, batch.round
        batch_id = await self._stored(self._store.batch_of(scope, group, number))
        now_ms, items = await self._stored(self._store.claim(scope, group))
        calls = [c for c in await self._stored(self._store.calls(scope, items)) if c.result is None]
        dropped: list[QueuedCall] = []
        if batch_id is None:
            if number == 0:
                dropped = [c for c in calls if c.deadline_ms <= now_ms]
                calls = [c for c in calls if c.deadline_ms > now_ms]
                await self._let_go(scope, dropped)
            calls, data = await self._build(scope, calls, batch.model)
            if not calls:
                return BatchSubmitted(dropped=len(dropped))
            key = submission_key(scope, group, number)
            if activity.info().attempt > 1:
                batch_id = await self._find(key)
            if batch_id is None:
                batch_id = await self._create(scope, key, calls, data, batch.model)
                if batch_id is None:
                    return BatchSubmitted(dropped=len(dropped))
            # Recorded before anything else can fail: a retry re-attaches to it.
            await self._stored(self._store.record_batch(scope, group, number, batch_id))
            count_calls("submitted", batch.model, len(calls))
        if number == 0:
            outcomes = [(c, batched(queued_input(c), c.item, batch_id)) for c in calls]
            await self._complete_all(((c.token, o) for c, o in outcomes), "invoke_llm")
        return BatchSubmitted(batch_id=batch_id, calls=len(calls), dropped=len(dropped))

    async def _build(
        self, scope: str, calls: list[QueuedCall], model: str
    ) -> tuple[list[QueuedCall], bytes]:
        """The batch's input file, one Chat Completions request a line named by its call, and
        the calls in it; a call whose request cannot be built now (its document is gone or
        changed) is failed back to its run instead."""
        kept, lines = [], []
        pacer = HeartbeatPacer(self._heartbeat_every)
        for count, queued in enumerate(calls):
            pacer.beat(f"writing line {count} of {len(calls)}")
            call = queued_input(queued)
            try:
                document = await load_document(self._llm.documents, call)
            except ApplicationError as err:
                await self._settle(queued, call, 0.0)
                await self._stored(self._store.drop(scope, [queued.item]))
                await self._complete_all(
                    [(queued.token, failed(call, failure_of(err), None))], "invoke_llm"
                )
                count_calls("failed", model)
                continue
            body = self._llm.request(call, build_messages(call, document), queued.pipeline)
            line = {"custom_id": queued.item, "method": "POST", "url": ENDPOINT, "body": body}
            lines.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
            kept.append(queued)
        return kept, ("\n".join(lines) + "\n").encode("utf-8")

    async def _create(
        self, scope: str, key: str, calls: list[QueuedCall], data: bytes, model: str
    ) -> str | None:
        """Upload the calls' file ``data`` and create their batch: its id, or None when the
        provider refused it for good (every call is then failed back to its run).

        Raises:
            ApplicationError: a passing failure (the submission is retried).
        """
        try:
            uploaded = await heartbeat_while(
                self._client.files.create(
                    file=(f"{key.replace(':', '-')}.jsonl", data, "application/jsonl"),
                    purpose="batch",
                ),
                "uploading the batch's file",
                self._heartbeat_every,
            )
            created = await heartbeat_while(
                self._client.batches.create(
                    input_file_id=uploaded.id,
                    endpoint=ENDPOINT,
                    completion_window=COMPLETION_WINDOW,
                    metadata={SUBMISSION_KEY: key},
                ),
                "creating the batch",
                self._heartbeat_every,
            )
        except openai.OpenAIError as err:
            refused = scrubbed_error(classify(err), [self._client.api_key])
            if not refused.non_retryable:
                raise refused from None
            failure = failure_of(refused)
            for queued in calls:
                await self._settle(queued, queued_input(queued), 0.0)
            await self._stored(self._store.drop(scope, [c.item for c in calls]))
            outcomes = [(c.token, failed(queued_input(c), failure, None)) for c in calls]
            await self._complete_all(outcomes, "invoke_llm")
            count_calls("failed", model, len(calls))
            return None
        return created.id

    async def _find(self, key: str) -> str | None:
        """The batch an earlier attempt created for submission ``key``, if it did (the
        provider's recent batches, newest first, by their metadata)."""
        seen = 0
        async for found in self._client.batches.list(limit=100):
            if (found.metadata or {}).get(SUBMISSION_KEY) == key:
                log.info(
                    "batch %s of submission %s found again; not submitted twice", found.id, key
                )
                return found.id
            seen += 1
            if seen >= LOOKUP_LIMIT:
                break
        return None

    async def _let_go(self, scope: str, calls: list[QueuedCall]) -> None:
        """Forget calls whose runs stopped waiting for their submission (they retry)."""
        for queued in calls:
            await self._settle(queued, queued_input(queued), 0.0)
        await self._stored(self._store.drop(scope, [c.item for c in calls]))
        if calls:
            count_calls("dropped", queued_input(calls[0]).model, len(calls))
