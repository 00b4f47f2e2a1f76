"""The LLM: one Chat Completions call per activity attempt, with its errors classified here.

A call answers in JSON: the contract's ``LlmReply`` (``{"content", "needs_review"}``), or, when
the call carries an ``output_schema`` (a pipeline's extraction), one JSON object that the
pipeline validates against that schema itself. A referenced document is read again here (large
inputs never enter history); when the call names the hash its run's extraction recorded
(``input_sha256``), the document's text is the one that extraction kept (or, when it is not
kept, extracted again in a limited child process), checked against that hash.

The ``openai`` client's own retries are off (``max_retries=0``) and its timeout is shorter than
the activity's, so every attempt is the workflow's and shows in history. Classification, in one
place: transient failures (timeouts, connection errors, 408/409/429, 5xx, malformed or truncated
replies) raise retryable errors; the rest (bad request, auth, not found, exhausted quota,
refusals, content filter) raise non-retryable ones with stable type names.

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
import contextlib
import email.utils
import hashlib
import json
import logging
import re
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal, Protocol

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.capacity import (
    Admission,
    CallGate,
    Settlement,
    SpendHold,
    call_key,
    record_spend,
)
from activities.documents.extract import DocumentTexts
from activities.heartbeat import HEARTBEAT_EVERY, heartbeat_while
from activities.input_loader import InputLoader
from activities.pricing import estimate_cost
from activities.prompt import CORRECTIVE_INSTRUCTION, OBJECT_CORRECTIVE_INSTRUCTION
from activities.redaction import scrubbed_error
from aiorch_runtime.capacity import ProviderSignal
from aiorch_runtime.config import PriceTable
from aiorch_runtime.genai import OPERATION_CHAT, CallRecord, GenAiTelemetry, text_messages
from aiorch_runtime.result_cache import ResultCache
from workflows import contract, errors
from workflows.engine.observability import (
    METRIC_LLM_COST,
    METRIC_LLM_TOKENS,
    METRIC_RESULT_CACHE,
)
from workflows.payloads import (
    DEFAULT_TENANT,
    CallFailure,
    Lane,
    LlmCallInput,
    LlmCallResult,
    LlmReply,
    TokenUsage,
)

log = logging.getLogger(__name__)
CacheScope = Literal["off", "pipeline", "tenant"]


class BatchQueue(Protocol):
    """Where a call in the batch lane goes (``activities.batch.BatchLane``)."""

    async def enqueue(
        self, call: LlmCallInput, hold: SpendHold | None, *, pipeline: str, digest: str | None
    ) -> LlmCallResult: ...


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(?P<body>.*?)\n\s*```\s*$", re.DOTALL)
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 422})
REFUSAL_DETAIL_CHARS = 1000  # a refusal is a sentence or two; the details are bounded anyway


def idempotency_key(call: LlmCallInput) -> str:
    """Stable per (run chain, state, attempt): a gateway that honours it dedupes a re-sent
    call, and never answers a new run that reuses the workflow id with an old run's reply."""
    return call_key(call)


def build_messages(call: LlmCallInput, document: str | None) -> list[ChatCompletionMessageParam]:
    """System prompt, the user's request, each reviewer's feedback, and a correction if due.

    A stable prefix first, for the provider's prompt cache: the system prompt (the pipeline's,
    the same for each of its runs), then a referenced document, then the run's own text; each
    review round and a correction only add to the end."""
    user_text = (document or "") + call.user_prompt
    for feedback in call.feedback:
        user_text += f"\n\nReviewer feedback: {feedback}"
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": call.system_prompt},
        {"role": "user", "content": user_text},
    ]
    if call.corrective:
        correction = (
            CORRECTIVE_INSTRUCTION if call.output_schema is None else OBJECT_CORRECTIVE_INSTRUCTION
        )
        messages.append({"role": "user", "content": correction})
    return messages


def prompt_cache_key(scope: CacheScope, pipeline: str, tenant: str) -> str | None:
    """The ``prompt_cache_key`` a call sends (``LLM_PROMPT_CACHE_SCOPE``): its pipeline, or its
    pipeline and tenant; None when off."""
    if scope == "off":
        return None
    return f"aiorch:{pipeline}" if scope == "pipeline" else f"aiorch:{pipeline}:{tenant}"


def chat_body(
    call: LlmCallInput,
    messages: list[ChatCompletionMessageParam],
    *,
    max_tokens: int | None,
    cache_key: str | None,
) -> dict[str, Any]:
    """The Chat Completions request of a call: what a synchronous call sends, and a batch's
    line's ``body``."""
    body: dict[str, Any] = {
        "model": call.model,
        "messages": messages,
        "temperature": call.temperature,
        "response_format": {"type": "json_object"},
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if cache_key is not None:
        body["prompt_cache_key"] = cache_key
    return body


def call_digest(call: LlmCallInput, body: dict[str, Any], pipeline: str) -> str:
    """The result cache's name for a call: a digest of everything that decides its reply (the
    request without its cache routing key, the pipeline and its step's version, what the reply
    must be and how long it may be)."""
    request = {key: value for key, value in body.items() if key != "prompt_cache_key"}
    canonical = json.dumps(
        {
            "request": request,
            "pipeline": pipeline,
            "version": call.version,
            "output_schema": call.output_schema,
            "max_reply_chars": call.max_reply_chars,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _json_body(text: str) -> Any:
    """The JSON value of a reply, unwrapping one whole-reply Markdown fence.

    Raises:
        json.JSONDecodeError: it is not JSON.
    """
    fenced = _FENCE.match(text)
    return json.loads(fenced.group("body") if fenced else text)


def _malformed(what: str, err: Exception, text: str) -> ApplicationError:
    # Never quote the reply: error texts reach worker logs, which payload encryption does not
    # cover.
    return ApplicationError(
        f"reply is not {what} ({type(err).__name__}; {len(text)} characters)",
        type=errors.LLM_MALFORMED_REPLY,
    )


def parse_reply(text: str) -> LlmReply:
    """The model's text as the contract's reply, unwrapping one whole-reply Markdown fence.

    Raises:
        ApplicationError: ``LlmMalformedReply`` (retryable) for anything else.
    """
    try:
        return LlmReply.model_validate(_json_body(text))
    except (json.JSONDecodeError, ValidationError) as err:
        raise _malformed("the contract's JSON", err, text) from None


def parse_object(text: str) -> dict[str, Any]:
    """The model's text as one JSON object (a call with an ``output_schema``: the pipeline
    checks it against the schema), unwrapping one whole-reply Markdown fence.

    Raises:
        ApplicationError: ``LlmMalformedReply`` (retryable) when it is not a JSON object.
    """
    try:
        value = _json_body(text)
    except json.JSONDecodeError as err:
        raise _malformed("a JSON object", err, text) from None
    if not isinstance(value, dict):
        raise _malformed("a JSON object", TypeError(type(value).__name__), text)
    return value


def retry_after(headers: Any) -> timedelta | None:
    """The provider's requested wait: ``retry-after-ms``, ``Retry-After`` seconds or HTTP date."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        with contextlib.suppress(ValueError):
            return timedelta(milliseconds=max(0.0, float(millis)))
    value = headers.get("retry-after")
    if not value:
        return None
    with contextlib.suppress(ValueError):
        return timedelta(seconds=max(0.0, float(value)))
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return timedelta(seconds=max(0.0, when.timestamp() - time.time()))
    return None


def provider_signal(headers: Mapping[str, str] | None, *, throttled: bool) -> ProviderSignal:
    """The rate-limit headers of a provider's answer (OpenAI's names); ``throttled``: a 429,
    whose ``retry-after-ms``/``Retry-After`` pauses the model's shared capacity."""
    if headers is None:
        return ProviderSignal()

    def number(name: str) -> int | None:
        value = headers.get(name)
        try:
            return int(float(value)) if value is not None else None
        except ValueError:
            return None

    return ProviderSignal(
        remaining_tokens=number("x-ratelimit-remaining-tokens"),
        remaining_requests=number("x-ratelimit-remaining-requests"),
        limit_tokens=number("x-ratelimit-limit-tokens"),
        limit_requests=number("x-ratelimit-limit-requests"),
        retry_after=(retry_after(headers) or timedelta(seconds=1)) if throttled else None,
    )


def classify(err: openai.OpenAIError) -> ApplicationError:
    """Map a client error to a retryable or permanent ApplicationError with a stable type."""
    if isinstance(err, openai.APITimeoutError):
        return ApplicationError(f"LLM call timed out: {err}", type=errors.LLM_RETRYABLE)
    if isinstance(err, openai.APIConnectionError):
        return ApplicationError(f"cannot reach the LLM: {err}", type=errors.LLM_RETRYABLE)
    if isinstance(err, openai.APIStatusError):
        return status_error(
            err.status_code,
            getattr(err, "code", None),
            err.message,
            retry_after(err.response.headers),
        )
    return ApplicationError(f"LLM client error: {err}", type=errors.LLM_RETRYABLE)


def status_error(
    status: int, code: str | None, message: str, delay: timedelta | None = None
) -> ApplicationError:
    """The error of an HTTP ``status`` answer (a call's, or a batched call's line): retryable
    or permanent, with a stable type, and the wait it asks for."""
    summary = f"HTTP {status} from the LLM: {message}"
    if status == 429 and code == "insufficient_quota":
        return ApplicationError(summary, type=errors.LLM_QUOTA_EXHAUSTED, non_retryable=True)
    if status == 429:
        return ApplicationError(summary, type=errors.LLM_RATE_LIMITED, next_retry_delay=delay)
    if status in PERMANENT_STATUSES:
        return ApplicationError(summary, type=errors.LLM_PERMANENT, non_retryable=True)
    return ApplicationError(summary, type=errors.LLM_RETRYABLE, next_retry_delay=delay)


def failure_of(err: ApplicationError) -> CallFailure:
    """An activity's error as the value a batched call's failure is handed back as."""
    delay = err.next_retry_delay
    return CallFailure(
        error=f"{err.type}: {err.message}" if err.type else err.message,
        type=err.type,
        permanent=err.non_retryable,
        retry_after_s=delay.total_seconds() if delay else None,
    )


def reply_text(completion: ChatCompletion, workflow_id: str) -> str:
    """The reply's text, once finish reason and refusal are checked (for run ``workflow_id``,
    which a refusal's message names so its reader can look the text up).

    Raises:
        ApplicationError: ``LlmRefused`` (permanent) for a refusal or a filtered reply,
            ``LlmMalformedReply`` (retryable) for no choice or a truncated one.
    """
    if not completion.choices:
        raise ApplicationError("LLM returned no choices", type=errors.LLM_MALFORMED_REPLY)
    choice = completion.choices[0]
    if choice.finish_reason == "content_filter":
        raise ApplicationError(
            "the provider's content filter blocked the reply",
            type=errors.LLM_REFUSED,
            non_retryable=True,
        )
    if refusal := choice.message.refusal:
        # The refusal is the model's text, like a reply: never in the message (worker logs),
        # only in the details, a payload that payload encryption covers, which `status` shows.
        raise ApplicationError(
            f"the model refused ({len(refusal)} characters; "
            f"`starter.py status {workflow_id}` shows the text)",
            refusal[:REFUSAL_DETAIL_CHARS],
            type=errors.LLM_REFUSED,
            non_retryable=True,
        )
    if choice.finish_reason == "length":
        raise ApplicationError(
            "reply truncated (finish_reason=length)", type=errors.LLM_MALFORMED_REPLY
        )
    return choice.message.content or ""


def check_reply_size(content: str, limit: int | None) -> None:
    """Refuse a reply longer than the run's limit (MAX_REPLY_CHARS), so it never enters history.

    Raises:
        ApplicationError: ``LlmReplyTooLarge`` (permanent: the same prompt gives the same size).
    """
    if limit is not None and len(content) > limit:
        raise ApplicationError(
            f"the reply is {len(content)} characters; the limit is {limit} (MAX_REPLY_CHARS)",
            type=errors.LLM_REPLY_TOO_LARGE,
            non_retryable=True,
        )


def token_usage(completion: ChatCompletion) -> TokenUsage:
    """The tokens a completion reports, the prompt tokens read from the provider's prompt cache
    included (``usage.prompt_tokens_details.cached_tokens``)."""
    usage = completion.usage
    if usage is None:
        return TokenUsage()
    details = usage.prompt_tokens_details
    return TokenUsage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
    )


def call_cost(prices: PriceTable, model: str, usage: TokenUsage, lane: Lane) -> float | None:
    """What a call cost by the price table (None for a model without a price): cached prompt
    tokens at the cached rate, a batched call at the batch share."""
    return estimate_cost(
        prices,
        model,
        usage.prompt_tokens,
        usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        lane=lane,
    )


def record_usage(model: str, usage: TokenUsage, cost: float | None, lane: Lane) -> None:
    """Count the tokens a call used (by model, kind and lane; ``cache_read``: the prompt tokens
    read from the provider's prompt cache, part of ``prompt``) and its cost (by model and lane).

    Every completion the provider answered counts, a malformed or truncated one too: it is
    billed all the same. Recorded once per call, when its cost is settled.
    """
    meter = activity.metric_meter()
    tokens = meter.create_counter(METRIC_LLM_TOKENS, "LLM tokens used, by model, kind and lane")
    for kind, count in (
        ("prompt", usage.prompt_tokens),
        ("completion", usage.completion_tokens),
        ("cache_read", usage.cached_tokens),
    ):
        tokens.add(count, {"model": model, "kind": kind, "lane": lane})
    if cost is not None:
        meter.create_histogram_float(
            METRIC_LLM_COST, "Estimated cost of each LLM call (sum = total), from LLM_PRICE_TABLE"
        ).record(cost, {"model": model, "lane": lane})


def answer_of(
    call: LlmCallInput,
    completion: ChatCompletion,
    usage: TokenUsage,
    cost: float | None,
    *,
    lane: Lane = "sync",
    batch_id: str | None = None,
) -> LlmCallResult:
    """The run's answer in ``completion``: the contract's reply, or the object the call's
    schema asks for.

    Raises:
        ApplicationError: as `reply_text`, `parse_reply`, `parse_object` and
            `check_reply_size` say.
    """
    text = reply_text(completion, call.workflow_id)
    confidence: float | None = None
    if call.output_schema is None:
        reply = parse_reply(text)
        content, needs_review, data = reply.content, reply.needs_review, None
        confidence = reply.confidence
    else:
        content, needs_review, data = text, False, parse_object(text)
    check_reply_size(content, call.max_reply_chars)
    return LlmCallResult(
        content=content,
        needs_review=needs_review,
        confidence=confidence,
        data=data,
        model=completion.model or call.model,
        usage=usage,
        cost_usd=cost,
        lane=lane,
        batch_id=batch_id,
    )


def record_call(record: CallRecord, completion: ChatCompletion, usage: TokenUsage) -> None:
    """What the GenAI span of a call says about its answer."""
    record.response_model = completion.model or None
    record.response_id = completion.id or None
    record.finish_reasons = [str(c.finish_reason) for c in completion.choices]
    record.input_tokens, record.output_tokens = usage.prompt_tokens, usage.completion_tokens
    record.cache_read_tokens = usage.cached_tokens
    if completion.choices:
        message = completion.choices[0].message
        record.content(
            "gen_ai.output.messages",
            _output_messages(message.content, completion.choices[0].finish_reason),
        )


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
        admission = Admission("go")
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
        admission: Admission,
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

    async def _settle(self, admission: Admission, call: LlmCallInput, done: Settlement) -> bool:
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


def _output_messages(content: str | None, finish_reason: str | None) -> str:
    return json.dumps(
        [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": content or ""}],
                "finish_reason": finish_reason or "",
            }
        ],
        ensure_ascii=False,
    )
