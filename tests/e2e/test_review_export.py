"""Corrections as data, end to end: on the real dev server with a worker and the LLM simulator,
reviewers send ten reedits (five LLM runs, two each) and five corrections (five invoices with a
wrong total, approved with the right fields); ``starter.py reviews export --since ... --format
jsonl`` then writes exactly those fifteen evaluation examples, each with its reviewer, round,
pipeline version, feedback and the result before and after."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops import pipelines
from aiorch.ops.results import run_result
from aiorch.ops.reviews import submit_review
from aiorch.ops.visibility import start_run
from tests.support.builders import new_request_id
from tests.support.live_runs import wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker, starter
from workflows import contract
from workflows.documents.payloads import DocumentRequest
from workflows.payloads import PipelineRequest, ReviewDecision

pytestmark = pytest.mark.e2e

RUNS = 5
# An invoice whose lines and tax make 22.20, printed with a total of 25.00: validation finds
# the problem, and a reviewer corrects the total.
INVOICE = """Vendor: Acme Supplies Ltd
Invoice number: INV-{number}
Issue date: 2026-11-02
Currency: EUR
Line: Widgets | 3 | 4.50 | 13.50
Line: Shipping | 1 | 5.00 | 5.00
Tax: 3.70
Total: 25.00
"""


@pytest.fixture(scope="module")
def export_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack of its own: no other test's run reaches the export."""
    store = tmp_path_factory.mktemp("store") / "documents.sqlite"
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"),
        {**E2E_WORKER_ENV, "DOCUMENT_STORE_URL": f"sqlite:///{store}"},
    )


async def decide(
    client: Client, stack: LocalStack, workflow_id: str, decision: ReviewDecision
) -> None:
    outcome = await submit_review(client, workflow_id, decision, signer=stack.reviewer_key.signer())
    assert outcome.applied, outcome.describe(workflow_id)


async def waiting_round(client: Client, workflow_id: str, review_round: int) -> None:
    """Until the run waits for review in ``review_round`` (visibility shows it too)."""
    handle = client.get_workflow_handle(workflow_id)
    for _ in range(300):
        status = await wait_for_state(handle, "await_review")
        described = await handle.describe()
        published = described.typed_search_attributes.get(contract.AI_REVIEW_ROUND)
        if status.review_round == review_round and published == review_round:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never waited in round {review_round}")


async def reedited_twice(client: Client, stack: LocalStack, index: int) -> str:
    """An LLM run (review always) sent back twice with feedback, then approved."""
    request = PipelineRequest(
        request_id=new_request_id(), user_message=f"Summarise report {index}", review="always"
    )
    workflow_id = await start_run(client, request, task_queue=contract.DEFAULT_TASK_QUEUE)
    for review_round, feedback in ((1, f"shorter, please ({index})"), (2, "cite the source")):
        await waiting_round(client, workflow_id, review_round)
        reedit = ReviewDecision(decision="reedit", reviewer=f"ann{index}", feedback=feedback)
        await decide(client, stack, workflow_id, reedit)
    await waiting_round(client, workflow_id, 3)
    await decide(client, stack, workflow_id, ReviewDecision(decision="approve", reviewer="bob"))
    return workflow_id


async def corrected(client: Client, stack: LocalStack, index: int) -> str:
    """An invoice with a wrong total, approved with the total corrected."""
    request = DocumentRequest(request_id=new_request_id(), document=INVOICE.format(number=index))
    workflow_id = await start_run(
        client,
        request,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        pipeline=pipelines.named("documents"),
    )
    await waiting_round(client, workflow_id, 1)
    result_fields = await client.get_workflow_handle(workflow_id).query(contract.QUERY_REVIEW_VIEW)
    fields: dict[str, Any] = {**result_fields["fields"], "total": "22.20"}
    correction = ReviewDecision(decision="approve", reviewer="carol", fields=fields)
    await decide(client, stack, workflow_id, correction)
    return workflow_id


async def test_export_writes_exactly_the_reedits_and_corrections_made(
    export_stack: LocalStack, tmp_path: Path
) -> None:
    """Ten reedits and five corrections since the export's --since give fifteen JSON lines:
    one per decision (approvals are none), each naming its run, reviewer, round and pipeline
    version, the reedits with the reply before and the one after, the corrections with the
    field that changed; --until before them gives none."""
    client = await connect(export_stack)
    since = datetime.now(UTC) - timedelta(seconds=1)
    llm_runs = await asyncio.gather(*(reedited_twice(client, export_stack, i) for i in range(RUNS)))
    doc_runs = await asyncio.gather(*(corrected(client, export_stack, i) for i in range(RUNS)))
    for workflow_id in [*llm_runs, *doc_runs]:
        assert (await run_result(client, workflow_id)).state == "completed"
    # Visibility lags the runs' close by a moment.
    await asyncio.sleep(2)

    out = tmp_path / "examples.jsonl"
    done = starter(
        export_stack,
        "reviews", "export", "--since", since.isoformat(), "--format", "jsonl", "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "15 example(s) from 10 run(s)" in done.stderr
    examples = [json.loads(line) for line in out.read_text().splitlines()]

    assert len(examples) == 15
    assert Counter(e["kind"] for e in examples) == {"reedit": 10, "correct": 5}
    assert {e["workflow_id"] for e in examples} == {*llm_runs, *doc_runs}
    assert len({e["id"] for e in examples}) == 15
    reedits = [e for e in examples if e["kind"] == "reedit"]
    for e in reedits:
        assert e["answered"] and e["before"] != e["after"], e
        assert e["after"].startswith("Simulated answer") and "revised per feedback" in e["after"]
        assert e["pipeline"] == "llm" and e["pipeline_version"].startswith("graph-")
        assert e["input"]["user_message"].startswith("Summarise report")
    assert sorted((e["reviewer"], e["review_round"]) for e in reedits) == sorted(
        (f"ann{i}", r) for i in range(RUNS) for r in (1, 2)
    )
    for e in (e for e in examples if e["kind"] == "correct"):
        assert e["reviewer"] == "carol" and e["pipeline"] == "documents"
        assert e["changes"] == [{"field": "total", "before": "25.00", "after": "22.20"}]

    none = starter(
        export_stack, "reviews", "export", "--since", since.isoformat(),
        "--until", since.isoformat(),
    )  # fmt: skip
    assert none.returncode == 0 and none.stdout == ""
