"""LLM reply parsing and error classification (pure parts of the LLM activity)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2 as httpx
import openai
import pytest
from temporalio.exceptions import ApplicationError

from activities.llm_errors import classify, retry_after
from activities.llm_reply import parse_reply
from activities.llm_request import build_messages, idempotency_key
from workflows import errors
from workflows.payloads import LlmCallInput


def test_plain_json_reply_parses() -> None:
    """The contract's JSON is accepted as is."""
    reply = parse_reply('{"content": "hi", "needs_review": true}')
    assert reply.content == "hi"
    assert reply.needs_review is True


def test_one_whole_fence_is_unwrapped() -> None:
    """JSON in a single Markdown fence around the whole reply is safely unwrapped."""
    reply = parse_reply('```json\n{"content": "hi", "needs_review": false}\n```')
    assert reply.content == "hi"


@pytest.mark.parametrize(
    "text",
    [
        "Sure! {content: nope}",
        '{"answer": "wrong shape"}',
        'Here you go:\n```json\n{"content": "a", "needs_review": false}\n```\nthanks',
        "",
    ],
)
def test_anything_else_is_malformed_and_retryable(text: str) -> None:
    """Non-JSON, wrong shape or a fence with prose around it: retryable LlmMalformedReply."""
    with pytest.raises(ApplicationError) as info:
        parse_reply(text)
    assert info.value.type == errors.LLM_MALFORMED_REPLY
    assert not info.value.non_retryable


def status_error(status: int, code: str | None = None, headers: dict[str, str] | None = None):
    request = httpx.Request("POST", "http://llm/v1/chat/completions")
    body = {"error": {"message": "boom", "type": "x", "code": code}}
    response = httpx.Response(status, headers=headers or {}, json=body, request=request)
    client = openai.OpenAI(api_key="k", base_url="http://llm/v1")
    return client._make_status_error_from_response(response)


@pytest.mark.parametrize(
    ("status", "code", "expected_type", "permanent"),
    [
        (429, "rate_limit_exceeded", errors.LLM_RATE_LIMITED, False),
        (429, "insufficient_quota", errors.LLM_QUOTA_EXHAUSTED, True),
        (500, None, errors.LLM_RETRYABLE, False),
        (503, None, errors.LLM_RETRYABLE, False),
        (408, None, errors.LLM_RETRYABLE, False),
        (400, None, errors.LLM_PERMANENT, True),
        (401, None, errors.LLM_PERMANENT, True),
        (403, None, errors.LLM_PERMANENT, True),
        (404, None, errors.LLM_PERMANENT, True),
    ],
)
def test_status_errors_are_classified(
    status: int, code: str | None, expected_type: str, permanent: bool
) -> None:
    """Each HTTP failure maps to one stable type, retryable or not."""
    mapped = classify(status_error(status, code))
    assert mapped.type == expected_type
    assert mapped.non_retryable is permanent


def test_rate_limit_carries_retry_after() -> None:
    """A 429's Retry-After becomes the ApplicationError's next_retry_delay."""
    mapped = classify(status_error(429, "rate_limit_exceeded", {"retry-after": "2"}))
    assert mapped.next_retry_delay == timedelta(seconds=2)


def test_retry_after_forms() -> None:
    """retry-after-ms wins; seconds and HTTP dates are understood; garbage is ignored."""
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == timedelta(seconds=1.5)
    assert retry_after({"retry-after": "3"}) == timedelta(seconds=3)
    future = datetime.now(UTC) + timedelta(seconds=30)
    parsed = retry_after({"retry-after": format_datetime(future, usegmt=True)})
    assert parsed is not None and timedelta(seconds=25) < parsed <= timedelta(seconds=30)
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def test_connection_and_timeout_errors_are_retryable() -> None:
    """Network trouble is transient."""
    request = httpx.Request("POST", "http://llm/v1/chat/completions")
    for err in (openai.APIConnectionError(request=request), openai.APITimeoutError(request)):
        mapped = classify(err)
        assert mapped.type == errors.LLM_RETRYABLE
        assert not mapped.non_retryable


def test_messages_carry_feedback_and_correction() -> None:
    """Reviewer feedback is appended to the user turn; a correction follows a malformed reply."""
    call = LlmCallInput(
        workflow_id="w",
        system_prompt="sys",
        user_prompt="question",
        model="m",
        attempt=3,
        feedback=["shorter", "friendlier"],
        corrective=True,
    )
    messages = build_messages(call, None)
    assert messages[0] == {"role": "system", "content": "sys"}
    user = str(messages[1]["content"])
    assert user.startswith("question")
    assert "Reviewer feedback: shorter" in user and "Reviewer feedback: friendlier" in user
    assert "JSON" in str(messages[2]["content"])
    assert idempotency_key(call) == "w:invoke_llm:3"
