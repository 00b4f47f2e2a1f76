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

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from pydantic import ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.batch_groups import (
    HeldByAnother,
    check_group,
    is_last,
    new_owner,
    start_group,
)
from activities.capacity import CallGate, SpendHold, call_key
from activities.heartbeat import HEARTBEAT_EVERY, HeartbeatPacer, heartbeat_while
from activities.llm import (
    LlmActivities,
    answer_of,
    build_messages,
    call_cost,
    classify,
    failure_of,
    load_document,
    record_call,
    status_error,
    token_usage,
)
from activities.redaction import scrubbed_error
from aiorch_runtime.batch_store import BatchStore, QueuedCall
from aiorch_runtime.capacity import CapacityStoreError, scope_name
from aiorch_runtime.config import PriceTable
from aiorch_runtime.genai import OPERATION_CHAT, GenAiTelemetry
from aiorch_runtime.result_cache import ResultCache
from workflows import contract, errors
from workflows.payloads import (
    AwaitBatchInput,
    BatchCollected,
    BatchGroup,
    BatchPolled,
    BatchRound,
    BatchSubmitted,
    CallFailure,
    LlmCallInput,
    LlmCallResult,
)

log = logging.getLogger(__name__)

ENDPOINT: Final = "/v1/chat/completions"
COMPLETION_WINDOW: Final = "24h"
# The batch's metadata key that names the group and round it holds: how a submission whose
# outcome is unknown (its worker died after the create call) finds its batch again.
SUBMISSION_KEY: Final = "aiorch_submission"
FINAL_STATUSES: Final = frozenset({"completed", "failed", "expired", "cancelled"})
# A call whose run's invoke_llm has less than this left is not submitted: the run is about to
# stop waiting for it (and retry), and nobody would take up its answer.
QUEUE_MARGIN: Final = timedelta(seconds=30)
# The most of the provider's recent batches a lookup reads (newest first).
LOOKUP_LIMIT: Final = 2000
# Runs told at once (each an RPC to Temporal).
COMPLETIONS_AT_ONCE: Final = 64
METRIC_BATCH_CALLS: Final = "aiorch_batch_calls"


def item_name(call: LlmCallInput) -> str:
    """A batched call's name (its ``custom_id``): a digest of its idempotency key."""
    return "call-" + hashlib.sha256(call_key(call).encode()).hexdigest()[:40]


def submission_key(scope: str, group: int, round_: int) -> str:
    """The metadata value that names a group's round in the provider's batch."""
    return f"{scope}:{group}:r{round_}"


def hold_text(hold: SpendHold | None) -> str:
    """A spend reservation as the store keeps it with its call ('' for none)."""
    return "" if hold is None else f"{hold.tenant}|{hold.day.isoformat()}|{hold.reservation}"


def hold_of(text: str) -> SpendHold | None:
    """The spend reservation a call was stored with (`hold_text`)."""
    if not text:
        return None
    tenant, day, reservation = text.split("|", 2)
    return SpendHold(tenant, date.fromisoformat(day), reservation)


def batched(call: LlmCallInput, item: str, batch_id: str) -> LlmCallResult:
    """What a run's ``invoke_llm`` returns once its call is in batch ``batch_id``."""
    return LlmCallResult(
        model=call.model, outcome="batched", lane="batch", batch_id=batch_id, batch_item=item
    )


def failed(call: LlmCallInput, failure: CallFailure, batch_id: str | None) -> LlmCallResult:
    """A batched call's failure, as its run takes it up."""
    return LlmCallResult(
        model=call.model, outcome="failed", lane="batch", batch_id=batch_id, failure=failure
    )


def _count(outcome: str, model: str, n: int = 1) -> None:
    if activity.in_activity() and n:
        activity.metric_meter().create_counter(
            METRIC_BATCH_CALLS, "Calls through the provider's batch API, by outcome"
        ).add(n, {"model": model, "outcome": outcome})


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
            raise _unavailable(f"the batch lane cannot queue the call ({err})") from None
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
            raise _unavailable(
                f"group {queued.group}'s workflow id is held by a run the batch lane did not "
                "start; the call goes into the next group"
            ) from None
        except (RPCError, CapacityStoreError) as err:
            # Not withdrawn, the call is submitted after all: its answer then goes unused.
            with contextlib.suppress(CapacityStoreError):
                await self._store.withdraw(scope, queued.group, item)
            await self._give_back(hold)
            raise _unavailable(
                f"the batch lane cannot start group {queued.group} ({err})"
            ) from None
        activity.raise_complete_async()

    async def _start(self, group: BatchGroup, owner: str, *, full: bool) -> None:
        await start_group(self._temporal, group, owner, self._settings.task_queue, full=full)

    async def _give_back(self, hold: SpendHold | None) -> None:
        if self._gate is not None and hold is not None:
            await self._gate.release(hold)


class BatchActivities:
    """``submit_batch``, ``poll_batch``, ``collect_batch`` and ``await_batch``, with the
    provider's client, Temporal's, the store and the LLM activity's pricing, metrics and
    request building injected by the worker (see the module docstring)."""

    def __init__(
        self,
        llm: LlmActivities,
        client: AsyncOpenAI,
        temporal: Client,
        store: BatchStore,
        *,
        base_url: str,
        gate: CallGate | None = None,
        telemetry: GenAiTelemetry | None = None,
        results: ResultCache | None = None,
        prices: PriceTable | None = None,
        heartbeat_every: timedelta = HEARTBEAT_EVERY,
    ) -> None:
        self._llm = llm
        self._client = client
        self._temporal = temporal
        self._store = store
        self._base_url = base_url
        self._gate = gate
        self._telemetry = telemetry or GenAiTelemetry(base_url)
        self._results = results
        self._prices: PriceTable = prices or {}
        self._heartbeat_every = heartbeat_every

    @property
    def activities(self) -> tuple[Callable[..., Any], ...]:
        """The four activities, for a worker to register."""
        return (self.submit_batch, self.poll_batch, self.collect_batch, self.await_batch)

    # --------------------------------------------------------------------------- submission

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
            _count("submitted", batch.model, len(calls))
        if number == 0:
            outcomes = [(c, batched(_input(c), c.item, batch_id)) for c in calls]
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
            call = _input(queued)
            try:
                document = await load_document(self._llm.documents, call)
            except ApplicationError as err:
                await self._settle(queued, call, 0.0)
                await self._stored(self._store.drop(scope, [queued.item]))
                await self._complete_all(
                    [(queued.token, failed(call, failure_of(err), None))], "invoke_llm"
                )
                _count("failed", model)
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
                await self._settle(queued, _input(queued), 0.0)
            await self._stored(self._store.drop(scope, [c.item for c in calls]))
            outcomes = [(c.token, failed(_input(c), failure, None)) for c in calls]
            await self._complete_all(outcomes, "invoke_llm")
            _count("failed", model, len(calls))
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
            await self._settle(queued, _input(queued), 0.0)
        await self._stored(self._store.drop(scope, [c.item for c in calls]))
        if calls:
            _count("dropped", _input(calls[0]).model, len(calls))

    # ------------------------------------------------------------------------------ polling

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

    # --------------------------------------------------------------------------- collection

    @activity.defn(name=contract.ACTIVITY_COLLECT_BATCH)
    async def collect_batch(self, batch: BatchRound) -> BatchCollected:
        """Hand every call of the batch its outcome (see the module docstring); a call the
        batch left unfinished is kept for the next round, or failed in the last."""
        assert batch.batch_id is not None
        await check_group(self._temporal, self._store, batch)
        scope = batch.scope
        try:
            found = await self._client.batches.retrieve(batch.batch_id)
            lines = await self._lines_of(found.output_file_id, found.error_file_id)
        except openai.OpenAIError as err:
            raise scrubbed_error(classify(err), [self._client.api_key]) from None
        _, items = await self._stored(self._store.claim(scope, batch.group))
        calls = await self._stored(self._store.calls(scope, items))
        answered = failures = unfinished = 0
        pacer = HeartbeatPacer(self._heartbeat_every)
        for count, queued in enumerate(calls):
            pacer.beat(f"collecting call {count} of {len(calls)}")
            if queued.result is not None:
                # Kept by an earlier attempt: hand it over again (its run may not have it).
                outcome = LlmCallResult.model_validate_json(queued.result)
            else:
                maybe = await self._outcome(queued, lines.get(queued.item), found, is_last(batch))
                if maybe is None:
                    unfinished += 1
                    continue
                outcome = maybe
            if outcome.outcome == "answered":
                answered += 1
            else:
                failures += 1
            await self._hand_back(scope, queued, outcome)
        if not unfinished:
            await self._stored(self._store.finish(scope, batch.group, batch.round + 1))
        return BatchCollected(answered=answered, failed=failures, unfinished=unfinished)

    async def _lines_of(self, *file_ids: str | None) -> dict[str, dict[str, Any]]:
        """The output and error files' lines by ``custom_id``."""
        lines: dict[str, dict[str, Any]] = {}
        for file_id in file_ids:
            if not file_id:
                continue
            content = await heartbeat_while(
                self._client.files.content(file_id), f"reading {file_id}", self._heartbeat_every
            )
            for raw in content.text.splitlines():
                if raw.strip():
                    line = json.loads(raw)
                    lines[str(line.get("custom_id"))] = line
        return lines

    async def _outcome(
        self, queued: QueuedCall, line: dict[str, Any] | None, found: Any, last: bool
    ) -> LlmCallResult | None:
        """What the batch says about one call: its answer, its failure, or None when it was
        not made (expired, cancelled) and another round may make it."""
        call = _input(queued)
        error = (line or {}).get("error") or {}
        response = (line or {}).get("response")
        if response is None and (line is None or error.get("code") == "batch_expired"):
            if not last:
                return None
            await self._settle(queued, call, 0.0)
            _count("unfinished", call.model)
            return failed(
                call,
                CallFailure(
                    error=f"{errors.LLM_RETRYABLE}: batch {found.id} ended {found.status} "
                    "before this call was made",
                    type=errors.LLM_RETRYABLE,
                ),
                found.id,
            )
        if response is not None and response.get("status_code") == 200:
            return await self._answered(queued, call, response.get("body") or {}, found.id)
        body_error = ((response or {}).get("body") or {}).get("error") or error
        message = str(body_error.get("message") or "no message")
        if response is not None:
            refused = status_error(
                int(response.get("status_code") or 500), body_error.get("code"), message
            )
        else:
            refused = ApplicationError(
                f"the batch could not make the call: {message}", type=errors.LLM_RETRYABLE
            )
        await self._settle(queued, call, 0.0)
        _count("failed", call.model)
        return failed(call, failure_of(refused), found.id)

    async def _answered(
        self, queued: QueuedCall, call: LlmCallInput, body: dict[str, Any], batch_id: str
    ) -> LlmCallResult:
        """An answered call: priced at the batch rate, settled once, counted then, and checked
        as a synchronous answer is (a malformed or refused one fails back)."""
        try:
            completion = ChatCompletion.model_validate(body)
        except ValidationError:
            await self._settle(queued, call, 0.0)
            failure = CallFailure(
                error=f"{errors.LLM_MALFORMED_REPLY}: the batch's answer is no chat completion",
                type=errors.LLM_MALFORMED_REPLY,
            )
            return failed(call, failure, batch_id)
        usage = token_usage(completion)
        model = completion.model or call.model
        cost = call_cost(self._prices, model, usage, "batch")
        with self._telemetry.call(
            OPERATION_CHAT, call.model, timed=False, temperature=call.temperature
        ) as record:
            record.span.set_attribute("aiorch.batch_id", batch_id)
            record_call(record, completion, usage)
            if await self._settle(queued, call, cost):
                self._llm.count(call, model, usage, cost, "batch")
            try:
                result = answer_of(call, completion, usage, cost, lane="batch", batch_id=batch_id)
            except ApplicationError as err:
                record.error_type = err.type or type(err).__name__
                _count("failed", call.model)
                return failed(call, failure_of(err), batch_id)
        _count("answered", call.model)
        if queued.cache and self._results is not None:
            await self._results.put(call.tenant, queued.cache, result)
        return result

    async def _hand_back(self, scope: str, queued: QueuedCall, outcome: LlmCallResult) -> None:
        """Keep a call's outcome and complete its run's ``await_batch`` if one waits."""
        stored, token = await self._stored(
            self._store.answer(scope, queued.item, outcome.model_dump_json())
        )
        if stored and token is not None and await self._complete(token, outcome, "await_batch"):
            await self._stored(self._store.delivered(scope, queued.item))

    # ----------------------------------------------------------------------- the run's wait

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
            raise _unavailable(f"the batch lane's store cannot be reached ({err})") from None
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

    # -------------------------------------------------------------------------------- helpers

    async def _settle(self, queued: QueuedCall, call: LlmCallInput, cost: float | None) -> bool:
        """Settle a call's spend reservation with its cost, once per call; whether counted."""
        if self._gate is None:
            return True
        return await self._gate.settle_spend(hold_of(queued.spend), call, cost)

    async def _complete_all(
        self, outcomes: Iterable[tuple[bytes, LlmCallResult]], activity_name: str
    ) -> None:
        gate = asyncio.Semaphore(COMPLETIONS_AT_ONCE)

        async def one(token: bytes, outcome: LlmCallResult) -> None:
            async with gate:
                await self._complete(token, outcome, activity_name)

        await asyncio.gather(*(one(token, outcome) for token, outcome in outcomes))

    async def _complete(self, token: bytes, outcome: LlmCallResult, activity_name: str) -> bool:
        """Complete a waiting run's activity; False when it no longer waits (its run was
        cancelled, or retried once the activity timed out)."""
        try:
            await self._temporal.get_async_activity_handle(task_token=token).complete(outcome)
        except RPCError as err:
            log.info("%s no longer waits (%s): its outcome is left unused", activity_name, err)
            return False
        return True

    async def _stored(self, pending: Awaitable[Any]) -> Any:
        try:
            return await pending
        except CapacityStoreError as err:
            raise _unavailable(f"the batch lane's store cannot be reached ({err})") from None


def _input(queued: QueuedCall) -> LlmCallInput:
    return LlmCallInput.model_validate_json(queued.call)


def _time_left(info: activity.Info) -> timedelta:
    """How long the running activity has until its start-to-close timeout."""
    timeout = info.start_to_close_timeout or timedelta(hours=1)
    return info.started_time + timeout - datetime.now(UTC)


def _unavailable(reason: str) -> ApplicationError:
    return ApplicationError(reason, type=errors.LLM_RETRYABLE)
