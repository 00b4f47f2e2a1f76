"""Pure helpers behind `starter.py stats` (`aiorch.ops.stats`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aiorch.ops.stats import Approval, approval_delays, approvals, auto_approvals, mean_duration
from workflows.payloads import HistoryEntry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def step(source: str, target: str, event: str, seconds: float, **more: str) -> HistoryEntry:
    return HistoryEntry(
        from_state=source,
        to_state=target,
        event=event,
        at=T0 + timedelta(seconds=seconds),
        **more,
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


def test_approvals_name_their_group_and_leave_out_rules_and_votes() -> None:
    """Under a review policy each approval counts in the group that decided it (a vote before
    it changes nothing); an approval by an auto-approve rule is no reviewer's delay, but is
    counted as an auto-approval."""
    history = [
        step("invoke_llm", "await_review", "needs_review", 10),
        step("await_review", "await_review", "review_vote", 20, reviewer="ann", vote="approve"),
        step("await_review", "escalate", "review_timeout", 70, group="leads"),
        step("escalate", "generate_embedding", "approve", 100, group="leads", reviewer="dave"),
        step("invoke_llm", "await_review", "needs_review", 110),
        step("await_review", "generate_embedding", "approve", 110, rule="confident"),
    ]
    assert approvals(history) == [Approval(timedelta(seconds=90), "leads")]
    assert auto_approvals(history) == 1
