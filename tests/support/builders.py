"""Valid payloads for tests, with defaults for every field a test's behaviour does not depend
on, so that each test names only the fields it is about."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from workflows.payloads import DeadLetterMessage, HistoryEntry, PromptPlan

AT = datetime(2026, 1, 1, tzinfo=UTC)
REQUEST_ID = "a" * 24


def new_request_id() -> str:
    """A fresh contract-valid request id (24 lowercase hex chars), for a run of its own."""
    return uuid.uuid4().hex[:24]


def history_entry(source: str, target: str, event: str, **fields: Any) -> HistoryEntry:
    """One step of a run's history, taken at ``AT`` unless ``fields`` say otherwise."""
    return HistoryEntry.model_validate(
        {"from_state": source, "to_state": target, "event": event, "at": AT, **fields}
    )


def dead_letter(user_message: str = "hello", **fields: Any) -> DeadLetterMessage:
    """The dead letter of run w1/r1 asked ``user_message``: failed in invoke_llm after 3
    attempts on a retryable error, with no history; ``fields`` replace any of that."""
    return DeadLetterMessage.model_validate(
        {
            "workflow_id": "w1",
            "run_id": "r1",
            "request": {"request_id": REQUEST_ID, "user_message": user_message},
            "failed_state": "invoke_llm",
            "attempts": 3,
            "last_error": "LlmRetryable: HTTP 503 from the LLM: overloaded",
            "history": [],
            **fields,
        }
    )


def triage_fields(message: DeadLetterMessage) -> tuple[str, str, str, int]:
    """What triage and redrive read from a dead letter, which every reduced form keeps: the
    workflow and run ids, the state it failed in and its attempts."""
    return (message.workflow_id, message.run_id, message.failed_state, message.attempts)


def prompt_plan(**fields: Any) -> PromptPlan:
    """A plan with one-second review windows, one LLM attempt and model ``m``; ``fields``
    replace any of that."""
    return PromptPlan.model_validate(
        {
            "system_prompt": "s",
            "user_prompt": "u",
            "review_timeout_s": 1,
            "escalation_timeout_s": 1,
            "llm_max_attempts": 1,
            "model": "m",
            **fields,
        }
    )


def attacker_plan(system_prompt: str) -> PromptPlan:
    """A plan as an attacker would forge it into a continued run's input: her model, prompt and
    reviewers, a host file as input and content capture on."""
    return prompt_plan(
        system_prompt=system_prompt,
        input_ref="file:///proc/self/environ",
        model="attacker-model",
        capture_content=True,
        allowed_reviewers=["mallory"],
    )
