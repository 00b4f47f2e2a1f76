"""Pure helpers behind `starter.py stats` and `starter.py stuck`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aiorch.ops.operations import (
    StuckAction,
    StuckRun,
    applies,
    approval_delays,
    format_duration,
    mean_duration,
    parse_duration,
    stuck_query,
    visibility_time,
)
from workflows.graph import State
from workflows.payloads import HistoryEntry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h", 3600),
        ("2s", 2),
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("500ms", 0.5),
        ("1.5h", 5400),
        (" 1H 30M ", 5400),
        ("0s", 0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    """--older-than takes number+unit parts."""
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "1h-", "-1h", "soon"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    """Anything else is an error that shows the accepted form."""
    with pytest.raises(ValueError, match="90s, 15m, 1h30m"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.25, "250ms"),
        (12.34, "12.3s"),
        (245, "4m05s"),
        (3 * 3600 + 720, "3h12m"),
        (180000, "2d02h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    """Ages and averages print short."""
    assert format_duration(timedelta(seconds=seconds)) == text


def test_stuck_query_covers_runs_never_picked_up() -> None:
    """Open runs older than the cutoff in their state, or started before it and never moved."""
    query = stuck_query(T0, State.AWAIT_REVIEW)
    assert query == (
        "WorkflowType = 'AiOrchestrator' AND ExecutionStatus = 'Running' AND "
        "(AiStateSince < '2026-11-01T12:00:00Z' OR "
        "(AiStateSince IS NULL AND StartTime < '2026-11-01T12:00:00Z')) "
        "AND AiState = 'await_review'"
    )
    assert "AiState =" not in stuck_query(T0)


def test_visibility_time_is_utc() -> None:
    """Any timezone is written as UTC with a Z."""
    plus_two = T0.astimezone(__import__("datetime").timezone(timedelta(hours=2)))
    assert visibility_time(plus_two) == "2026-11-01T12:00:00Z"


@pytest.mark.parametrize(
    ("action", "state", "expected"),
    [
        (StuckAction.TIMEOUT, "await_review", True),
        (StuckAction.TIMEOUT, "escalate", True),
        (StuckAction.TIMEOUT, "retry_llm", False),
        (StuckAction.DEAD_LETTER, "escalate", True),
        (StuckAction.DEAD_LETTER, "invoke_llm", False),
        (StuckAction.CANCEL, "invoke_llm", True),
        (StuckAction.CANCEL, None, True),
        (StuckAction.NONE, "await_review", False),
    ],
)
def test_actions_apply_to_their_states(
    action: StuckAction, state: str | None, expected: bool
) -> None:
    """The review signals act on review states only; cancel acts on any state."""
    assert applies(action, StuckRun("wf", state, T0)) is expected


def step(source: str, target: str, event: str, seconds: float) -> HistoryEntry:
    return HistoryEntry(
        from_state=source, to_state=target, event=event, at=T0 + timedelta(seconds=seconds)
    )


def test_approval_delay_spans_escalation_and_restarts_after_reedit() -> None:
    """Each approval counts from when its review was asked for; notes are ignored."""
    history = [
        step("idle", "fetch_prompt", "start", 0),
        step("invoke_llm", "await_review", "needs_review", 10),
        step("await_review", "invoke_llm", "reedit", 40),
        step("invoke_llm", "await_review", "needs_review", 50),
        step("await_review", "await_review", "continued_as_new", 55),
        step("await_review", "escalate", "review_timeout", 110),
        step("escalate", "generate_embedding", "approve", 130),
        step("generate_embedding", "completed", "embedded", 131),
    ]
    assert approval_delays(history) == [timedelta(seconds=80)]
    assert approval_delays(history[:3]) == []


def test_mean_duration() -> None:
    """The mean and its sample size; no samples, no mean."""
    summary = mean_duration([timedelta(seconds=1), timedelta(seconds=3)])
    assert (summary.mean, summary.samples) == (timedelta(seconds=2), 2)
    assert mean_duration([]).mean is None
