"""`starter.py status`, `history`, `list` and `result` as a user runs them against the local
stack: what a run refused, what its failure's details hold, and every read command at 80
columns and as JSON."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

from aiorch.devstack.llm_simulator.replies import REFUSAL_TEXT
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from tests.support.live_runs import request, start, status_of, wait_for_state
from tests.support.live_stack import starter, temporal_workflow_signal
from tests.support.reviewing import signed
from workflows import contract
from workflows.payloads import RunStatus

pytestmark = pytest.mark.e2e


def fields(output: str) -> dict[str, str]:
    """``status``'s lines as field -> value."""
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in output.splitlines())


async def test_status_shows_what_the_run_refused(stack: LocalStack, client: Client) -> None:
    """A budget decision and then a review sent unsigned with the plain Temporal CLI (which
    says the signal succeeded) are refused by the run, and `status` says so: both counts and
    the last reason (the review's), in text at 80 columns and in `--json`."""
    handle = await start(client, request("Refuse my signals", review="always"))
    await wait_for_state(handle, "await_review")
    review = json.dumps({"decision": "approve", "reviewer": "mallory"})
    budget = json.dumps({"decision": "approve", "operator": "mallory"})
    for name, payload in (("budget_decision", budget), (contract.SIGNAL_REVIEW, review)):
        sent = temporal_workflow_signal(stack, handle.id, name, payload)
        assert sent.returncode == 0 and "succeeded" in sent.stdout, sent.stderr
    deadline = asyncio.get_running_loop().time() + 10
    while (await status_of(handle)).reviews_refused < 1:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)

    shown = starter(stack, "status", handle.id, columns=80)

    assert shown.returncode == 0, shown.stderr
    lines = fields(shown.stdout)
    assert lines["state"] == "await_review"
    assert (lines["reviews_refused"], lines["budget_decisions_refused"]) == ("1", "1")
    assert lines["last_refusal"].startswith("review is not signed")
    as_json = json.loads(starter(stack, "status", handle.id, "--json").stdout)
    assert (as_json["reviews_refused"], as_json["budget_decisions_refused"]) == (1, 1)
    assert as_json["last_refusal"] == lines["last_refusal"]
    assert RunStatus.model_validate(as_json).state == "await_review"
    await handle.cancel()


async def test_status_of_a_run_refused_at_start_says_it_failed(
    stack: LocalStack, client: Client
) -> None:
    """A run a plain client started with input the contract refuses closes Failed at once,
    before its state leaves idle; `status` says what Temporal and `result` say: state failed,
    status Failed, and the refusal as last_error, in text and in `--json`; `list` says failed
    too (not `?`)."""
    handle = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        {"request_id": "a" * 24, "user_message": "x", "colour": "red"},
        id=f"refused-{uuid.uuid4().hex}",
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    shown = starter(stack, "status", handle.id, columns=80)

    assert shown.returncode == 0, shown.stderr
    lines = fields(shown.stdout)
    assert (lines["state"], lines["status"], lines["progress"]) == ("failed", "Failed", "100%")
    assert lines["last_error"].startswith("InvalidRequest: invalid request: ")
    assert "colour" in lines["last_error"]
    as_json = json.loads(starter(stack, "status", handle.id, "--json").stdout)
    assert (as_json["state"], as_json["status"]) == ("failed", "Failed")
    assert as_json["last_error"] == lines["last_error"]
    outcome = starter(stack, "result", handle.id)
    assert outcome.returncode == 3
    assert "colour" in outcome.stderr
    deadline = asyncio.get_running_loop().time() + 30
    while True:  # visibility is eventually consistent
        listed = json.loads(starter(stack, "list", "--json", "--limit", "1000").stdout)
        rows = [row for row in listed if row["workflow_id"] == handle.id]
        if rows and rows[0]["temporal_status"] == "FAILED":
            break
        assert asyncio.get_running_loop().time() < deadline, rows
        await asyncio.sleep(0.5)
    assert rows[0]["state"] == "failed"


def test_start_wait_prints_the_result_alone_on_stdout(stack: LocalStack, tmp_path: Path) -> None:
    """`start --file F --wait` prints the result's JSON alone on stdout, which parses whole;
    where the file was stored, the run's id and its Web UI link go to stderr."""
    document = tmp_path / "note.txt"
    document.write_text("Summarise this note about durable execution.", encoding="utf-8")
    done = starter(stack, "start", "--file", str(document), "--review", "never", "--wait")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "completed"
    assert f"started {result['request_id']}" in done.stderr
    assert "web ui: http" in done.stderr
    assert f"stored {document}" in done.stderr


async def test_list_waiting_shows_the_runs_waiting_for_a_reviewer(
    stack: LocalStack, client: Client
) -> None:
    """`list --waiting --json` lists a run waiting in await_review, and not a run that has
    completed."""
    waiting = await start(client, request("Wait for me", review="always"))
    done = await start(client, request("Do not wait", review="never"))
    await wait_for_state(waiting, "await_review")
    assert (await finished(done)).state == "completed"
    deadline = asyncio.get_running_loop().time() + 30
    while True:  # visibility is eventually consistent
        listed = starter(stack, "list", "--waiting", "--json", "--limit", "1000")
        assert listed.returncode == 0, listed.stderr
        ids = {row["workflow_id"]: row["state"] for row in json.loads(listed.stdout)}
        if waiting.id in ids or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.5)
    assert ids[waiting.id] == "await_review"
    assert done.id not in ids
    await waiting.cancel()


async def test_a_refused_run_shows_the_refusal_text(stack: LocalStack, client: Client) -> None:
    """A run the model refused fails with a message that names the command that shows the
    refusal (never the text itself); that command, `status`, prints the text from the
    failure's details, and `result` prints the result, says where the run ended and exits 3."""
    handle = await start(client, request("Say something you should not [sim:refusal]"))
    assert (await finished(handle)).state == "failed"

    shown = starter(stack, "status", handle.id, columns=80)

    assert shown.returncode == 0, shown.stderr
    lines = fields(shown.stdout)
    assert lines["last_error"] == (
        f"LlmRefused: the model refused ({len(REFUSAL_TEXT)} characters; "
        f"`starter.py status {handle.id}` shows the text)"
    )
    assert lines["error_details"] == REFUSAL_TEXT
    assert json.loads(starter(stack, "status", handle.id, "--json").stdout)["error_details"] == [
        REFUSAL_TEXT
    ]
    result = starter(stack, "result", handle.id)
    assert result.returncode == 3
    assert json.loads(result.stdout)["state"] == "failed"
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: run {handle.id} ended in failed: ")


async def test_read_commands_cut_nothing_at_80_columns(
    stack: LocalStack, client: Client, reviewer_key: SigningKey
) -> None:
    """At 80 columns `status` prints the Web UI link whole on its line, and `history` and
    `list` show every state, event and id whole (no ellipsis); each of them, and `result`,
    prints JSON with --json."""
    handle = await start(client, request("Review me narrowly", review="always"))
    await wait_for_state(handle, "await_review")
    await handle.signal(
        contract.SIGNAL_REVIEW, await signed(handle, reviewer_key, "approve", "ann")
    )
    result = await finished(handle)
    assert result.state == "completed"

    status = starter(stack, "status", handle.id, columns=80).stdout
    history = starter(stack, "history", handle.id, columns=80).stdout
    listed = starter(stack, "list", "--limit", "500", columns=80).stdout

    assert fields(status)["web_ui"].endswith(f"/namespaces/default/workflows/{handle.id}")
    for output in (status, history, listed):
        assert "…" not in output
    words = set(history.split())
    for entry in result.history:
        assert {entry.from_state, entry.to_state, entry.event} <= words, entry
    assert handle.id in listed.split()
    for command in ("status", "history"):
        document = json.loads(starter(stack, command, handle.id, "--json").stdout)
        assert document["workflow_id"] == handle.id
        assert [e["event"] for e in document["history"]] == [e.event for e in result.history]
    assert json.loads(starter(stack, "result", handle.id, "--json").stdout) == json.loads(
        result.model_dump_json()
    )
