"""``aiorch lab run`` end to end, as a user runs it from a shell: recorded document runs (their
documents by ``file://`` reference) are synced into the ledger, selected from it by SQL and
forked from ``analyze`` onto a candidate prompt that adds a due date. Exactly one provider call
per fork and none before the fork state, no row stored, the originals' histories byte for byte
as they were, a report whose per-field diffs are exactly what the candidate answered, and an
exit status that follows ``--fail-if``.

``LAB_E2E_RUNS`` sets how many runs are recorded and forked (4 by default; docs/lab.md has the
figures of a run with 50).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops import pipelines
from aiorch.ops.visibility import start_run
from tests.support.builders import new_request_id
from tests.support.invoices import invoice_fields, invoice_lines
from tests.support.live_stack import E2E_WORKER_ENV, run_script, stack_with_worker
from tests.support.simulator import Simulator
from workflows import contract
from workflows.documents.payloads import DocumentRequest
from workflows.steps.contract import ACTIVITY_EXTRACT_TEXT

pytestmark = pytest.mark.e2e

RUNS = int(os.environ.get("LAB_E2E_RUNS", "4"))
DUE = "2026-12-31"
# What the candidate asks: the document's own prompt, with a due date the model is to use.
CANDIDATE_PROMPT = f"Due date: {DUE}\n\nExtract the fields from the document above."
SELECT = "SELECT run_id FROM runs WHERE pipeline = 'documents' AND status = 'completed'"
EXIT_CHECK_FAILED = 4


@dataclass
class Recorded:
    client: Client
    stack: LocalStack
    ledger_url: str
    fields: dict[str, dict[str, Any]]
    """What each recorded run's invoice says, by its workflow id."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Valid documents are stored unreviewed, into a SQLite file."""
    store = tmp_path_factory.mktemp("store") / "documents.sqlite"
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"),
        {
            **E2E_WORKER_ENV,
            "DOCUMENT_REVIEW_MIN": "auto",
            "DOCUMENT_STORE_URL": f"sqlite:///{store}",
        },
    )


def shell(stack: LocalStack, ledger_url: str) -> dict[str, str]:
    return {**os.environ, **stack.addresses.env(), "LEDGER_URL": ledger_url, "COLUMNS": "200"}


def stored(stack: LocalStack) -> list[str]:
    """The request ids of every row in the document store."""
    engine = create_engine(stack.worker_env["DOCUMENT_STORE_URL"])
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT request_id FROM documents"))
            return sorted(row[0] for row in rows)
    finally:
        engine.dispose()


async def wait_closed(client: Client, workflow_ids: list[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    for workflow_id in workflow_ids:
        handle = client.get_workflow_handle(workflow_id)
        while (await handle.describe()).close_time is None:
            assert time.monotonic() < deadline, f"{workflow_id} did not close"
            await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
async def recorded(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """RUNS invoices, each by reference from the stack's input folder, completed and synced
    into a fresh ledger."""
    client = await Client.connect(stack.addresses.temporal_address)
    fields: dict[str, dict[str, Any]] = {}
    for n in range(RUNS):
        invoice = invoice_fields(900 + n)
        request_id = new_request_id()
        path = stack.addresses.input_dir / f"{request_id}.txt"
        path.write_text("\n".join(invoice_lines(invoice)), encoding="utf-8")
        request = DocumentRequest(request_id=request_id, document=path.as_uri())
        workflow_id = await start_run(
            client,
            request,
            task_queue=contract.DEFAULT_TASK_QUEUE,
            pipeline=pipelines.named("documents"),
        )
        fields[workflow_id] = invoice
    await wait_closed(client, list(fields))
    ledger_url = f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.db'}"
    deadline = time.monotonic() + 30
    while True:
        synced = run_script("starter.py", "ledger", "sync", env=shell(stack, ledger_url))
        assert synced.returncode == 0, synced.stderr
        listed = run_script(
            "starter.py", "ledger", "sql", "--json", SELECT, env=shell(stack, ledger_url)
        )
        # Visibility lists a close a moment after it.
        if len(json.loads(listed.stdout)) == RUNS:
            break
        assert time.monotonic() < deadline, listed.stdout
        await asyncio.sleep(1)
    return Recorded(client=client, stack=stack, ledger_url=ledger_url, fields=fields)


async def history_bytes(client: Client, workflow_id: str) -> bytes:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return b"".join(event.SerializeToString(deterministic=True) for event in history.events)


async def scheduled_activities(client: Client, workflow_id: str) -> list[str]:
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def lab(recorded: Recorded, out: Path, *options: str) -> tuple[int, str, str]:
    done = run_script(
        "starter.py",
        "lab",
        "run",
        "--select",
        SELECT,
        "--from",
        "analyze",
        "--out",
        str(out),
        *options,
        env=shell(recorded.stack, recorded.ledger_url),
        timeout=120 + 10 * RUNS,
    )
    return done.returncode, done.stdout, done.stderr


def expected_changes(invoice: dict[str, Any]) -> list[dict[str, Any]]:
    """What the candidate changes in this invoice's fields: its due date, when it had another."""
    if invoice["due_date"] == DUE:
        return []
    # A null field is a leaf like any other: the date is changed from none, not added.
    return [{"path": "due_date", "change": "changed", "before": invoice["due_date"], "after": DUE}]


async def test_a_lab_run_forks_each_selected_run_and_gates_on_its_report(
    recorded: Recorded, tmp_path: Path
) -> None:
    """``lab run`` over the ledger's completed document runs, from analyze, onto a prompt that
    gives a due date: every selected run is forked twice, each fork calls the provider once
    (with the run's model) and extracts nothing; no row is stored; the originals' histories
    are unchanged; the report's per-field diffs are the due date alone for the candidate and
    nothing for the baseline; a ``--fail-if`` over the changed rate holds (exit 4, the report
    written first), and one that does not hold exits 0."""
    client, stack = recorded.client, recorded.stack
    simulator = Simulator(stack.addresses.openai_base_url)
    histories = {w: await history_bytes(client, w) for w in recorded.fields}
    rows = stored(stack)
    chats_before = len([r for r in simulator.requests() if r["path"] == "chat"])
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(CANDIDATE_PROMPT, encoding="utf-8")

    code, stdout, stderr = lab(
        recorded,
        tmp_path / "held",
        "--prompt-file",
        str(prompt),
        "--name",
        "due-date",
        "--fail-if",
        "changed_rate > baseline + 0.5",
    )
    assert code == EXIT_CHECK_FAILED, stderr
    assert "error: --fail-if held: changed_rate > baseline + 0.5" in stderr
    assert "HELD: changed_rate > baseline + 0.5" in stdout
    report = json.loads((tmp_path / "held" / "report.json").read_text(encoding="utf-8"))
    assert (tmp_path / "held" / "report.md").is_file()
    assert (tmp_path / "held" / "report.html").is_file()
    assert report["skipped"] == {}
    assert {run["workflow_id"] for run in report["runs"]} == set(recorded.fields)
    for run in report["runs"]:
        invoice = recorded.fields[run["workflow_id"]]
        original, baseline, candidate = (
            run[k]["outcome"] for k in ("original", "baseline", "candidate")
        )
        assert original["fields"] == invoice
        assert baseline["fields"] == invoice
        assert candidate["fields"] == {**invoice, "due_date": DUE}
        assert run["vs_original"]["fields"] == expected_changes(invoice)
        assert run["vs_baseline"]["fields"] == expected_changes(invoice)
        for fork in (baseline, candidate):
            assert fork["use"]["calls"] == 1, fork
            chats = simulator.chat_requests(fork["workflow_id"])
            assert [chat["model"] for chat in chats] == [original["model"]]
            activities = await scheduled_activities(client, fork["workflow_id"])
            assert ACTIVITY_EXTRACT_TEXT not in activities
    chats_after = len([r for r in simulator.requests() if r["path"] == "chat"])
    assert chats_after - chats_before == 2 * RUNS
    assert stored(stack) == rows
    for workflow_id, history in histories.items():
        assert await history_bytes(client, workflow_id) == history

    code, stdout, stderr = lab(
        recorded, tmp_path / "passed", "--model", "sim-small", "--fail-if", "changed_rate > 0"
    )
    assert code == 0, stderr
    assert "passed: changed_rate > 0 (changed_rate = " in stdout
    report = json.loads((tmp_path / "passed" / "report.json").read_text(encoding="utf-8"))
    assert [gate["held"] for gate in report["gates"]] == [False]
    assert len([r for r in simulator.requests() if r["path"] == "chat"]) == chats_after + 2 * RUNS
