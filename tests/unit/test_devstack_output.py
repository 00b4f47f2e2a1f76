"""The demo's table of its runs, for a person at a terminal of 80 columns: wrapped where it
must be, never cut (`up`'s banner: tests/e2e/test_localstack.py)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from aiorch.devstack.demo import render, scenarios
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
