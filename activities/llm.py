"""The LLM: one Chat Completions call per activity attempt.

A call answers in JSON: the contract's ``LlmReply`` (``{"content", "needs_review"}``), or, when
the call carries an ``output_schema`` (a pipeline's extraction), one JSON object that the
pipeline validates against that schema itself. A referenced document is read again here (large
inputs never enter history); when the call names the hash its run's extraction recorded
(``input_sha256``), the document's text is the one that extraction kept (or, when it is not
kept, extracted again in a limited child process), checked against that hash.

The ``openai`` client's own retries are off (``max_retries=0``) and its timeout is shorter than
the activity's, so every attempt is the workflow's and shows in history. What a call sends is
built in ``activities.llm_request``; its errors are classified in ``activities.llm_errors``
(transient ones retry, the rest are non-retryable with stable type names); its answer is
checked in ``activities.llm_reply`` (a malformed or truncated reply retries; a refusal or a
filtered reply does not).

Cost (docs/cost.md): the messages keep what every run of a pipeline shares first (the system
prompt, then a referenced document) and the run's own text after, so a provider's prompt cache
can reuse the prefix; with ``LLM_PROMPT_CACHE_SCOPE`` each call names its pipeline (and tenant) as
its ``prompt_cache_key``. Cached prompt tokens (``usage.prompt_tokens_details.cached_tokens``)
are priced at the cached rate. An identical call that already succeeded may be answered from the
result cache (``LLM_RESULT_CACHE_TTL_S``, per tenant) without a provider call, and a call in the
batch lane is handed to ``activities.batch`` instead of being made here. A call's cost is
settled once (by its idempotency key), and its metrics are recorded when it is.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, Protocol

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.capacity import CallAdmission, CallGate, Settlement
from activities.documents.extract import DocumentTexts
from activities.heartbeat import HEARTBEAT_EVERY, heartbeat_while
from activities.input_loader import InputLoader
from activities.llm_errors import classify, provider_signal
from activities.llm_reply import answer_of, call_cost, record_call, record_usage, token_usage
from activities.llm_request import (
    CacheScope,
    build_messages,
    call_digest,
    chat_body,
    idempotency_key,
    prompt_cache_key,
)
from activities.redaction import scrubbed_error
from activities.spend import SpendHold, record_spend
from aiorch_runtime.config import PriceTable
from aiorch_runtime.genai import OPERATION_CHAT, CallRecord, GenAiTelemetry, text_messages
from aiorch_runtime.result_cache import ResultCache
from workflows import contract
from workflows.engine.observability import METRIC_RESULT_CACHE
from workflows.payloads import DEFAULT_TENANT, Lane, LlmCallInput, LlmCallResult, TokenUsage

log = logging.getLogger(__name__)


class BatchQueue(Protocol):
    """Where a call in the batch lane goes (``activities.batch.BatchLane``)."""

    async def enqueue(
        self, call: LlmCallInput, hold: SpendHold | None, *, pipeline: str, digest: str | None
    ) -> LlmCallResult: ...


class LlmActivities:
    """The ``invoke_llm`` activity, with its client, loader, call gate (budgets and shared
    capacity), GenAI telemetry, result cache and batch lane injected by the worker."""

    def __init__(
        self,
        client: AsyncOpenAI,
        loader: InputLoader,
        timeout_s: float,
        *,
        prices: PriceTable | None = None,
        heartbeat_every: timedelta = HEARTBEAT_EVERY,
        gate: CallGate | None = None,
        telemetry: GenAiTelemetry | None = None,
        budgeted_tenants: frozenset[str] = frozenset(),
        results: ResultCache | None = None,
        batch: BatchQueue | None = None,
        cache_scope: CacheScope = "off",
        documents: DocumentTexts | None = None,
    ) -> None:
        self._client = client
        self.documents = documents or DocumentTexts(loader, heartbeat_every=heartbeat_every)
        self._timeout_s = timeout_s
        self._prices: PriceTable = prices or {}
        self._heartbeat_every = heartbeat_every
        self._gate = gate
        self._telemetry = telemetry or GenAiTelemetry(str(client.base_url))
        self._tenants = budgeted_tenants | {DEFAULT_TENANT}
        self._results = results
        self._batch = batch
        self._cache_scope = cache_scope

    @property
    def max_output_tokens(self) -> int | None:
        """The reply limit every call is sent with (``max_tokens``), if any."""
        return self._gate.max_output_tokens if self._gate is not None else None

    def request(
        self, call: LlmCallInput, messages: list[ChatCompletionMessageParam], pipeline: str
    ) -> dict[str, Any]:
        """The Chat Completions request for ``call`` of a run of ``pipeline``."""
        return chat_body(
            call,
            messages,
            max_tokens=self.max_output_tokens,
            cache_key=prompt_cache_key(self._cache_scope, pipeline, call.tenant),
        )

    @activity.defn(name=contract.ACTIVITY_INVOKE_LLM)
    async def invoke_llm(self, call: LlmCallInput) -> LlmCallResult:
        """One Chat Completions call, once the budgets and the model's shared capacity allow
        it (else a result that says why no call was made); heartbeats while waiting. Answered
        from the result cache when the run allows it and an identical call succeeded; in the
        batch lane, handed to the batch lane (completed once its batch is submitted)."""
        document = await self._document(call)
        messages = build_messages(call, document)
        pipeline = activity.info().workflow_type or ""
        body = self.request(call, messages, pipeline)
        digest = None
        if call.result_cache and self._results is not None:
            digest = call_digest(call, body, pipeline)
            kept = await self._results.get(call.tenant, digest)
            _count_result_cache("hit" if kept is not None else "miss", call)
            if kept is not None:
                return kept.model_copy(
                    update={
                        "cached_reply": True,
                        "usage": TokenUsage(),
                        "cost_usd": 0.0,
                        "lane": call.lane,
                        "batch_id": None,
                        "batch_item": None,
                    }
                )
        batch = self._batch if call.lane == "batch" else None
        if call.lane == "batch" and batch is None:
            log.warning("LLM_BATCH is off on this worker: a batch-lane call is made now")
            call = call.model_copy(update={"lane": "sync"})
        admission = CallAdmission("go")
        if self._gate is not None:
            admission = await self._gate.admit(call, messages)
            if admission.kind == "wait":
                assert admission.wait is not None
                return LlmCallResult(
                    model=call.model, outcome="wait", wait_s=admission.wait.total_seconds()
                )
            if admission.kind == "over_budget":
                return LlmCallResult(
                    model=call.model, outcome="over_budget", budget=admission.budget
                )
        if batch is not None:
            return await batch.enqueue(call, admission.spend, pipeline=pipeline, digest=digest)
        with self._telemetry.call(
            OPERATION_CHAT,
            call.model,
            temperature=call.temperature,
            max_tokens=self.max_output_tokens,
        ) as record:
            record.content("gen_ai.system_instructions", text_messages(messages[:1]))
            record.content("gen_ai.input.messages", text_messages(messages[1:]))
            result = await self._call(call, body, admission, record)
        if digest is not None and self._results is not None:
            await self._results.put(call.tenant, digest, result)
        return result

    async def _call(
        self,
        call: LlmCallInput,
        body: dict[str, Any],
        admission: CallAdmission,
        record: CallRecord,
    ) -> LlmCallResult:
        request = self._client.chat.completions.with_raw_response.create(
            **body,
            timeout=self._timeout_s,
            extra_headers={
                "Idempotency-Key": idempotency_key(call),
                "X-Run-Id": call.workflow_id,
            },
        )
        renewing = asyncio.ensure_future(
            self._gate.keep_alive(admission) if self._gate else asyncio.sleep(0)
        )
        try:
            raw = await heartbeat_while(request, f"waiting for {call.model}", self._heartbeat_every)
        except openai.OpenAIError as err:
            status = err.status_code if isinstance(err, openai.APIStatusError) else None
            headers = err.response.headers if isinstance(err, openai.APIStatusError) else None
            record.error_type = str(status) if status is not None else type(err).__name__
            await self._settle(
                admission,
                call,
                Settlement(
                    used=0,
                    called=status is not None,
                    signal=provider_signal(headers, throttled=status == 429),
                    cost_usd=None,
                ),
            )
            # Provider error bodies may echo the key; it must not reach history or logs.
            raise scrubbed_error(classify(err), [self._client.api_key]) from None
        finally:
            renewing.cancel()
        completion = raw.parse()
        usage = token_usage(completion)
        model = completion.model or call.model
        record_call(record, completion, usage)
        cost = call_cost(self._prices, model, usage, "sync")
        counted = await self._settle(
            admission,
            call,
            Settlement(
                used=usage.total_tokens,
                called=True,
                signal=provider_signal(raw.headers, throttled=False),
                cost_usd=cost,
            ),
        )
        if counted:
            self.count(call, model, usage, cost, "sync")
        try:
            return answer_of(call, completion, usage, cost)
        except ApplicationError as err:
            record.error_type = err.type or type(err).__name__
            raise

    def count(
        self, call: LlmCallInput, model: str, usage: TokenUsage, cost: float | None, lane: Lane
    ) -> None:
        """Record a settled call's tokens, cost and tenant spend in the metrics (once)."""
        record_usage(model, usage, cost, lane)
        if cost:
            record_spend(call.tenant, cost, self._tenants)

    async def _document(self, call: LlmCallInput) -> str | None:
        """The referenced document's text (a PDF's as extracted for its run), or None."""
        return await load_document(self.documents, call)

    async def _settle(self, admission: CallAdmission, call: LlmCallInput, done: Settlement) -> bool:
        if self._gate is None:
            return True
        return await self._gate.settle(admission, call, done)


async def load_document(documents: DocumentTexts, call: LlmCallInput) -> str | None:
    """The document ``call`` references (a PDF's text as its run's extraction recorded it, kept
    or extracted again), or None when it references none."""
    if not call.input_ref:
        return None
    if call.input_sha256 is None:
        return await documents.plain(call.input_ref)
    return await documents.text(call.input_ref, sha256=call.input_sha256)


def _count_result_cache(outcome: str, call: LlmCallInput) -> None:
    activity.metric_meter().create_counter(
        METRIC_RESULT_CACHE, "Model calls looked up in the result cache, by outcome"
    ).add(1, {"model": call.model, "outcome": outcome})
