"""The demo's table of its runs, for a person at a terminal of 80 columns: wrapped where it
must be, never cut (`up`'s banner: tests/e2e/test_devstack.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from aiorch.devstack.demo import render, scenarios
from aiorch.devstack.notices import exited
from workflows.payloads import RunStatus

STATES = ("generate_embedding", "await_review", "dead_letter", "completed")


def console(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, record=True)


@pytest.mark.parametrize("width", [80, 120])
def test_the_demo_table_shows_every_state_and_model_whole(width: int) -> None:
    """The demo's live table of its runs shows every scenario's state and model whole at 80
    columns as at 120 (no ellipsis)."""
    runs = scenarios()
    for number, run in enumerate(runs):
        run.workflow_id = f"{number:024x}"
        run.status = RunStatus(
            state=STATES[number % 4], status="Processing", progress=60, model="sim-large"
        )
    shown = console(width)
    shown.print(render(runs, 12.3, shown))
    text = shown.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    for state in STATES:
        assert state in text.split()
    assert text.count("sim-large") == len(runs)


def test_a_worker_that_exits_is_reported_with_how_to_start_one() -> None:
    """When the stack's worker exits (a kill -9), its line says the code, the log, and how to
    start a worker again; another part's line gives its code and log only."""
    worker = exited("worker", -9, Path(".data/logs/worker.log"))
    assert "worker exited (code -9)" in worker and ".data/logs/worker.log" in worker
    assert "start one with `python worker.py`" in worker
    sqs = exited("sqs", 1, Path(".data/logs/sqs.log"))
    assert "sqs exited (code 1)" in sqs and "python" not in sqs
