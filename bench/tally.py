"""What the bench's phases run with (`Bench`) and what they add up to (`Tally`).

``bench.run`` parses the command line into `Options`, builds one `Bench` and one `Tally`, and
hands both to every phase of ``bench.phase_table.PHASES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table
from temporalio.client import Client

from aiorch_runtime.config import Settings
from bench.load import BatchFigures
from bench.report import Check
from bench.stack import BenchStack
from bench.stats import Figure

Log = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """What to run; ``--quick`` shrinks everything for the end-to-end test."""

    ns: tuple[int, ...]
    reps: int
    parked: int
    sqlite_n: int
    fault_n: int
    unloaded_runs: int
    peer_n: int
    approve_concurrency: int
    actions_k: int
    price_per_million_actions: float
    timeout_s: float
    ledger_n: int
    ledger_stream_s: float
    fairshare_a: int
    fairshare_b: int
    spillover_a: int
    spillover_b: int
    canary_n: int
    out_dir: Path
    data_dir: Path | None
    skip: frozenset[str]


@dataclass(frozen=True)
class Bench:
    """What every phase runs with: the options, the worker's settings, the dev server's client
    and the stack around it (closed by the time the phases off the stack run)."""

    options: Options
    settings: Settings
    client: Client
    stack: BenchStack
    data_dir: Path
    log: Log


@dataclass
class Tally:
    """What the phases add up to: the report's JSON, the runs lost and failed, and the rows,
    checks and tables the bench prints at the end."""

    report: dict[str, Any]
    lost: int = 0
    failed: int = 0
    unloaded: dict[str, Figure] | None = None
    loads: dict[int, dict[str, dict[str, Figure]]] = field(default_factory=dict)
    extra: list[tuple[str, str, str, str]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    cost_checks: list[Check] = field(default_factory=list)
    cost_tables: list[Table] = field(default_factory=list)
    profile_tables: list[Table] = field(default_factory=list)

    def count_batches(self, batches: dict[str, list[BatchFigures]]) -> None:
        """Add the runs lost and failed in these batches."""
        runs = [b for group in batches.values() for b in group]
        self.lost += sum(b.lost for b in runs)
        self.failed += sum(b.failed for b in runs)
