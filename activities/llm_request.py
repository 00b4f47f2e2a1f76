"""What a model call sends: its messages (a stable prefix first, for the provider's prompt
cache), its Chat Completions request, its idempotency key, and the digest the result cache
knows it by."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from openai.types.chat import ChatCompletionMessageParam

from activities.prompt import CORRECTIVE_INSTRUCTION, OBJECT_CORRECTIVE_INSTRUCTION
from activities.spend import call_key
from workflows.payloads import LlmCallInput

CacheScope = Literal["off", "pipeline", "tenant"]


def idempotency_key(call: LlmCallInput) -> str:
    """Stable per (run chain, state, attempt): a gateway that honours it dedupes a re-sent
    call, and never answers a new run that reuses the workflow id with an old run's reply."""
    return call_key(call)


def build_messages(call: LlmCallInput, document: str | None) -> list[ChatCompletionMessageParam]:
    """System prompt, the user's request, each reviewer's feedback, and a correction if due.

    A stable prefix first, for the provider's prompt cache: the system prompt (the pipeline's,
    the same for each of its runs), then a referenced document, then the run's own text; each
    review round and a correction only add to the end."""
    # A pipeline's own prompt starts with the blank line that parts it from the document; a
    # prompt from elsewhere (a lab's candidate, a rollout's variant) is parted from it here.
    apart = "\n\n" if document and not call.user_prompt.startswith("\n") else ""
    user_text = (document or "") + apart + call.user_prompt
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
