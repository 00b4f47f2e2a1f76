"""The demo's table of its runs, for a person at a terminal of 80 columns: wrapped where it
must be, never cut (`up`'s banner: tests/e2e/test_localstack.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from aiorch.devstack.demo import closing_lines, render, scenarios
from aiorch.devstack.notices import exited
from aiorch.devstack.stack import StackAddresses
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


def test_the_demo_gives_links_only_while_its_stack_stays_up(tmp_path: Path) -> None:
    """At its end the demo points at the Web UI and the shell's exports only while the stack
    stays up; when it stops (stdin not a terminal, --exit), it says that it stopped, why, and
    that `make dev` keeps one up, and gives no link that would lead nowhere."""
    addresses = StackAddresses(
        temporal_address="127.0.0.1:7233",
        sqs_endpoint_url="http://127.0.0.1:9324",
        openai_base_url="http://127.0.0.1:8000/v1",
        vector_store_path=tmp_path / "vectors",
        document_store_url=f"sqlite:///{tmp_path / 'documents.db'}",
        input_dir=tmp_path / "inputs",
        review_public_keys="",
        reviewer_key_file=tmp_path / "reviewer-key",
        ui_url="http://127.0.0.1:8233",
    )
    staying = "\n".join(closing_lines(addresses, stopping=None))
    assert "Web UI:  http://127.0.0.1:8233/namespaces/default/workflows" in staying
    assert "export TEMPORAL_ADDRESS=127.0.0.1:7233" in staying

    for why in ("stdin is not a terminal", "--exit"):
        stopped = "\n".join(closing_lines(addresses, stopping=why))
        assert f"Stack stopped ({why}); `make dev` keeps one up." in stopped
        assert "http://" not in stopped and "export" not in stopped
        assert "documents.db" in stopped


def test_a_worker_that_exits_is_reported_with_how_to_start_one() -> None:
    """When the stack's worker exits (a kill -9), its line says the code, the log, and how to
    start a worker again; another part's line gives its code and log only."""
    worker = exited("worker", -9, Path(".data/logs/worker.log"))
    assert "worker exited (code -9)" in worker and ".data/logs/worker.log" in worker
    assert "start one with `python worker.py`" in worker
    sqs = exited("sqs", 1, Path(".data/logs/sqs.log"))
    assert "sqs exited (code 1)" in sqs and "python" not in sqs
