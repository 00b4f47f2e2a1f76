"""The reviews report's time to decision, computed in SQL (nearest rank by a window function),
against the nearest-rank percentile counted here in Python, on an SQLite ledger holding
decisions with known delays."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from aiorch.ops import ledger

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STARTED = datetime(2026, 12, 1, 9, 0)


def nearest_rank(values: list[float], share: float) -> float | None:
    """The value at rank ceil(share * n) of the sorted values (1-based); None for none."""
    if not values:
        return None
    return sorted(values)[max(0, math.ceil(round(share * len(values), 9)) - 1)]


def run(run_id: str, decisions: list[tuple[str, float | None]]) -> ledger.Projection:
    """One closed run of the default tenant with ``decisions``: (group, delay in seconds or
    None), each decided at the moment of its delay after the review started."""
    rows = [
        {
            "chain_id": run_id,
            "entry_id": f"{run_id}-{position}",
            "run_id": run_id,
            "workflow_id": run_id,
            "review_round": position,
            "kind": "decision",
            "decision": "approve",
            "reviewer": f"{group}-reviewer",
            "review_group": group,
            "rule": None,
            "state": "await_review",
            "review_started_at": STARTED,
            "decided_at": STARTED + timedelta(seconds=delay or 0),
            "delay_s": delay,
            "feedback_present": False,
        }
        for position, (group, delay) in enumerate(decisions)
    ]
    summary = {
        "run_id": run_id,
        "workflow_id": run_id,
        "chain_id": run_id,
        "workflow_type": "AiOrchestratorWorkflow",
        "pipeline": "llm",
        "pipeline_version": None,
        "tenant": "default",
        "requester": None,
        "state": "completed",
        "state_since": STARTED,
        "awaiting_review": False,
        "status": "completed",
        "started_at": STARTED,
        "ended_at": STARTED + timedelta(hours=1),
        "cost_usd": 0.0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "attempts": 0,
        "model": None,
        "lane": None,
        "review_rounds": len(decisions),
        "history_length": 1,
    }
    return ledger.Projection(run=summary, review_decisions=rows)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    opened = ledger.open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield opened
    opened.dispose()


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 9, 10, 11, 19, 20, 21])
def test_percentiles_are_the_nearest_rank_of_the_timed_decisions(
    engine: Engine, count: int
) -> None:
    """For n decisions of one group with distinct, shuffled delays, plus two without a delay,
    the report's p50 and p90 are the delays at ranks ceil(0.5 n) and ceil(0.9 n), and the
    group's decisions count the untimed ones too; another group's delays do not mix in."""
    delays = [float((7 * index) % (count + 3) + index / 100) for index in range(count)]
    ledger.write(engine, run("timed", [("team", d) for d in delays] + [("team", None)] * 2))
    ledger.write(engine, run("other", [("other", 1000.0), ("other", 2000.0)]))
    found = {line.name: line for line in ledger.reviews(engine, now=NOW).by_group}
    assert found["team"].decisions == count + 2
    assert found["team"].p50_s == nearest_rank(delays, 0.5)
    assert found["team"].p90_s == nearest_rank(delays, 0.9)
    assert (found["other"].p50_s, found["other"].p90_s) == (1000.0, 2000.0)


def test_a_group_without_a_timed_decision_has_no_percentiles(engine: Engine) -> None:
    """Decisions that carry no delay are counted, and give no p50 or p90."""
    ledger.write(engine, run("untimed", [("team", None), ("team", None)]))
    [line] = ledger.reviews(engine, now=NOW).by_group
    assert (line.name, line.decisions, line.p50_s, line.p90_s) == ("team", 2, None, None)
