"""What a model call answered: its text, once the finish reason and a refusal are checked; the
contract's reply or the JSON object a schema asks for (one whole-reply Markdown fence
unwrapped; anything else is a retryable ``LlmMalformedReply``); its size; its tokens, cost and
metrics; and what the GenAI span says about it."""

from __future__ import annotations

import json
import re
from typing import Any

from openai.types.chat import ChatCompletion
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.pricing import estimate_cost
from aiorch_runtime.config import PriceTable
from aiorch_runtime.genai import CallRecord
from workflows import errors
from workflows.engine.observability import METRIC_LLM_COST, METRIC_LLM_TOKENS
from workflows.payloads import Lane, LlmCallInput, LlmCallResult, LlmReply, TokenUsage

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(?P<body>.*?)\n\s*```\s*$", re.DOTALL)

REFUSAL_DETAIL_CHARS = 1000  # a refusal is a sentence or two; the details are bounded anyway


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
