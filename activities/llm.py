"""The LLM: one Chat Completions call per activity attempt, with its errors classified here.

The ``openai`` client's own retries are off (``max_retries=0``) and its timeout is shorter than
the activity's, so every attempt is the workflow's and shows in history. Classification, in one
place: transient failures (timeouts, connection errors, 408/409/429, 5xx, malformed or truncated
replies) raise retryable errors; the rest (bad request, auth, not found, exhausted quota,
refusals, content filter) raise non-retryable ones with stable type names.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import re
import time
from datetime import timedelta
from typing import Any

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import HEARTBEAT_EVERY, heartbeat_while
from activities.pricing import estimate_cost
from activities.prompt import CORRECTIVE_INSTRUCTION, InputLoader
from activities.redaction import scrubbed_error
from aiorch.runtime.config import PriceTable
from workflows import contract, errors
from workflows.observability import METRIC_LLM_COST, METRIC_LLM_TOKENS
from workflows.payloads import LlmCallInput, LlmCallResult, LlmReply, TokenUsage

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(?P<body>.*?)\n\s*```\s*$", re.DOTALL)
PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 422})


def idempotency_key(call: LlmCallInput) -> str:
    """Stable per (workflow, state, attempt): a gateway that honours it dedupes a re-sent call."""
    return f"{call.workflow_id}:{contract.ACTIVITY_INVOKE_LLM}:{call.attempt}"


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
        messages.append({"role": "user", "content": CORRECTIVE_INSTRUCTION})
    return messages


def parse_reply(text: str) -> LlmReply:
    """The model's text as the contract's reply, unwrapping one whole-reply Markdown fence.

    Raises:
        ApplicationError: ``LlmMalformedReply`` (retryable) for anything else.
    """
    fenced = _FENCE.match(text)
    body = fenced.group("body") if fenced else text
    try:
        return LlmReply.model_validate(json.loads(body))
    except (json.JSONDecodeError, ValidationError) as err:
        # Never quote the reply: error texts reach worker logs, which payload encryption
        # does not cover.
        raise ApplicationError(
            f"reply is not the contract's JSON ({type(err).__name__}; {len(text)} characters)",
            type=errors.LLM_MALFORMED_REPLY,
        ) from None


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


def reply_from_completion(completion: ChatCompletion) -> LlmReply:
    """Check finish reason, refusal and content, then parse."""
    if not completion.choices:
        raise ApplicationError("LLM returned no choices", type=errors.LLM_MALFORMED_REPLY)
    choice = completion.choices[0]
    if choice.finish_reason == "content_filter":
        raise ApplicationError(
            "the provider's content filter blocked the reply",
            type=errors.LLM_REFUSED,
            non_retryable=True,
        )
    if choice.message.refusal:
        raise ApplicationError(
            f"the model refused: {choice.message.refusal[:200]}",
            type=errors.LLM_REFUSED,
            non_retryable=True,
        )
    if choice.finish_reason == "length":
        raise ApplicationError(
            "reply truncated (finish_reason=length)", type=errors.LLM_MALFORMED_REPLY
        )
    return parse_reply(choice.message.content or "")


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


def record_usage(prices: PriceTable, model: str, usage: TokenUsage) -> None:
    """Count the tokens a call used (by model and kind) and its estimated cost (by model).

    Every completion the provider answered counts, a malformed or truncated one too: it is
    billed all the same.
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


class LlmActivities:
    """The ``invoke_llm`` activity, with its client and loader injected by the worker."""

    def __init__(
        self,
        client: AsyncOpenAI,
        loader: InputLoader,
        timeout_s: float,
        *,
        prices: PriceTable | None = None,
        heartbeat_every: timedelta = HEARTBEAT_EVERY,
    ) -> None:
        self._client = client
        self._loader = loader
        self._timeout_s = timeout_s
        self._prices: PriceTable = prices or {}
        self._heartbeat_every = heartbeat_every

    @activity.defn(name=contract.ACTIVITY_INVOKE_LLM)
    async def invoke_llm(self, call: LlmCallInput) -> LlmCallResult:
        """One Chat Completions call; heartbeats while waiting so a cancel reaches it."""
        document = await self._loader.load(call.input_ref) if call.input_ref else None
        request = self._client.chat.completions.create(
            model=call.model,
            messages=build_messages(call, document),
            temperature=call.temperature,
            response_format={"type": "json_object"},
            timeout=self._timeout_s,
            extra_headers={
                "Idempotency-Key": idempotency_key(call),
                "X-Run-Id": call.workflow_id,
            },
        )
        try:
            completion = await heartbeat_while(
                request, f"waiting for {call.model}", self._heartbeat_every
            )
        except openai.OpenAIError as err:
            # Provider error bodies may echo the key; it must not reach history or logs.
            raise scrubbed_error(classify(err), [self._client.api_key]) from None
        usage = completion.usage
        tokens = TokenUsage(
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
        )
        model = completion.model or call.model
        record_usage(self._prices, model, tokens)
        reply = reply_from_completion(completion)
        check_reply_size(reply.content, call.max_reply_chars)
        return LlmCallResult(
            content=reply.content, needs_review=reply.needs_review, model=model, usage=tokens
        )
