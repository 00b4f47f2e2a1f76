"""What the canary phase reads once a repetition's runs ended: the ledger's halt, judgements
and runs of the experiment, the worker's ``aiorch_experiment_halted`` gauge, and what
``aiorch experiments status`` shows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, case, func, select

from aiorch.ops import ledger
from bench.stack import PROJECT_ROOT

_GAUGE = re.compile(r"^aiorch_experiment_halted\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$", re.M)


@dataclass(frozen=True)
class HaltRow:
    """The ledger's row of a variant's halt."""

    halted_at: datetime
    halted_by: str
    reason: str


def halt_row(engine: Engine, experiment: str, variant: str) -> HaltRow | None:
    """The variant's first halt in the ledger's ``experiment_halts``, if it was halted."""
    halts = ledger.experiment_halts
    query = (
        select(halts.c.halted_at, halts.c.halted_by, halts.c.reason)
        .where(halts.c.experiment == experiment, halts.c.variant == variant)
        .order_by(halts.c.halted_at)
        .limit(1)
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
    return None if row is None else HaltRow(*row)


def ended_runs(engine: Engine, workflow_ids: set[str]) -> int:
    """How many of ``workflow_ids`` the ledger holds as ended."""
    runs = ledger.runs
    with engine.connect() as connection:
        ended = connection.execute(
            select(runs.c.workflow_id).where(runs.c.status != "running")
        ).scalars()
        return len(workflow_ids.intersection(ended))


def judged_by(engine: Engine, experiment: str, variant: str, until: datetime) -> tuple[int, int]:
    """The variant's judgements written by ``until``: (judged, failed)."""
    judged = ledger.judgements
    failed = func.sum(case((judged.c.passed.is_(False), 1), else_=0))
    query = select(func.count(), failed).where(
        judged.c.experiment == experiment, judged.c.variant == variant, judged.c.at <= until
    )
    with engine.connect() as connection:
        count, failures = connection.execute(query).one()
    return int(count), int(failures or 0)


def runs_by_variant(
    engine: Engine, experiment: str, *, after: datetime | None = None
) -> dict[str, int]:
    """The experiment's runs per variant (started after ``after``, when given)."""
    runs = ledger.runs
    query = (
        select(runs.c.variant, func.count())
        .where(runs.c.experiment == experiment)
        .group_by(runs.c.variant)
    )
    if after is not None:
        query = query.where(runs.c.started_at > after)
    with engine.connect() as connection:
        return {variant: n for variant, n in connection.execute(query)}


def halted_gauge(metrics_url: str, experiment: str) -> dict[str, float]:
    """The worker's ``aiorch_experiment_halted`` per variant of ``experiment``."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for match in _GAUGE.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("experiment") == experiment:
            found[labels.get("variant", "")] = float(match["value"])
    return found


def experiments_status(env: dict[str, str], experiment: str) -> list[dict[str, Any]]:
    """``starter.py experiments status ID --json``, as an operator runs it."""
    done = subprocess.run(
        [sys.executable, "starter.py", "experiments", "status", experiment, "--json"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = json.loads(done.stdout)
    return rows if isinstance(rows, list) else []
