"""Pure helpers behind `starter.py stats` (`aiorch.ops.stats`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aiorch.ops.stats import approval_delays, mean_duration
from workflows.payloads import HistoryEntry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


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
