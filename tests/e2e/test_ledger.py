"""The run ledger end to end: on the real dev server (payloads encrypted) with a worker and the
LLM simulator, runs of both shipped pipelines (a reedit loop that continues as new, a
correction, a rejection, a retry, a dead letter, a run left waiting) are projected by
``starter.py ledger sync`` into SQLite and PostgreSQL. Every run, transition, model call and
decision appears once, as counted here straight from the histories; a second sync changes
nothing; ``ledger sql`` refuses writes; the reviews report's figures equal the histories';
``ledger follow`` picks up a new run and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops import ledger, pipelines
from aiorch.ops.ledger import _schema as schema
from aiorch.ops.results import NoResult, run_converter, run_result
from aiorch.ops.reviews import submit_review
from aiorch.ops.visibility import start_run
from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.temporal import encrypted_converter
from tests.support import ROOT
from tests.support.builders import new_request_id
from tests.support.live_runs import wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, run_script, stack_with_worker
from tests.support.postgres import running_postgres
from workflows import contract
from workflows.documents.payloads import DocumentRequest
from workflows.payloads import LlmCallResult, PipelineRequest, ReviewDecision, RunResult

pytestmark = pytest.mark.e2e

KEYS = f"k1:{new_key()}"
DECISIONS = {"approve", "reedit", "reject", "correct"}
NOTES = {"continued_as_new", "review_vote"}
MODEL_ACTIVITIES = {contract.ACTIVITY_INVOKE_LLM, contract.ACTIVITY_AWAIT_BATCH}
INVOICE = """Vendor: Acme Supplies Ltd
Invoice number: INV-{number}
Issue date: 2026-11-02
Currency: EUR
Line: Widgets | 3 | 4.50 | 13.50
Line: Shipping | 1 | 5.00 | 5.00
Tax: 3.70
Total: 25.00
"""


@dataclass
class Fleet:
    stack: LocalStack
    client: Client
    closed: list[str]
    waiting: str

    def env(self, url: str, **extra: str) -> dict[str, str]:
        """A shell of an operator with the workers' keys, the ledger at ``url``."""
        return {
            **os.environ,
            **self.stack.addresses.env(),
            "PAYLOAD_KEYS": KEYS,
            "LEDGER_URL": url,
            "COLUMNS": "200",
            **extra,
        }

    def ledger(self, url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return run_script("starter.py", "ledger", *args, env=self.env(url, **extra))


async def decide(client: Client, stack: LocalStack, workflow_id: str, **fields: Any) -> None:
    decision = ReviewDecision(**fields)
    outcome = await submit_review(client, workflow_id, decision, signer=stack.reviewer_key.signer())
    assert outcome.applied, outcome.describe(workflow_id)


async def in_round(client: Client, workflow_id: str, state: str, review_round: int) -> None:
    handle = client.get_workflow_handle(workflow_id)
    for _ in range(300):
        status = await wait_for_state(handle, state)
        published = (await handle.describe()).typed_search_attributes.get(contract.AI_REVIEW_ROUND)
        if status.review_round == review_round and published == review_round:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never waited in round {review_round}")


async def llm_run(client: Client, message: str, **fields: Any) -> str:
    request = PipelineRequest(request_id=new_request_id(), user_message=message, **fields)
    return await start_run(client, request, task_queue=contract.DEFAULT_TASK_QUEUE)


async def drive(client: Client, stack: LocalStack) -> Fleet:
    """The runs the ledger is checked against (see the module doc)."""
    reedited = await llm_run(client, "Summarise the report", review="always", tenant="acme")
    await in_round(client, reedited, "await_review", 1)
    await decide(client, stack, reedited, decision="reedit", reviewer="ann", feedback="shorter")
    await in_round(client, reedited, "await_review", 2)
    await decide(client, stack, reedited, decision="approve", reviewer="bob")

    rejected = await llm_run(client, "Draft a reply", review="always", requested_by="dora")
    await in_round(client, rejected, "await_review", 1)
    await decide(client, stack, rejected, decision="reject", reviewer="bob", feedback="off topic")

    document = DocumentRequest(request_id=new_request_id(), document=INVOICE.format(number=7))
    corrected = await start_run(
        client,
        document,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        pipeline=pipelines.named("documents"),
    )
    await in_round(client, corrected, "await_review", 1)
    view = await client.get_workflow_handle(corrected).query(contract.QUERY_REVIEW_VIEW)
    fields = {**view["fields"], "total": "22.20"}
    await decide(client, stack, corrected, decision="approve", reviewer="carol", fields=fields)

    retried = await llm_run(client, "Throttled once [sim:status=429:times=1]")
    dead = await llm_run(client, "Always down [sim:status=503]", options={"llm_max_attempts": 2})
    waiting = await llm_run(client, "Wait for me", review="always")
    await in_round(client, waiting, "await_review", 1)

    closed = [reedited, rejected, corrected, retried, dead]
    for workflow_id in closed:
        await closed_run(client, workflow_id)
    return Fleet(stack, client, closed, waiting)


async def closed_run(client: Client, workflow_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    handle = client.get_workflow_handle(workflow_id)
    while (await handle.describe()).close_time is None:
        assert time.monotonic() < deadline, f"{workflow_id} did not close"
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Encrypted payloads; a reedit continues the run as new (one round per run)."""
    store = tmp_path_factory.mktemp("store") / "documents.sqlite"
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"),
        {
            **E2E_WORKER_ENV,
            "PAYLOAD_KEYS": KEYS,
            "PAYLOAD_KEY_ID": "k1",
            "REEDIT_ROUNDS_PER_RUN": "1",
            "DOCUMENT_STORE_URL": f"sqlite:///{store}",
        },
    )


@pytest.fixture(scope="module")
async def fleet(stack: LocalStack) -> Fleet:
    converter = encrypted_converter(KeyRing.parse(KEYS, "k1"))
    client = await Client.connect(stack.addresses.temporal_address, data_converter=converter)
    driven = await drive(client, stack)
    # Visibility shows a close a moment after it.
    await asyncio.sleep(2)
    return driven


@dataclass
class Counted:
    """What the histories hold, counted here: per run, its model calls and their cost; per
    chain (workflow id), its transitions and decisions, from the result of its last run."""

    runs: dict[str, str]
    model_calls: dict[str, int]
    cost: dict[str, float]
    transitions: dict[str, int]
    decisions: dict[str, list[dict[str, Any]]]


async def count_histories(client: Client, workflow_ids: list[str], closed: list[str]) -> Counted:
    """``Counted`` for the runs of ``workflow_ids``; transitions and decisions of the chains
    in ``closed`` (an open run has no result yet)."""
    counted = Counted({}, {}, {}, {}, {})
    for workflow_id in workflow_ids:
        converter = run_converter(client, workflow_id)
        async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
            counted.runs[execution.run_id] = workflow_id
            handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
            events = (await handle.fetch_history()).events
            scheduled = {
                event.event_id
                for event in events
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and event.activity_task_scheduled_event_attributes.activity_type.name
                in MODEL_ACTIVITIES
            }
            counted.model_calls[execution.run_id] = len(scheduled)
            spent = 0.0
            for event in events:
                done = event.activity_task_completed_event_attributes
                if done.scheduled_event_id in scheduled:
                    [value] = await converter.decode(list(done.result.payloads), [LlmCallResult])
                    spent += value.cost_usd or 0.0
            counted.cost[execution.run_id] = spent
        result = await result_of(client, workflow_id) if workflow_id in closed else None
        if result is not None:
            entries = [e.model_dump(mode="json") for e in result.history]
            counted.transitions[workflow_id] = sum(e["event"] not in NOTES for e in entries)
            counted.decisions[workflow_id] = [e for e in entries if e["event"] in DECISIONS]
    return counted


async def result_of(client: Client, workflow_id: str) -> RunResult | None:
    """The chain's result as its client reads it (a failed run's from its failure)."""
    try:
        return await run_result(client, workflow_id)
    except NoResult:
        return None


def rows(engine: Engine, table: Any) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        return [dict(row._mapping) for row in connection.execute(select(table)).all()]


def engine_at(url: str) -> Engine:
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def contents_at(url: str) -> tuple[dict[str, int], str]:
    """`contents` of the ledger at ``url``, its connections closed after."""
    engine = engine_at(url)
    try:
        return ledger.contents(engine)
    finally:
        engine.dispose()


async def check_ledger(fleet: Fleet, url: str) -> None:
    """The ledger at ``url`` holds each run, model call, transition and decision once."""
    ids = [*fleet.closed, fleet.waiting]
    counted = await count_histories(fleet.client, ids, fleet.closed)
    engine = engine_at(url)
    try:
        runs = {row["run_id"]: row for row in rows(engine, schema.runs)}
        calls = rows(engine, schema.model_calls)
        moves = rows(engine, schema.transitions)
        decisions = rows(engine, schema.review_decisions)
        corrections = rows(engine, schema.corrections)
    finally:
        engine.dispose()
    assert set(runs) == set(counted.runs)
    for run_id, workflow_id in counted.runs.items():
        assert runs[run_id]["workflow_id"] == workflow_id
        assert sum(c["run_id"] == run_id for c in calls) == counted.model_calls[run_id], run_id
        assert runs[run_id]["cost_usd"] == pytest.approx(counted.cost[run_id])
    for workflow_id in fleet.closed:
        assert (
            sum(m["workflow_id"] == workflow_id for m in moves) == counted.transitions[workflow_id]
        )
        mine = sorted(
            (d["decision"], d["reviewer"]) for d in decisions if d["workflow_id"] == workflow_id
        )
        assert mine == sorted((d["event"], d["reviewer"]) for d in counted.decisions[workflow_id])
    reedited, rejected, corrected, retried, dead = fleet.closed
    chain = [r for r in runs.values() if r["workflow_id"] == reedited]
    assert len(chain) == 2 and len({r["chain_id"] for r in chain}) == 1
    assert {r["status"] for r in chain} == {"continued_as_new", "completed"}
    assert {r["tenant"] for r in chain} == {"acme"}
    by_id = {r["workflow_id"]: r for r in runs.values() if r["status"] != "continued_as_new"}
    assert by_id[rejected]["requester"] == "dora"
    assert (by_id[dead]["state"], by_id[dead]["attempts"]) == ("dead_letter", 2)
    assert by_id[retried]["state"] == "completed" and by_id[retried]["attempts"] == 2
    assert by_id[corrected]["pipeline"] == "documents"
    assert by_id[fleet.waiting]["awaiting_review"] and by_id[fleet.waiting]["status"] == "running"
    fixes = {(c["workflow_id"], c["kind"], c["field_path"]) for c in corrections}
    assert (corrected, "correct", "total") in fixes and (reedited, "reedit", "") in fixes
    assert [(c["before"], c["after"]) for c in corrections if c["field_path"] == "total"] == [
        ('"25.00"', '"22.20"')
    ]
    assert all(d["delay_s"] is not None and d["delay_s"] >= 0 for d in decisions)


async def test_sync_projects_every_run_once_and_a_second_sync_changes_nothing(
    fleet: Fleet, tmp_path: Path
) -> None:
    """``ledger sync`` fills the tables with what the histories hold, each once; run again,
    it reads no history (the open run's has not grown) and leaves every row as it was."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    first = fleet.ledger(url, "sync")
    assert first.returncode == 0, first.stderr
    assert "6 projected" in first.stderr or "7 projected" in first.stderr, first.stderr
    await check_ledger(fleet, url)
    before = contents_at(url)

    again = fleet.ledger(url, "sync")
    assert again.returncode == 0, again.stderr
    listed = re.search(r"(\d+) run\(s\) listed", first.stderr)
    assert listed is not None, first.stderr
    n = listed[1]
    assert f"{n} run(s) listed: 0 projected, {n} unchanged" in again.stderr, again.stderr
    assert contents_at(url) == before


def test_sync_without_the_keys_says_so_in_one_line(fleet: Fleet, tmp_path: Path) -> None:
    """A reader without the workers' PAYLOAD_KEYS cannot read encrypted runs: the sync ends
    non-zero, with one error line that says what to set."""
    env = fleet.env(f"sqlite:///{tmp_path / 'ledger.db'}")
    del env["PAYLOAD_KEYS"]
    done = run_script("starter.py", "ledger", "sync", env=env)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "PAYLOAD_KEYS" in last, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "statement",
    ["DELETE FROM runs", "DROP TABLE model_calls", "PRAGMA writable_schema = 1"],
)
def test_sql_refuses_a_write_in_one_line(fleet: Fleet, tmp_path: Path, statement: str) -> None:
    """``ledger sql`` runs nothing that would change the ledger: one error line, exit 1."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert fleet.ledger(url, "sync").returncode == 0
    before = (tmp_path / "ledger.db").read_bytes()
    done = fleet.ledger(url, "sql", statement)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: refused"), done.stderr
    assert (tmp_path / "ledger.db").read_bytes() == before


def test_sql_answers_as_a_table_json_and_csv(fleet: Fleet, tmp_path: Path) -> None:
    """A SELECT prints its rows: JSON objects by column, CSV with a header."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert fleet.ledger(url, "sync").returncode == 0
    query = "SELECT workflow_id, state FROM runs WHERE status = 'running'"
    as_json = fleet.ledger(url, "sql", query, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [{"workflow_id": fleet.waiting, "state": "await_review"}]
    as_csv = fleet.ledger(url, "sql", query, "--csv")
    assert as_csv.stdout.splitlines() == ["workflow_id,state", f"{fleet.waiting},await_review"]
    table = fleet.ledger(url, "sql", query)
    assert fleet.waiting in table.stdout and "1 row(s)" in table.stderr


async def test_reviews_report_equals_the_histories(fleet: Fleet, tmp_path: Path) -> None:
    """The reviews report counts the decisions the histories hold: by reviewer, corrected
    (reedits and corrected fields), none by a rule; the approved items and the model's
    dollars per item; and the one run waiting for a reviewer."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert fleet.ledger(url, "sync").returncode == 0
    done = fleet.ledger(url, "report", "reviews", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    every = [*fleet.closed, fleet.waiting]
    counted = await count_histories(fleet.client, every, fleet.closed)
    decisions = [d for each in counted.decisions.values() for d in each]
    approved = [
        w
        for w, each in counted.decisions.items()
        if {"approve", "correct"} & {d["event"] for d in each}
    ]
    chain_cost = {
        w: sum(cost for run_id, cost in counted.cost.items() if counted.runs[run_id] == w)
        for w in approved
    }
    assert report["decisions"] == len(decisions) == 4
    assert report["corrected"] == sum(d["event"] in {"reedit", "correct"} for d in decisions)
    assert report["auto_approved"] == sum(bool(d.get("rule")) for d in decisions) == 0
    assert report["correction_rate"] == pytest.approx(report["corrected"] / len(decisions))
    reviewers = {line["name"]: line["decisions"] for line in report["by_reviewer"]}
    expected: dict[str, int] = {}
    for d in decisions:
        expected[d["reviewer"]] = expected.get(d["reviewer"], 0) + 1
    assert reviewers == expected
    assert report["approved_items"] == len(approved) == 2
    assert report["cost_per_approved_usd"] == pytest.approx(sum(chain_cost.values()) / 2)
    assert report["pending"] == {"total": 1, "over_1h": 0, "over_1d": 0, "over_7d": 0}

    cost = fleet.ledger(url, "report", "cost", "--json")
    lines = json.loads(cost.stdout)
    assert sum(line["cost_usd"] for line in lines) == pytest.approx(sum(counted.cost.values()))
    assert {line["tenant"] for line in lines} == {"acme", "default"}


async def test_postgresql_ledger_syncs_the_same_and_refuses_writes(fleet: Fleet) -> None:
    """With LEDGER_URL naming PostgreSQL the sync holds the same rows, a second sync changes
    nothing, and ``ledger sql`` runs in a read-only transaction."""
    with running_postgres() as server:
        url = server.create_database("ledger")
        first = fleet.ledger(url, "sync")
        assert first.returncode == 0, first.stderr
        await check_ledger(fleet, url)
        engine = engine_at(url)
        before = ledger.contents(engine)
        assert fleet.ledger(url, "sync").returncode == 0
        assert ledger.contents(engine) == before
        refused = fleet.ledger(url, "sql", "DELETE FROM runs")
        assert refused.returncode == 1 and refused.stderr.startswith("error: refused")
        two = fleet.ledger(url, "sql", "SELECT 1; DELETE FROM runs")
        assert two.returncode == 1 and two.stderr.startswith("error:")
        assert ledger.contents(engine) == before
        engine.dispose()


async def test_follow_picks_up_a_new_run_and_stops_on_sigterm(fleet: Fleet, tmp_path: Path) -> None:
    """``ledger follow`` syncs every interval: a run started while it runs shows up,
    completed; SIGTERM stops it cleanly (exit 0) after the sync under way."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    follower = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "ledger",
        "follow",
        "--interval",
        "1s",
        cwd=ROOT,
        env=fleet.env(url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        workflow_id = await llm_run(fleet.client, "Followed")
        engine = engine_at(url)
        deadline = time.monotonic() + 60
        while True:
            assert follower.returncode is None, await follower.communicate()
            if (tmp_path / "ledger.db").exists():
                found = [r for r in rows(engine, schema.runs) if r["workflow_id"] == workflow_id]
                if found and found[0]["status"] == "completed":
                    break
            assert time.monotonic() < deadline, "the new run never reached the ledger"
            await asyncio.sleep(0.5)
        engine.dispose()
        follower.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(follower.communicate(), timeout=30)
        assert follower.returncode == 0, stderr
        assert b"stopped after" in stderr and b"Traceback" not in stderr
    finally:
        if follower.returncode is None:
            follower.kill()
            await follower.wait()
