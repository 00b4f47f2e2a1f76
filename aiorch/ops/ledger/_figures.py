"""The reports' figures, each one SQL statement over the ledger's tables, for a `Scope`.

`aiorch ledger report` runs them with a window of bound moments; the compose stack's Grafana
dashboard renders the same statements with its time-range macro and its tenant and pipeline
variables in their place (`aiorch.devstack.ledger_dashboard`), so both count by one rule.
Every statement is portable between SQLite and PostgreSQL (window functions, no percentile
aggregate): the p50 and p90 are nearest-rank percentiles, the value at rank ceil(p * n) among a
name's n timed decisions, with the ceiling taken in integer arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Literal

from sqlalchemy import (
    ColumnElement,
    Float,
    Select,
    and_,
    case,
    cast,
    desc,
    func,
    literal,
    select,
    true,
)

from aiorch.ops.ledger import _schema as schema

AGE_BUCKETS: Final = (
    ("over_1h", timedelta(hours=1)),
    ("over_1d", timedelta(days=1)),
    ("over_7d", timedelta(days=7)),
)
"""How long pending runs have waited: each bucket counts every run past it."""
CORRECTING: Final = ("correct", "reedit")
APPROVING: Final = ("approve", "correct")
PERCENTILES: Final = (("p50_s", 50), ("p90_s", 90))

Column = ColumnElement[Any]


@dataclass(frozen=True)
class Scope:
    """Which rows a figure counts.

    Attributes:
        window: the condition that a time column lies in the window.
        ago: the moment a duration before now (pending runs are aged at it).
        runs: a condition on the ``runs`` table (every run, unless a caller narrows it).
    """

    window: Callable[[Column], ColumnElement[bool]]
    ago: Callable[[timedelta], Column]
    runs: ColumnElement[bool] = field(default_factory=true)


def cost_lines(scope: Scope) -> Select[Any]:
    """Model calls scheduled in the window by tenant, pipeline, model and lane: runs, calls,
    tokens and dollars, the most expensive first."""
    calls, runs = schema.model_calls, schema.runs
    spent = func.coalesce(func.sum(calls.c.cost_usd), 0.0)
    return (
        select(
            runs.c.tenant,
            runs.c.pipeline,
            calls.c.model,
            calls.c.lane,
            func.count(func.distinct(calls.c.run_id)).label("runs"),
            func.count().label("calls"),
            func.coalesce(func.sum(calls.c.prompt_tokens), 0).label("prompt_tokens"),
            func.coalesce(func.sum(calls.c.completion_tokens), 0).label("completion_tokens"),
            func.coalesce(func.sum(calls.c.cached_tokens), 0).label("cached_tokens"),
            spent.label("cost_usd"),
        )
        .join(runs, runs.c.run_id == calls.c.run_id)
        .where(scope.window(calls.c.scheduled_at), scope.runs)
        .group_by(runs.c.tenant, runs.c.pipeline, calls.c.model, calls.c.lane)
        .order_by(desc(spent), runs.c.tenant, runs.c.pipeline, calls.c.model, calls.c.lane)
    )


def _decided(scope: Scope, *columns: Column) -> Select[Any]:
    """``columns`` of the review decisions (not votes) taken in the window, of runs in scope."""
    decisions, runs = schema.review_decisions, schema.runs
    return (
        select(*columns)
        .select_from(decisions.join(runs, runs.c.run_id == decisions.c.run_id))
        .where(
            decisions.c.kind == "decision",
            scope.window(decisions.c.decided_at),
            scope.runs,
        )
    )


def decider_name(by: Literal["group", "reviewer"]) -> Column:
    """Whom a decision is counted for: its group, or its reviewer (``rule:NAME`` when an
    auto-approve rule decided); ``(none)`` when it names none."""
    decisions = schema.review_decisions
    if by == "group":
        return func.coalesce(decisions.c.review_group, "(none)")
    return func.coalesce(decisions.c.reviewer, literal("rule:") + decisions.c.rule, "(none)")


def delays(scope: Scope, by: Literal["group", "reviewer"]) -> Select[Any]:
    """Per group or reviewer: its decisions and the p50 and p90 of the time from a review's
    start to its decision (seconds; decisions without that time count, but not in these)."""
    decided = _decided(
        scope,
        decider_name(by).label("name"),
        schema.review_decisions.c.delay_s,
    ).subquery("decided")
    ranked = select(
        decided.c.name,
        decided.c.delay_s,
        func.row_number()
        .over(partition_by=decided.c.name, order_by=decided.c.delay_s.nulls_last())
        .label("position"),
        func.count(decided.c.delay_s).over(partition_by=decided.c.name).label("timed"),
    ).subquery("ranked")

    def nearest_rank(percent: int) -> Column:
        rank = (ranked.c.timed * percent + 99) // 100
        timed = and_(ranked.c.delay_s.is_not(None), ranked.c.position >= rank)
        return func.min(case((timed, ranked.c.delay_s)))

    return (
        select(
            ranked.c.name,
            func.count().label("decisions"),
            *(nearest_rank(percent).label(name) for name, percent in PERCENTILES),
        )
        .group_by(ranked.c.name)
        .order_by(ranked.c.name)
    )


def _share(part: Column, whole: Column) -> Column:
    """``part / whole`` in floating point (integer division would truncate), NULL for a whole
    of 0; a plain ``/``, which SQLAlchemy's division would wrap in casts."""
    return cast(part, Float).op("/", return_type=Float)(func.nullif(whole, 0))


def decision_rates(scope: Scope) -> Select[Any]:
    """The decisions taken in the window, those an auto-approve rule took and those that
    corrected the result (a reedit, or an approval with corrected fields), and their shares."""
    decisions = schema.review_decisions
    total = func.count()
    auto = func.count(decisions.c.rule)
    corrected = func.coalesce(func.sum(case((decisions.c.decision.in_(CORRECTING), 1), else_=0)), 0)
    return _decided(
        scope,
        total.label("decisions"),
        auto.label("auto_approved"),
        corrected.label("corrected"),
        _share(auto, total).label("auto_approval_rate"),
        _share(corrected, total).label("correction_rate"),
    )


def approved_items(scope: Scope) -> Select[Any]:
    """The run chains approved in the window and the model's dollars per one: the whole cost of
    those chains (every run of each), over their number."""
    decisions, runs = schema.review_decisions, schema.runs
    approved = (
        _decided(scope, decisions.c.chain_id)
        .where(decisions.c.decision.in_(APPROVING))
        .distinct()
        .subquery("approved")
    )
    chains = (
        select(approved.c.chain_id, func.sum(runs.c.cost_usd).label("cost_usd"))
        .select_from(approved.join(runs, runs.c.chain_id == approved.c.chain_id))
        .group_by(approved.c.chain_id)
        .subquery("chains")
    )
    spent = func.sum(chains.c.cost_usd)
    columns: list[Column] = [
        func.count().label("approved_items"),
        spent.label("approved_cost_usd"),
        _share(spent, func.count()).label("cost_per_approved_usd"),
    ]
    return select(*columns).select_from(chains)


def pending(scope: Scope) -> Select[Any]:
    """The runs waiting for a reviewer now, and how many have waited past each age bucket."""
    runs = schema.runs
    waiting_since = func.coalesce(runs.c.state_since, runs.c.started_at)
    return select(
        func.count().label("total"),
        *(
            func.coalesce(func.sum(case((waiting_since < scope.ago(age), 1), else_=0)), 0).label(
                name
            )
            for name, age in AGE_BUCKETS
        ),
    ).where(runs.c.status == "running", runs.c.awaiting_review.is_(True), scope.runs)
