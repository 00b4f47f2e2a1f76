"""Collecting a batch (``collect_batch``): its output and error files, matched to calls by
``custom_id`` (not in input order). Each answered call is priced at the batch rate, its spend
settled once (by its idempotency key: a collection run again counts nothing twice), its metrics
recorded then, and its outcome handed to the run's ``await_batch`` (or kept for it). A failed
call goes back as a failure (the run's retry path); a call an expired batch left unfinished is
submitted again in the next round, or failed in the last."""

from __future__ import annotations

import json
from typing import Any

import openai
from openai.types.chat import ChatCompletion
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.batch_calls import count_calls, failed, queued_input
from activities.batch_groups import check_group, is_last
from activities.batch_handoff import BatchHandoff
from activities.heartbeat import HeartbeatPacer, heartbeat_while
from activities.llm_errors import classify, failure_of, status_error
from activities.llm_reply import answer_of, call_cost, record_call, token_usage
from activities.redaction import scrubbed_error
from aiorch_runtime.batch_store import QueuedCall
from aiorch_runtime.genai import OPERATION_CHAT
from workflows import contract, errors
from workflows.payloads import BatchCollected, BatchRound, CallFailure, LlmCallInput, LlmCallResult


class BatchCollection(BatchHandoff):
    """The ``collect_batch`` activity (see the module docstring)."""

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
        call = queued_input(queued)
        error = (line or {}).get("error") or {}
        response = (line or {}).get("response")
        if response is None and (line is None or error.get("code") == "batch_expired"):
            if not last:
                return None
            await self._settle(queued, call, 0.0)
            count_calls("unfinished", call.model)
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
        count_calls("failed", call.model)
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
                count_calls("failed", call.model)
                return failed(call, failure_of(err), batch_id)
        count_calls("answered", call.model)
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
