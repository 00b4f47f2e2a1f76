"""Continue-as-new: when it is due, how the carried state stays bounded, and input parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from workflows.continuation import (
    CONTINUE_AT_BYTES,
    CONTINUE_AT_EVENTS,
    bounded_feedback,
    bounded_history,
    is_due,
    split_input,
)
from workflows.payloads import CarriedState, ContinuedRun, HistoryEntry, PipelineRequest, PromptPlan

AT = datetime(2026, 1, 1, tzinfo=UTC)
REQUEST = {"request_id": "a" * 24, "user_message": "hello"}


def entry(n: int, detail: str = "") -> HistoryEntry:
    return HistoryEntry(
        from_state="await_review",
        to_state="invoke_llm",
        event="reedit",
        at=AT,
        detail=f"{n}{detail}",
    )


def plan() -> PromptPlan:
    return PromptPlan(
        system_prompt="s",
        user_prompt="u",
        review_timeout_s=1,
        escalation_timeout_s=1,
        llm_max_attempts=1,
        model="m",
    )


def test_due_after_the_round_budget_history_budget_or_server_suggestion() -> None:
    """Due after rounds_per_run reedits in this run, once the run's history passes its byte or
    event budget, or at once when the server suggests it; otherwise not."""
    small = {"history_bytes": 1000, "history_events": 100}
    assert not is_due(rounds_this_run=49, rounds_per_run=50, suggested=False, **small)
    assert is_due(rounds_this_run=50, rounds_per_run=50, suggested=False, **small)
    assert is_due(rounds_this_run=1, rounds_per_run=50, suggested=True, **small)
    assert is_due(
        rounds_this_run=1, rounds_per_run=50, suggested=False, history_bytes=CONTINUE_AT_BYTES
    )
    assert is_due(
        rounds_this_run=1, rounds_per_run=50, suggested=False, history_events=CONTINUE_AT_EVENTS
    )


def test_history_is_carried_whole_while_it_fits() -> None:
    """Two hundred rounds of entries (400) fit the budget: nothing is dropped."""
    entries = [entry(n) for n in range(400)]
    kept, dropped = bounded_history(entries)
    assert (kept, dropped) == (entries, 0)


def test_history_beyond_the_budget_drops_the_oldest_and_counts_them() -> None:
    """Past the byte budget the newest entries are kept, in order, and the rest counted."""
    entries = [entry(n, "x" * 1000) for n in range(300)]
    kept, dropped = bounded_history(entries, max_bytes=50_000)
    assert dropped == len(entries) - len(kept) > 0
    assert kept == entries[dropped:]
    assert sum(len(e.model_dump_json()) + 1 for e in kept) <= 50_000


def test_feedback_window_keeps_the_newest() -> None:
    """Reviewer feedback sent to the LLM is bounded; the oldest goes first."""
    feedback = [f"{n:04d}" + "y" * 996 for n in range(100)]
    kept = bounded_feedback(feedback, max_bytes=10_000)
    assert kept == feedback[-10:]


def test_plain_request_is_not_a_continuation() -> None:
    """A client's request passes through untouched, with no carried state."""
    assert split_input(REQUEST) == (REQUEST, None)
    assert split_input("not even a dict") == ("not even a dict", None)


def test_continued_input_splits_into_request_and_state() -> None:
    """A continued run's input yields the original request and the carried state."""
    carried = CarriedState(state="invoke_llm", history=[entry(1)], review_round=4, plan=plan())
    raw = ContinuedRun(request=PipelineRequest.model_validate(REQUEST), carried=carried).model_dump(
        mode="json"
    )
    request, state = split_input(raw)
    assert request["request_id"] == REQUEST["request_id"]
    assert state == carried


def test_malformed_continuation_is_a_validation_error() -> None:
    """Something that claims to carry state but is malformed is refused, not half-read."""
    with pytest.raises(ValidationError):
        split_input({"request": REQUEST, "carried": {"state": "invoke_llm"}})
