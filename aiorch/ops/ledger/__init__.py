"""The run ledger: SQL tables of runs, transitions, model calls, review decisions and
corrections, projected from the runs' event histories (docs/ledger.md).

`open_ledger` opens (and migrates) the database at ``LEDGER_URL``; `sync` fills it once and
`follow` keeps filling it; `read_only` runs a user's SQL unable to change it; `cost` and
`reviews` are the reports, whose figures (`cost_lines`, `delays`, `decision_rates`,
`approved_items`, `pending`) are SQL statements over a `Scope` that a dashboard renders too.
The tables are named for the readers that query them (`aiorch.ops.experiments`).
"""

from __future__ import annotations

from sqlalchemy import Engine

from aiorch.ops.ledger._figures import (
    Scope,
    approved_items,
    cost_lines,
    decision_rates,
    delays,
    pending,
)
from aiorch.ops.ledger._projection import Projection, project
from aiorch.ops.ledger._queries import Answer, NotReadOnly, QueryFailed, read_only, rows_as_dicts
from aiorch.ops.ledger._reports import CostLine, Delays, ReviewsReport, cost, reviews
from aiorch.ops.ledger._schema import (
    PROJECTED,
    contents,
    corrections,
    engine_for,
    experiment_halts,
    judgements,
    migrate,
    model_calls,
    review_decisions,
    runs,
)
from aiorch.ops.ledger._sync import (
    FOLLOW_READY_LINE,
    SyncReport,
    follow,
    sync,
    watermark,
    write,
)

__all__ = [
    "FOLLOW_READY_LINE",
    "PROJECTED",
    "Answer",
    "CostLine",
    "Delays",
    "NotReadOnly",
    "Projection",
    "QueryFailed",
    "ReviewsReport",
    "Scope",
    "SyncReport",
    "approved_items",
    "contents",
    "corrections",
    "cost",
    "cost_lines",
    "decision_rates",
    "delays",
    "engine_for",
    "experiment_halts",
    "follow",
    "judgements",
    "model_calls",
    "open_ledger",
    "pending",
    "project",
    "read_only",
    "review_decisions",
    "reviews",
    "rows_as_dicts",
    "runs",
    "sync",
    "watermark",
    "write",
]


def open_ledger(url: str) -> Engine:
    """An engine for the ledger at ``url``, its tables brought to the current version."""
    engine = engine_for(url)
    migrate(engine)
    return engine
