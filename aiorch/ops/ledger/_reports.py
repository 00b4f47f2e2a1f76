"""The reports users want without writing SQL, over a window of time.

- ``cost``: model calls by tenant, pipeline, model and lane: calls, runs, tokens and dollars
  (calls scheduled in the window).
- ``reviews`` (decisions taken in the window): time from a review's start to its decision, p50
  and p90 (nearest rank) per group and per reviewer; the share of decisions an auto-approve rule
  took and the share that corrected the result (a reedit, or an approval with corrected
  fields); the model's dollars per approved item (the whole cost of each run chain approved in
  the window, over the number of those chains); and the runs waiting for a reviewer now, by how
  long they have waited (each bucket counts every run past it: over 1 h includes over 1 d).

Each figure is one statement of `aiorch.ops.ledger._figures`, which the compose stack's Grafana
dashboard renders too; this module runs them and shapes the answers.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel
from sqlalchemy import ColumnElement, Connection, DateTime, Engine, and_, literal

from aiorch.ops.ledger import _figures as figures
from aiorch.ops.ledger._entries import utc


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


def window(since: datetime | None, until: datetime | None, now: datetime) -> figures.Scope:
    """Every run, in the window from ``since`` (included) to ``until`` (excluded), either open;
    pending runs aged at ``now``."""

    def within(column: figures.Column) -> ColumnElement[bool]:
        clauses = []
        if since is not None:
            clauses.append(column >= utc(since))
        if until is not None:
            clauses.append(column < utc(until))
        return and_(True, *clauses)

    def ago(age: timedelta) -> figures.Column:
        return literal(utc(now) - age, DateTime())

    return figures.Scope(window=within, ago=ago)


def cost(
    engine: Engine,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[CostLine]:
    """The cost report, the most expensive line first."""
    scope = window(since, until, now=datetime.now(UTC))
    with engine.connect() as connection:
        found = connection.execute(figures.cost_lines(scope)).mappings().all()
    return [CostLine.model_validate(dict(line)) for line in found]


def _delays(
    connection: Connection, scope: figures.Scope, by: Literal["group", "reviewer"]
) -> list[Delays]:
    found = connection.execute(figures.delays(scope, by)).mappings().all()
    # By code point, as before: a PostgreSQL collation may order the names otherwise.
    return sorted((Delays.model_validate(dict(line)) for line in found), key=lambda d: d.name)


def reviews(
    engine: Engine,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    now: datetime,
) -> ReviewsReport:
    """The reviews report (see the module doc); pending runs are aged at ``now``."""
    scope = window(since, until, now)
    with engine.connect() as connection:
        rates = connection.execute(figures.decision_rates(scope)).mappings().one()
        approved = connection.execute(figures.approved_items(scope)).mappings().one()
        waiting = connection.execute(figures.pending(scope)).mappings().one()
        by_group = _delays(connection, scope, "group")
        by_reviewer = _delays(connection, scope, "reviewer")
    return ReviewsReport(
        decisions=rates["decisions"],
        auto_approved=rates["auto_approved"],
        corrected=rates["corrected"],
        auto_approval_rate=rates["auto_approval_rate"],
        correction_rate=rates["correction_rate"],
        approved_items=approved["approved_items"],
        cost_per_approved_usd=approved["cost_per_approved_usd"],
        by_group=by_group,
        by_reviewer=by_reviewer,
        pending=dict(waiting),
    )
