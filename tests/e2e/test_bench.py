"""The benchmark end to end at a tiny N: ``python -m bench.run --quick`` in a subprocess.

Not a timed test: it checks that one bench run starts its own servers, runs every phase and
writes every figure, and that no run was lost or failed. The figures themselves are not judged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURE_KEYS = {
    "runs_per_s",
    "p50_s",
    "p95_s",
    "server_cpu_ms_per_run",
    "worker_cpu_ms_per_run",
    "history_events",
}
RANGE_KEYS = {"median", "min", "max", "values"}

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """One quick bench run (N=10, one repetition, 20 parked runs) and its printed output."""
    out = tmp_path_factory.mktemp("bench-results")
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [path] = out.glob("*.json")
    return json.loads(path.read_text()), done.stdout


def assert_range(figure: dict[str, Any]) -> None:
    assert figure.keys() >= RANGE_KEYS, figure
    assert figure["min"] <= figure["median"] <= figure["max"]


@pytest.mark.timeout(120)
def test_quick_bench_reports_every_figure(quick_report: tuple[dict[str, Any], str]) -> None:
    """Every figure the issue asks for is in the JSON, each with its median, min and max."""
    report, _ = quick_report
    assert_range(report["unloaded_ms"]["baseline"])
    assert_range(report["unloaded_ms"]["ours"])
    assert_range(report["unloaded_ms"]["ratio"])
    figures = report["load"]["10"]["figures"]
    assert set(figures) == FIGURE_KEYS
    for row in figures.values():
        for side in ("baseline", "ours", "ratio"):
            assert_range(row[side])
    for workload in ("baseline", "ours"):
        sqlite = report["sqlite"][workload]["runs_per_s"]
        for side in ("wal", "default", "wal_over_default"):
            assert_range(sqlite[side])
    parked = report["parked"]
    for key in ("worker_peak_rss_mib_waiting", "approvals_per_s", "completions_per_s"):
        assert parked[key] > 0
    assert report["fault"]["n"] == 10
    assert "runs_per_s" in report["peer_langgraph"] or "skipped" in report["peer_langgraph"]
    machine = report["machine"]
    assert machine["cores"] >= 1 and len(machine["load_average"]) == 3
    assert machine["versions"]["temporalio"]


def test_quick_bench_loses_no_run(quick_report: tuple[dict[str, Any], str]) -> None:
    """No run of any phase (load, SQLite, parked, fault) was lost or failed."""
    report, _ = quick_report
    assert report["lost"] == 0 and report["failed"] == 0
    for batches in report["load"]["10"]["batches"].values():
        assert all(b["lost"] == 0 and b["failed"] == 0 for b in batches)
    assert report["parked"]["approved"] == report["parked"]["n"] == 20
    assert report["parked"]["lost"] == report["parked"]["failed"] == 0
    assert report["fault"]["lost"] == report["fault"]["failed"] == 0


def test_quick_bench_prints_table_and_checks(quick_report: tuple[dict[str, Any], str]) -> None:
    """The printed report has the comparison table and the acceptance checks."""
    _, printed = quick_report
    assert "ours/baseline" in printed
    assert "acceptance (issue 7)" in printed
    assert "runs lost or failed, all phases" in printed
