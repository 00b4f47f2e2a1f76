"""The simulator's answers: a deterministic reply built from the request, in the shape a
directive asks for, and deterministic embeddings."""

from __future__ import annotations

import hashlib
import json
import math
import struct
import time
from collections.abc import Iterable
from typing import Any

from aiorch.devstack.llm_simulator import extraction
from aiorch.devstack.llm_simulator.faults import Plan, strip_directives

REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
_FEEDBACK_PREFIX = "Reviewer feedback:"


def message_text(message: object) -> str:
    """The text of a chat message (its text parts joined); empty for anything else."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text parts carry directives
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def user_texts(messages: list[Any]) -> list[str]:
    """The texts of the user's messages, in order."""
    return [message_text(m) for m in messages if isinstance(m, dict) and m.get("role") == "user"]


def _is_feedback(line: str) -> bool:
    return line.strip().startswith(_FEEDBACK_PREFIX)


def _answer(model: str, messages: list[Any], plan: Plan) -> dict[str, Any]:
    """The deterministic reply the model is asked for: ``{content, needs_review}``, or the
    object a system prompt's JSON Schema asks for (``extraction``; its ``total`` off by one
    when the plan says ``wrong_total``)."""
    system = [
        message_text(m) for m in messages if isinstance(m, dict) and m.get("role") == "system"
    ]
    schema = extraction.output_schema(system[0]) if system else None
    if schema is not None:
        asked = user_texts(messages)
        document = [line for text in asked for line in text.splitlines() if not _is_feedback(line)]
        said = [line for text in asked for line in text.splitlines() if _is_feedback(line)]
        found = extraction.extract(schema, "\n".join(document), said)
        return extraction.off_by_one(found, "total") if plan.wrong_total else found
    feedback = [
        strip_directives(line.strip().removeprefix(_FEEDBACK_PREFIX))
        for text in map(message_text, messages)
        for line in text.splitlines()
        if _is_feedback(line)
    ]
    asked = user_texts(messages)
    last_user = asked[-1].splitlines() if asked else []
    question = strip_directives(" ".join(line for line in last_user if not _is_feedback(line)))
    content = f"Simulated answer ({model}): {question[:80]}"
    if feedback:
        content += f" (revised per feedback: {'; '.join(feedback)})"
    return {"content": content, "needs_review": plan.review}


def _shape_reply(shape: str | None, answer: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """Return (content, finish_reason, refusal) for the chosen reply shape."""
    text = json.dumps(answer)
    match shape:
        case "malformed":
            return f"Sure! Here is your answer: {{content: {answer.get('content')}", "stop", None
        case "fenced":
            return f"```json\n{text}\n```", "stop", None
        case "badjson":
            return json.dumps({"answer": answer.get("content")}), "stop", None
        case "truncated":
            return text[: len(text) // 2], "length", None
        case "refusal":
            return None, "stop", REFUSAL_TEXT
        case "content_filter":
            return None, "content_filter", None
    return text, "stop", None


def embed(text: str, dim: int) -> list[float]:
    """Return the deterministic unit vector for ``text`` (directives stripped)."""
    raw = hashlib.shake_256(strip_directives(text).encode()).digest(4 * dim)
    values = [n / 2**31 - 1.0 for n in struct.unpack(f"<{dim}I", raw)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def word_count(texts: Iterable[str]) -> int:
    """The simulator's token count: whitespace-separated words."""
    return sum(len(text.split()) for text in texts)


def completion(
    seq: int, model: str, messages: list[Any], texts: list[str], plan: Plan, cached: int = 0
) -> dict[str, Any]:
    """The Chat Completions answer for call ``seq``, shaped as ``plan`` decided; ``cached``
    of its prompt tokens came from the prompt cache."""
    answer = _answer(model, messages, plan)
    content, finish_reason, refusal = _shape_reply(plan.shape, answer)
    message = {"role": "assistant", "content": content, "refusal": refusal}
    choice = {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
    prompt_tokens, completion_tokens = word_count(texts), word_count([content or ""])
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": min(cached, prompt_tokens)},
    }
    return {
        "id": f"chatcmpl-sim-{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage,
    }
