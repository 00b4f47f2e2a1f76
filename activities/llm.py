"""The LLM: one Chat Completions call per activity attempt, with its errors classified here.

A call answers in JSON: the contract's ``LlmReply`` (``{"content", "needs_review"}``), or, when
the call carries an ``output_schema`` (a pipeline's extraction), one JSON object that the
pipeline validates against that schema itself. A referenced document is read again here (large
inputs never enter history); a PDF's text is extracted, and checked against the hash the run's
extraction recorded when the call names one (``input_sha256``).

The ``openai`` client's own retries are off (``max_retries=0``) and its timeout is shorter than
the activity's, so every attempt is the workflow's and shows in history. Classification, in one
place: transient failures (timeouts, connection errors, 408/409/429, 5xx, malformed or truncated
replies) raise retryable errors; the rest (bad request, auth, not found, exhausted quota,
refusals, content filter) raise non-retryable ones with stable type names.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import re
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.capacity import Admission, CallGate, Settlement, record_spend
from activities.documents.extract import document_text
from activities.heartbeat import HEARTBEAT_EVERY, heartbeat_while
from activities.pricing import estimate_cost
from activities.prompt import CORRECTIVE_INSTRUCTION, OBJECT_CORRECTIVE_INSTRUCTION, InputLoader
from activities.redaction import scrubbed_error
from aiorch.runtime.capacity import ProviderSignal
from aiorch.runtime.config import PriceTable
from aiorch.runtime.genai import OPERATION_CHAT, CallRecord, GenAiTelemetry, text_messages
from workflows import contract, errors
from workflows.engine.observability import METRIC_LLM_COST, METRIC_LLM_TOKENS
from workflows.payloads import DEFAULT_TENANT, LlmCallInput, LlmCallResult, LlmReply, TokenUsage

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(?P<body>.*?)\n\s*```\s*$", re.DOTALL)
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 422})
REFUSAL_DETAIL_CHARS = 1000  # a refusal is a sentence or two; the details are bounded anyway


def idempotency_key(call: LlmCallInput) -> str:
    """Stable per (run chain, state, attempt): a gateway that honours it dedupes a re-sent
    call, and never answers a new run that reuses the workflow id with an old run's reply."""
    run = f"{call.workflow_id}/{call.chain_id}" if call.chain_id else call.workflow_id
    return f"{run}:{contract.ACTIVITY_INVOKE_LLM}:{call.attempt}"


def build_messages(call: LlmCallInput, document: str | None) -> list[ChatCompletionMessageParam]:
    """System prompt, the user's request, each reviewer's feedback, and a correction if due."""
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
        status, code = err.status_code, getattr(err, "code", None)
        summary = f"HTTP {status} from the LLM: {err.message}"
        if status == 429 and code == "insufficient_quota":
            return ApplicationError(summary, type=errors.LLM_QUOTA_EXHAUSTED, non_retryable=True)
        if status == 429:
            return ApplicationError(
                summary,
                type=errors.LLM_RATE_LIMITED,
                next_retry_delay=retry_after(err.response.headers),
            )
        if status in PERMANENT_STATUSES:
            return ApplicationError(summary, type=errors.LLM_PERMANENT, non_retryable=True)
        return ApplicationError(
            summary, type=errors.LLM_RETRYABLE, next_retry_delay=retry_after(err.response.headers)
        )
    return ApplicationError(f"LLM client error: {err}", type=errors.LLM_RETRYABLE)


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


def record_usage(prices: PriceTable, model: str, usage: TokenUsage) -> float | None:
    """Count the tokens a call used (by model and kind) and its estimated cost (by model).

    Every completion the provider answered counts, a malformed or truncated one too: it is
    billed all the same. Returns the cost (None for a model without a price).
    """
    meter = activity.metric_meter()
    tokens = meter.create_counter(METRIC_LLM_TOKENS, "LLM tokens used, by model and kind")
    tokens.add(usage.prompt_tokens, {"model": model, "kind": "prompt"})
    tokens.add(usage.completion_tokens, {"model": model, "kind": "completion"})
    cost = estimate_cost(prices, model, usage.prompt_tokens, usage.completion_tokens)
    if cost is not None:
        meter.create_histogram_float(
            METRIC_LLM_COST, "Estimated cost of each LLM call (sum = total), from LLM_PRICE_TABLE"
        ).record(cost, {"model": model})
    return cost


class LlmActivities:
    """The ``invoke_llm`` activity, with its client, loader, call gate (budgets and shared
    capacity) and GenAI telemetry injected by the worker."""

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
    ) -> None:
        self._client = client
        self._loader = loader
        self._timeout_s = timeout_s
        self._prices: PriceTable = prices or {}
        self._heartbeat_every = heartbeat_every
        self._gate = gate
        self._telemetry = telemetry or GenAiTelemetry(str(client.base_url))
        self._tenants = budgeted_tenants | {DEFAULT_TENANT}

    @activity.defn(name=contract.ACTIVITY_INVOKE_LLM)
    async def invoke_llm(self, call: LlmCallInput) -> LlmCallResult:
        """One Chat Completions call, once the budgets and the model's shared capacity allow
        it (else a result that says why no call was made); heartbeats while waiting."""
        document = await self._document(call)
        messages = build_messages(call, document)
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
        max_tokens = self._gate.max_output_tokens if self._gate is not None else None
        with self._telemetry.call(
            OPERATION_CHAT, call.model, temperature=call.temperature, max_tokens=max_tokens
        ) as record:
            record.content("gen_ai.system_instructions", text_messages(messages[:1]))
            record.content("gen_ai.input.messages", text_messages(messages[1:]))
            return await self._call(call, messages, admission, record, max_tokens)

    async def _call(
        self,
        call: LlmCallInput,
        messages: list[ChatCompletionMessageParam],
        admission: Admission,
        record: CallRecord,
        max_tokens: int | None,
    ) -> LlmCallResult:
        extra: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
        request = self._client.chat.completions.with_raw_response.create(
            model=call.model,
            messages=messages,
            temperature=call.temperature,
            response_format={"type": "json_object"},
            timeout=self._timeout_s,
            extra_headers={
                "Idempotency-Key": idempotency_key(call),
                "X-Run-Id": call.workflow_id,
            },
            **extra,
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
        usage = completion.usage
        tokens = TokenUsage(
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
        )
        model = completion.model or call.model
        record.response_model, record.response_id = model, completion.id or None
        record.finish_reasons = [str(c.finish_reason) for c in completion.choices]
        record.input_tokens, record.output_tokens = tokens.prompt_tokens, tokens.completion_tokens
        if completion.choices:
            message = completion.choices[0].message
            record.content(
                "gen_ai.output.messages",
                _output_messages(message.content, completion.choices[0].finish_reason),
            )
        cost = record_usage(self._prices, model, tokens)
        await self._settle(
            admission,
            call,
            Settlement(
                used=tokens.total_tokens,
                called=True,
                signal=provider_signal(raw.headers, throttled=False),
                cost_usd=cost,
            ),
        )
        try:
            text = reply_text(completion, call.workflow_id)
            confidence: float | None = None
            if call.output_schema is None:
                reply = parse_reply(text)
                content, needs_review, data = reply.content, reply.needs_review, None
                confidence = reply.confidence
            else:
                content, needs_review, data = text, False, parse_object(text)
            check_reply_size(content, call.max_reply_chars)
        except ApplicationError as err:
            record.error_type = err.type or type(err).__name__
            raise
        return LlmCallResult(
            content=content,
            needs_review=needs_review,
            confidence=confidence,
            data=data,
            model=model,
            usage=tokens,
            cost_usd=cost,
        )

    async def _document(self, call: LlmCallInput) -> str | None:
        """The referenced document's text, read again (a PDF's extracted), or None."""
        if not call.input_ref:
            return None
        if call.input_sha256 is None:
            return await self._loader.load(call.input_ref)
        return await document_text(
            self._loader,
            call.input_ref,
            sha256=call.input_sha256,
            heartbeat_every=self._heartbeat_every,
        )

    async def _settle(self, admission: Admission, call: LlmCallInput, done: Settlement) -> None:
        if done.cost_usd:
            record_spend(call.tenant, done.cost_usd, self._tenants)
        if self._gate is not None:
            await self._gate.settle(admission, call, done)


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
