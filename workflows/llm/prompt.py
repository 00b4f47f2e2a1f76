"""The LLM pipeline's prompt, built from the request alone (pure: ``fetch_prompt`` builds it,
and workflow code could).

A message by reference (``file://``, ``s3://``) stays a reference: ``invoke_llm`` loads it and
puts it before the prompt, so a large document never enters history.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from typing import Any

from workflows.engine.planning import context_suffix
from workflows.payloads import PipelineRequest

SYSTEM_PROMPT = (
    "You are a careful assistant inside an automated pipeline. Answer the user's request. "
    'Reply with ONLY a JSON object of the form {"content": string, "needs_review": boolean} '
    "and nothing else: no Markdown, no code fences. Set needs_review to true when a human "
    "should check the answer before it is used (uncertain facts, sensitive or risky content). "
    'You may add "confidence": a number from 0 to 1, how sure you are that the answer is right.'
)


def prompt(request: PipelineRequest) -> dict[str, Any]:
    """The run's prompt fields (``PromptSpec``): the system prompt, the message with the
    request's context, and the message's reference when it is one."""
    if request.is_reference:
        return {
            "system_prompt": SYSTEM_PROMPT,
            "user_prompt": context_suffix(request.metadata),
            "input_ref": request.user_message,
        }
    return {
        "system_prompt": SYSTEM_PROMPT,
        "user_prompt": request.user_message + context_suffix(request.metadata),
        "input_ref": None,
    }
