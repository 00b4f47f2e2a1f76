"""A reviewer who lives in the terminal, against the local stack (the dev server, a worker
process, the LLM simulator, an SQLite document store): `review show` shows a document run
waiting for review as the inbox does, and `review ID correct --set` corrects it, signed with
the stack's reviewer key; the run validates the corrected fields again and stores them."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops import pipelines
from aiorch.ops.results import run_result
from aiorch.ops.signing import SigningKey
from aiorch.ops.visibility import start_run
from tests.support.builders import new_request_id
from tests.support.invoices import invoice_fields, text_document
from tests.support.live_runs import status_of, visible_state, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker, starter
from tests.support.reviewing import signed
from workflows import contract
from workflows.documents.payloads import DocumentRequest, DocumentResult
from workflows.payloads import REEDIT_NEEDS_FEEDBACK, HistoryEntry

pytestmark = pytest.mark.e2e

RUN_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'documents.sqlite'}"


@pytest.fixture(scope="module")
def review_stack(tmp_path_factory: pytest.TempPathFactory, store_url: str) -> Iterator[LocalStack]:
    """A stack whose worker stores documents in an SQLite file (every document waits for a
    reviewer: the default DOCUMENT_REVIEW_MIN)."""
    env = {**E2E_WORKER_ENV, "HEALTH_PORT": "0", "DOCUMENT_STORE_URL": store_url}
    yield from stack_with_worker(tmp_path_factory.mktemp("stack"), env)


async def wrong_total_run(
    client: Client, stack: LocalStack, seed: int
) -> tuple[str, dict[str, Any]]:
    """A document run whose invoice prints a total 10.00 above its lines plus tax, waiting for
    review; its id and the fields the invoice prints."""
    printed = invoice_fields(seed)
    printed["total"] = str(Decimal(printed["total"]) + Decimal("10.00"))
    request_id = new_request_id()
    path = stack.addresses.input_dir / f"{request_id}.txt"
    path.write_bytes(text_document(printed).data)
    request = DocumentRequest(request_id=request_id, document=path.as_uri())
    workflow_id = await start_run(
        client,
        request,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        pipeline=pipelines.named("documents"),
    )
    await wait_for_state(client.get_workflow_handle(workflow_id), "await_review", RUN_TIMEOUT_S)
    return workflow_id, printed


@pytest.fixture(scope="module")
async def refusing_run(review_stack: LocalStack) -> tuple[str, dict[str, Any]]:
    """One run waiting for review, for every refusal (none of which reaches it)."""
    return await wrong_total_run(await connect(review_stack), review_stack, seed=302)


def stored_fields(url: str, request_id: str) -> list[Any]:
    """The fields of every row the store holds for ``request_id``."""
    engine = create_engine(url)
    try:
        if not inspect(engine).has_table("documents"):
            return []  # nothing stored yet
        with engine.connect() as connection:
            query = text("SELECT fields FROM documents WHERE request_id = :id")
            found = connection.execute(query, {"id": request_id}).all()
    finally:
        engine.dispose()
    return [row.fields if isinstance(row.fields, dict) else json.loads(row.fields) for row in found]


def table_rows(shown: str) -> list[list[str]]:
    """The cells of each row of the tables in ``shown`` (a table drawn with box lines)."""
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in shown.splitlines()
        if line.startswith("│")
    ]


def decisions(history: list[HistoryEntry]) -> list[tuple[str, str | None, int | None, str | None]]:
    return [(e.event, e.reviewer, e.review_round, e.detail) for e in history if e.reviewer]


async def test_a_document_run_is_shown_and_corrected_from_the_command_line(
    review_stack: LocalStack, store_url: str
) -> None:
    """`review show ID` prints the fields by path (the one a problem names marked), the problem
    and how to correct; `--json` holds the fields and problems as the run's review_view has
    them. `review ID correct --set total=...` sends a signed correction of round 1, says which
    value changed and that the run took them; the result and the stored row hold the
    corrected total, and the history counts the one field that changed."""
    client = await connect(review_stack)
    workflow_id, printed = await wrong_total_run(client, review_stack, seed=301)
    right_total = invoice_fields(301)["total"]

    shown = starter(review_stack, "review", "show", workflow_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    rows = {cells[1]: cells for cells in table_rows(shown.stdout)}
    assert rows["total"] == ["!", "total", printed["total"]]
    assert rows["vendor"] == ["", "vendor", printed["vendor"]]
    assert rows["line_items[0].amount"][2] == printed["line_items"][0]["amount"]
    assert f"- total: is {printed['total']}, but the line amounts" in shown.stdout
    assert "who may decide" in shown.stdout
    assert ["review", "round", "1"] in [line.split() for line in lines]
    assert f"aiorch review {workflow_id} correct --set PATH=VALUE" in shown.stdout

    as_json = starter(review_stack, "review", "show", workflow_id, "--json")
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert (document["workflow_id"], document["review_round"]) == (workflow_id, 1)
    assert document["fields"] == printed and document["corrections"] and document["waiting"]
    [problem] = document["problems"]
    assert problem.startswith(f"total: is {printed['total']}, but the line amounts")

    corrected = starter(
        review_stack, "review", workflow_id, "correct", "--set", f"total={right_total}"
    )

    assert corrected.returncode == 0, corrected.stderr
    accepted, change, went = corrected.stdout.splitlines()
    assert accepted == f"{workflow_id}: correction accepted (round 1):"
    assert change == f"  total: {printed['total']} -> {right_total}"
    # Valid, the fields go to the store (an activity), which may be done by the time it asks.
    assert went in (
        f"{workflow_id}: the run took them and is in store now",
        f"{workflow_id}: the run has ended: completed",
    )
    result = await run_result(client, workflow_id)
    assert isinstance(result, DocumentResult) and result.state == "completed"
    assert result.fields == {**printed, "total": right_total} and result.corrected
    assert stored_fields(store_url, workflow_id) == [{**printed, "total": right_total}]
    assert decisions(result.history) == [
        ("correct", "localstack", 1, "approve by localstack with 1 changed field (total)")
    ]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--set", "totl=1.00"],
            "error: --set: totl names no field of the run's fields (they are: vendor, "
            "invoice_number, issue_date, due_date, currency, line_items, tax, total); "
            "nothing was sent",
        ),
        (
            ["--set", "line_items[9].amount=5"],
            "error: --set: line_items[9].amount names no field of the run's fields "
            "(line_items has {items} item(s), from [0]); nothing was sent",
        ),
        (
            ["--set", "line_items=5"],
            "error: --set: line_items holds a list (as JSON); '5' is not one; nothing was sent",
        ),
        (["--set", "total"], "error: --set 'total': write PATH=VALUE, such as total=30.00"),
        (
            ["--fields", "{fields_file}"],
            "error: --fields: po_number is no field of the run's "
            "fields (they are: vendor, invoice_number, issue_date, due_date, currency, "
            "line_items, tax, total)",
        ),
        (
            ["--set", "vendor={vendor}"],
            "error: these corrections change no field; nothing was sent (to approve the fields "
            "as they are: aiorch review {workflow_id} approve)",
        ),
    ],
    ids=[
        "unknown-field",
        "no-such-item",
        "wrong-type",
        "no-value",
        "unknown-field-in-file",
        "no-change",
    ],
)
async def test_a_correction_that_names_no_field_or_the_wrong_type_sends_nothing(
    review_stack: LocalStack,
    refusing_run: tuple[str, dict[str, Any]],
    tmp_path: Path,
    args: list[str],
    error: str,
) -> None:
    """A --set whose path names no field of the run's (a name, an item past the list's end),
    whose value is not of its field's type, that has no value or that changes nothing, and a
    --fields file with a field the run's have not, are each one line and exit 2: nothing is
    sent, and the run still waits in round 1 with no decision recorded."""
    client = await connect(review_stack)
    workflow_id, printed = refusing_run
    fields_file = tmp_path / "fields.json"
    fields_file.write_text(json.dumps({**printed, "po_number": "1"}), encoding="utf-8")
    args = [arg.format(fields_file=fields_file, vendor=printed["vendor"]) for arg in args]

    refused = starter(review_stack, "review", workflow_id, "correct", *args)

    assert refused.returncode == 2, refused.stdout
    expected = error.format(items=len(printed["line_items"]), workflow_id=workflow_id)
    assert refused.stderr == expected + "\n"
    status = await status_of(client.get_workflow_handle(workflow_id))
    assert (status.state, status.review_round) == ("await_review", 1)
    assert decisions(status.history) == []


async def test_corrected_fields_the_run_still_finds_wrong_go_back_to_review(
    review_stack: LocalStack, store_url: str
) -> None:
    """A correction whose total still does not add up is accepted and validated again by the
    run, which waits in round 2 with the problem: the command says so in one line, exit 1, and
    nothing is stored. The run publishes round 2, so `review show` says round 2 and `review ID
    approve` without --round decides it (exit 0). An approve for round 1, which the correction
    decided, and the approve sent again once the run has ended are not applied: one line each,
    exit 1."""
    client = await connect(review_stack)
    workflow_id, _ = await wrong_total_run(client, review_stack, seed=303)
    handle = client.get_workflow_handle(workflow_id)

    still_wrong = starter(review_stack, "review", workflow_id, "correct", "--set", "total=1.00")

    assert still_wrong.returncode == 1, still_wrong.stdout
    assert still_wrong.stderr.startswith(
        f"error: {workflow_id}: the run did not take the corrected fields: round 2 waits with "
        "1 problem(s): total: is 1.00, but the line amounts"
    )
    assert still_wrong.stderr.endswith(
        f"(correct again, or decide round 2: aiorch review {workflow_id} approve|reedit|reject)\n"
    )
    assert stored_fields(store_url, workflow_id) == []
    status = await status_of(handle)
    assert (status.state, status.review_round) == ("await_review", 2)
    shown = starter(review_stack, "review", "show", workflow_id)
    assert shown.returncode == 0, shown.stderr
    assert ["review", "round", "2"] in [line.split() for line in shown.stdout.splitlines()]

    late = starter(review_stack, "review", workflow_id, "approve", "--round", "1")
    assert late.returncode == 1, late.stdout
    assert late.stderr == (
        f"error: {workflow_id}: round 1 was already decided (correct by localstack); your "
        f"approve was not applied (`starter.py status {workflow_id}` shows where the run is "
        "now)\n"
    )

    approved = starter(review_stack, "review", workflow_id, "approve")

    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith(f"{workflow_id}: approve accepted (round 2); now ")
    result = await run_result(client, workflow_id)
    assert isinstance(result, DocumentResult) and result.state == "completed"
    assert [entry[:3] for entry in decisions(result.history)] == [
        ("correct", "localstack", 1),
        ("approve", "localstack", 2),
    ]
    again = starter(review_stack, "review", workflow_id, "approve")
    assert again.returncode == 1, again.stdout
    assert again.stderr == (
        f"error: {workflow_id}: approve for round 2 is already applied; the run has ended: "
        "completed; nothing was sent\n"
    )
    assert again.stdout == ""


async def test_a_reedit_without_feedback_sent_as_a_signal_is_counted_not_applied(
    review_stack: LocalStack,
) -> None:
    """A plain Temporal client that signals `review` with a reedit and no feedback (signed for
    the round, so only the missing feedback is wrong) does not move the run: `status` counts
    it refused with the reason the CLI and the inbox give, and the run still waits in round 1
    with no decision recorded."""
    client = await connect(review_stack)
    workflow_id, _ = await wrong_total_run(client, review_stack, seed=304)
    handle = client.get_workflow_handle(workflow_id)
    reedit = await signed(handle, review_stack.reviewer_key, "reedit", "localstack", "  ")

    await handle.signal(contract.SIGNAL_REVIEW, reedit)
    deadline = asyncio.get_running_loop().time() + 10
    while (await status_of(handle)).reviews_refused < 1:
        assert asyncio.get_running_loop().time() < deadline, "the signal was never judged"
        await asyncio.sleep(0.1)

    shown = starter(review_stack, "status", workflow_id, "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert (status["reviews_refused"], status["last_refusal"]) == (1, REEDIT_NEEDS_FEEDBACK)
    assert (status["state"], status["review_round"]) == ("await_review", 1)
    assert decisions((await status_of(handle)).history) == []


async def test_review_all_exits_1_when_a_run_does_not_apply_its_decision(
    review_stack: LocalStack, tmp_path: Path
) -> None:
    """`review-all approve` signed with a key the worker does not know: every waiting run
    refuses it, so review-all lists each with the run's reason and exits 1 in one line with
    their count; the runs still wait in their round with no decision recorded."""
    client = await connect(review_stack)
    workflow_id, _ = await wrong_total_run(client, review_stack, seed=305)
    assert await visible_state(client, workflow_id, "await_review", timeout=30)
    key_file = tmp_path / "unknown-reviewer-key"
    key_file.write_text(SigningKey.generate("mallory").private_entry(), encoding="utf-8")

    refused = starter(
        review_stack, "review-all", "approve", "-y", env={"REVIEWER_KEY_FILE": str(key_file)}
    )

    assert refused.returncode == 1, refused.stdout
    assert re.search(r"approve: 0 applied, (\d+) refused, 0 failed of \1 ", refused.stdout)
    assert f"  {workflow_id}: " in refused.stdout
    last = refused.stderr.splitlines()[-1]
    assert re.fullmatch(r"error: \d+ review\(s\) not applied \(listed above\)", last)
    status = await status_of(client.get_workflow_handle(workflow_id))
    assert (status.state, status.review_round) == ("await_review", 1)
    assert decisions(status.history) == []
