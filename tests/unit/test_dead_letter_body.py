"""Dead-letter bodies stay under SQS's size limit and say what was cut."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from activities.dead_letter import MAX_BODY_BYTES, dedup_key, fit_body
from workflows.payloads import DeadLetterMessage, HistoryEntry


def message(text_size: int, history: int, error_size: int = 10) -> DeadLetterMessage:
    entry = HistoryEntry(
        from_state="invoke_llm",
        to_state="retry_llm",
        event="retryable_error",
        at=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        detail="x" * 500,
    )
    return DeadLetterMessage(
        workflow_id="w1",
        run_id="r1",
        request={"request_id": "a" * 24, "user_message": "m" * text_size},
        failed_state="invoke_llm",
        attempts=5,
        last_error="e" * error_size,
        history=[entry] * history,
    )


def test_small_message_is_sent_whole() -> None:
    """Under the limit nothing is changed."""
    small = message(100, 3)
    assert json.loads(fit_body(small)) == json.loads(small.model_dump_json())


def test_huge_message_is_cut_and_marked() -> None:
    """A 1 MB request, long errors and a long history still fit, and the cut is stated."""
    body = fit_body(message(1_000_000, 2000, error_size=100_000))
    assert len(body.encode()) <= MAX_BODY_BYTES
    decoded = json.loads(body)
    assert "cut" in decoded["request"]["truncated"]
    assert decoded["workflow_id"] == "w1"
    assert decoded["last_error"].endswith("[cut]")


def test_dedup_key_is_workflow_and_run() -> None:
    """The deduplication key names the exact run."""
    assert dedup_key(message(1, 0)) == "w1:r1"
