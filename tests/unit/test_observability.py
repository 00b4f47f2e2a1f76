"""Transition span attributes and metric labels: pure helpers of workflows.engine.observability."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workflows.engine.observability import (
    UNKNOWN_REASON,
    error_reason,
    failed_state,
    span_name,
    transition_attributes,
)
from workflows.llm.graph import GRAPH
from workflows.payloads import HistoryEntry, LlmCallResult, TokenUsage

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
PROMPT = "my private question"
REPLY = LlmCallResult(
    content="a private answer",
    needs_review=True,
    model="sim-small",
    usage=TokenUsage(prompt_tokens=11, completion_tokens=7, total_tokens=18),
)


def entry(
    source: str, target: str, event: str, seconds: float = 0, **extra: object
) -> HistoryEntry:
    return HistoryEntry.model_validate(
        {
            "from_state": source,
            "to_state": target,
            "event": event,
            "at": T0 + timedelta(seconds=seconds),
            "attempt": 2,
            **extra,
        }
    )


@pytest.mark.parametrize(
    ("last_error", "reason"),
    [
        ("LlmRateLimited: HTTP 429 from the LLM", "LlmRateLimited"),
        ("Timeout: activity timed out (START_TO_CLOSE)", "Timeout"),
        ("something odd happened", UNKNOWN_REASON),
        ("a: b: c with spaces first", "a"),
        (None, UNKNOWN_REASON),
        ("", UNKNOWN_REASON),
    ],
)
def test_error_reason_is_the_type_prefix(last_error: str | None, reason: str) -> None:
    """The retry reason label is the error type at the front of last_error, else Unknown."""
    assert error_reason(last_error) == reason


def test_failed_state_names_invoke_llm_for_exhausted_retries() -> None:
    """Dead letters are labelled like the dead-letter message: retry_llm counts as invoke_llm."""
    assert failed_state(GRAPH, entry("retry_llm", "dead_letter", "exhausted")) == "invoke_llm"
    assert failed_state(GRAPH, entry("escalate", "dead_letter", "escalation_timeout")) == (
        "escalate"
    )


def test_span_name_shows_the_edge() -> None:
    """Transition spans are named after their edge."""
    assert span_name(entry("invoke_llm", "await_review", "needs_review")) == (
        "transition invoke_llm->await_review"
    )


def test_answer_transition_carries_model_and_tokens_but_no_text_by_default() -> None:
    """Leaving invoke_llm with an answer reports model and token usage; no prompt, reply or
    detail text unless the plan captures content."""
    move = entry("invoke_llm", "await_review", "needs_review", detail="answered by sim-small")
    attributes = transition_attributes(
        "wf1",
        move,
        model=None,
        answer=REPLY,
        prompt=PROMPT,
        capture_content=False,
        last_error=None,
    )
    assert attributes == {
        "aiorch.workflow_id": "wf1",
        "aiorch.from_state": "invoke_llm",
        "aiorch.to_state": "await_review",
        "aiorch.event": "needs_review",
        "aiorch.attempt": 2,
        "gen_ai.response.model": "sim-small",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "aiorch.tokens.total": 18,
        "aiorch.lane": "sync",
    }


def test_capture_content_adds_prompt_reply_and_detail() -> None:
    """With capture_content the answer's span also holds the prompt, reply and detail."""
    move = entry("invoke_llm", "generate_embedding", "llm_ok", detail="answered by sim-small")
    attributes = transition_attributes(
        "wf1",
        move,
        model="sim-large",
        answer=REPLY,
        prompt=PROMPT,
        capture_content=True,
        last_error=None,
    )
    assert attributes["aiorch.prompt"] == PROMPT
    assert attributes["aiorch.reply"] == "a private answer"
    assert attributes["aiorch.detail"] == "answered by sim-small"


def test_other_transitions_carry_no_tokens_and_errors_carry_their_type() -> None:
    """An edge that reports no answer carries no tokens (even with content captured);
    error edges name the error type."""
    move = entry("invoke_llm", "retry_llm", "retryable_error", detail="LlmRetryable: HTTP 503")
    attributes = transition_attributes(
        "wf1",
        move,
        model="sim-large",
        answer=None,
        prompt=None,
        capture_content=True,
        last_error="LlmRetryable: HTTP 503",
    )
    assert "gen_ai.usage.input_tokens" not in attributes
    assert attributes["gen_ai.response.model"] == "sim-large"
    assert attributes["aiorch.error_type"] == "LlmRetryable"
    assert "aiorch.reply" not in attributes and "aiorch.prompt" not in attributes
