"""The reports users want without writing SQL, over a window of time.

- ``cost``: model calls by tenant, pipeline, model and lane: calls, runs, tokens and dollars
  (calls scheduled in the window).
- ``reviews`` (decisions taken in the window): time from a review's start to its decision, p50
  and p90 (nearest rank) per group and per reviewer; the share of decisions an auto-approve rule
  took and the share that corrected the result (a reedit, or an approval with corrected
  fields); the model's dollars per approved item (the whole cost of each run chain approved in
  the window, over the number of those chains); and the runs waiting for a reviewer now, by how
  long they have waited (each bucket counts every run past it: over 1 h includes over 1 d).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from pydantic import BaseModel
from sqlalchemy import Engine, and_, func, select

from aiorch.ops.ledger import _schema as schema
from aiorch.ops.ledger._entries import utc

AGE_BUCKETS: Final = (
    ("over_1h", timedelta(hours=1)),
    ("over_1d", timedelta(days=1)),
    ("over_7d", timedelta(days=7)),
)
CORRECTING: Final = frozenset({"reedit", "correct"})
APPROVING: Final = frozenset({"approve", "correct"})


class CostLine(BaseModel):
    """Model calls of one tenant, pipeline, model and lane."""

    tenant: str
    pipeline: str
    model: str
    lane: str
    runs: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float


class Delays(BaseModel):
    """Decisions of one group or reviewer and the time they took (seconds)."""

    name: str
    decisions: int
    p50_s: float | None
    p90_s: float | None


class ReviewsReport(BaseModel):
    """The reviews report (see the module doc)."""

    decisions: int
    auto_approved: int
    corrected: int
    auto_approval_rate: float | None
    correction_rate: float | None
    approved_items: int
    cost_per_approved_usd: float | None
    by_group: list[Delays]
    by_reviewer: list[Delays]
    pending: dict[str, int]


def _window(column: Any, since: datetime | None, until: datetime | None) -> Any:
    clauses = []
    if since is not None:
        clauses.append(column >= utc(since))
    if until is not None:
        clauses.append(column < utc(until))
    return and_(True, *clauses)


def cost(
    engine: Engine, since: datetime | None = None, until: datetime | None = None
) -> list[CostLine]:
    """The cost report, the most expensive line first."""
    calls, runs = schema.model_calls, schema.runs
    query = (
        select(
            runs.c.tenant,
            runs.c.pipeline,
            calls.c.model,
            calls.c.lane,
            func.count(func.distinct(calls.c.run_id)),
            func.count(),
            func.sum(calls.c.prompt_tokens),
            func.sum(calls.c.completion_tokens),
            func.sum(calls.c.cached_tokens),
            func.sum(calls.c.cost_usd),
        )
        .join(runs, runs.c.run_id == calls.c.run_id)
        .where(_window(calls.c.scheduled_at, since, until))
        .group_by(runs.c.tenant, runs.c.pipeline, calls.c.model, calls.c.lane)
    )
    with engine.connect() as connection:
        found = connection.execute(query).all()
    lines = [
        CostLine(
            tenant=tenant,
            pipeline=pipeline,
            model=model,
            lane=lane,
            runs=runs_count,
            calls=count,
            prompt_tokens=prompt or 0,
            completion_tokens=completion or 0,
            cached_tokens=cached or 0,
            cost_usd=spent or 0.0,
        )
        for (
            tenant,
            pipeline,
            model,
            lane,
            runs_count,
            count,
            prompt,
            completion,
            cached,
            spent,
        ) in (found)
    ]
    return sorted(lines, key=lambda line: (-line.cost_usd, line.tenant, line.pipeline, line.model))


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (``share`` in (0, 1]) of ``values``; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _delays(named: dict[str, list[float]], counts: dict[str, int]) -> list[Delays]:
    return [
        Delays(
            name=name,
            decisions=counts[name],
            p50_s=percentile(named[name], 0.5),
            p90_s=percentile(named[name], 0.9),
        )
        for name in sorted(counts)
    ]


def reviews(
    engine: Engine,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    now: datetime,
) -> ReviewsReport:
    """The reviews report (see the module doc); pending runs are aged at ``now``."""
    table, runs = schema.review_decisions, schema.runs
    decided = (
        select(
            table.c.chain_id,
            table.c.decision,
            table.c.reviewer,
            table.c.review_group,
            table.c.rule,
            table.c.delay_s,
        )
        .where(table.c.kind == "decision")
        .where(_window(table.c.decided_at, since, until))
    )
    waiting = select(runs.c.state_since, runs.c.started_at).where(
        runs.c.status == "running", runs.c.awaiting_review.is_(True)
    )
    with engine.connect() as connection:
        decisions = connection.execute(decided).all()
        approved = {chain for chain, decision, *_ in decisions if decision in APPROVING}
        spent = 0.0
        if approved:
            spent = (
                connection.execute(
                    select(func.sum(runs.c.cost_usd)).where(runs.c.chain_id.in_(sorted(approved)))
                ).scalar()
                or 0.0
            )
        pending = connection.execute(waiting).all()
    by_group: dict[str, list[float]] = defaultdict(list)
    by_reviewer: dict[str, list[float]] = defaultdict(list)
    group_counts: dict[str, int] = defaultdict(int)
    reviewer_counts: dict[str, int] = defaultdict(int)
    for _chain, _decision, reviewer, group, rule, delay in decisions:
        group_name = group or "(none)"
        reviewer_name = reviewer or (f"rule:{rule}" if rule else "(none)")
        group_counts[group_name] += 1
        reviewer_counts[reviewer_name] += 1
        if delay is not None:
            by_group[group_name].append(delay)
            by_reviewer[reviewer_name].append(delay)
    total = len(decisions)
    auto = sum(1 for row in decisions if row.rule is not None)
    corrected = sum(1 for row in decisions if row.decision in CORRECTING)
    ages = [utc(now) - (since_at or started) for since_at, started in pending]
    return ReviewsReport(
        decisions=total,
        auto_approved=auto,
        corrected=corrected,
        auto_approval_rate=auto / total if total else None,
        correction_rate=corrected / total if total else None,
        approved_items=len(approved),
        cost_per_approved_usd=spent / len(approved) if approved else None,
        by_group=_delays(by_group, group_counts),
        by_reviewer=_delays(by_reviewer, reviewer_counts),
        pending={
            "total": len(ages),
            **{name: sum(age > bound for age in ages) for name, bound in AGE_BUCKETS},
        },
    )
