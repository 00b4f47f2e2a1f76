"""What the LLM activity's tests share: the input of one call."""

from __future__ import annotations

from workflows.llm.prompt import SYSTEM_PROMPT
from workflows.payloads import LlmCallInput


def call(message: str, **fields: object) -> LlmCallInput:
    """A first-attempt call to sim-large asking ``message``; ``fields`` replace any of that.
    Its run id is the message's own: the simulator counts a directive's faults per run id, so
    each message starts from none while one sent again (another attempt) counts on."""
    values: dict[str, object] = {
        "workflow_id": f"w-{abs(hash(message))}",
        "system_prompt": SYSTEM_PROMPT,
        "user_prompt": message,
        "model": "sim-large",
        "attempt": 1,
    }
    values.update(fields)
    return LlmCallInput.model_validate(values)
