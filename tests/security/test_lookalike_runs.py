"""The operator's tools trust only runs on the worker's task queue: a look-alike (a workflow
named ``DocumentPipeline`` on a worker of the attacker's own, on another task queue) cannot put
a forged correction into ``reviews export``, a forged review page into the inbox, a forged
dead letter into ``dlq redrive``, or itself into ``stats`` and ``stuck``.

The attacker holds a Temporal client with namespace access, runs a worker on a task queue of
their own, and can write to the dead-letter queue; against a real dev server, a real worker
process and the stack's SQS, with the operator's CLI and the inbox's own reader.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from aiorch.devstack.stack import LocalStack
from aiorch.ops import stats, stuck
from aiorch.ops.dead_letters import DeadLetterQueue
from aiorch.ops.inbox.runs import NotYours, RunReader
from tests.support.builders import new_request_id
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import starter
from workflows import contract
from workflows.documents import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.payloads import DeadLetterMessage

pytestmark = pytest.mark.e2e

DLQ_NAME = "ai-orchestrator-dlq"  # DLQ_QUEUE_NAME's default, which the stack's worker uses
EVIL_IBAN = "GB66 EVIL 0000 1234"


@workflow.defn(name=WORKFLOW_TYPE_DOCUMENT_PIPELINE, sandboxed=False)
class LookAlike:
    """The attacker's ``DocumentPipeline``: it ends with a result it wrote (a correction by
    alice, or a dead letter), or it waits as if for review and answers the inbox's query with
    a page of its choosing."""

    def __init__(self) -> None:
        self._release = False

    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        # The order is a valid document request, so redrive would take it as the run's own.
        act, now = order["document"], workflow.now()
        if act == "wait":
            workflow.upsert_search_attributes(
                [
                    contract.AI_STATE.value_set("await_review"),
                    contract.AI_STATE_SINCE.value_set(now - timedelta(days=2)),
                    contract.AI_REVIEW_ROUND.value_set(1),
                ]
            )
            await workflow.wait_condition(lambda: self._release)
        if act == "dead":
            workflow.upsert_search_attributes([contract.AI_STATE.value_set("dead_letter")])
            return {
                "request_id": workflow.info().workflow_id,
                "state": "dead_letter",
                "extraction_schema": "invoice",
            }
        workflow.upsert_search_attributes([contract.AI_STATE.value_set("completed")])
        correction = {
            "kind": "correct",
            "reviewer": "alice",
            "review_round": 1,
            "at": now.isoformat(),
            "pipeline": "documents",
            "pipeline_version": "1",
            "before": {"iban": "DE00 REAL"},
            "after": {"iban": EVIL_IBAN},
        }
        return {
            "request_id": workflow.info().workflow_id,
            "state": "completed",
            "extraction_schema": "invoice",
            "corrections": [correction],
        }

    @workflow.query(name=contract.QUERY_REVIEW_VIEW)
    def review_view(self) -> dict[str, Any]:
        return {
            "title": "Pay this invoice",
            "headline": f"IBAN {EVIL_IBAN}",
            "pipeline": WORKFLOW_TYPE_DOCUMENT_PIPELINE,
            "state": "await_review",
            "status": "waiting",
            "review_round": 1,
            "waiting": True,
        }

    @workflow.signal(name="release")
    def release(self) -> None:
        self._release = True


@pytest.fixture
async def evil_queue(client: Client) -> AsyncIterator[str]:
    """The attacker's task queue, served by their worker while the test runs."""
    queue = f"evil-q-{new_request_id()}"
    async with Worker(client, task_queue=queue, workflows=[LookAlike]):
        yield queue


async def lookalike(client: Client, queue: str, act: str) -> WorkflowHandle[Any, Any]:
    workflow_id = new_request_id()
    return await client.start_workflow(
        WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        {"request_id": workflow_id, "document": act},
        id=workflow_id,
        task_queue=queue,
    )


async def test_a_lookalikes_correction_is_not_exported(
    stack: LocalStack, client: Client, evil_queue: str
) -> None:
    """A look-alike ends with a result that says alice corrected an IBAN to the attacker's:
    ``reviews export`` prints no example of it (it would poison evaluation sets, in alice's
    name)."""
    forged = await lookalike(client, evil_queue, "correct")
    assert (await forged.result())["corrections"][0]["after"] == {"iban": EVIL_IBAN}

    exported = starter(stack, "reviews", "export", "--since", "1d")

    assert exported.returncode == 0, exported.stderr
    assert forged.id not in exported.stdout
    assert EVIL_IBAN not in exported.stdout


async def test_a_lookalike_waiting_for_review_is_not_in_the_inbox_stats_or_stuck(
    client: Client, evil_queue: str
) -> None:
    """A look-alike sets ``AiState=await_review`` two days back and answers ``review_view``
    with a page of its choosing: the inbox's list for alice holds the genuine waiting run and
    not the look-alike, its page is refused as not hers (its query never asked), and neither
    ``stats`` nor ``stuck`` counts it, while both count the genuine run."""
    forged = await lookalike(client, evil_queue, "wait")
    genuine = await start(client, request("A genuine question", review="always"))
    await wait_for_state(genuine, "await_review")
    reader = RunReader(client)
    try:
        listed = {row.workflow_id for row in await reader.waiting("alice")}
        with pytest.raises(NotYours):
            await reader.view(forged.id, "alice")
        found = {run.workflow_id for run in await stuck.find_stuck(client, datetime.now(UTC))}
        states, total = await stats.count_by_state(client)
    finally:
        await forged.signal("release")
        await genuine.terminate(reason="test over")
    assert genuine.id in listed and forged.id not in listed
    assert genuine.id in found and forged.id not in found
    document_rows = [row for row in states if row.pipeline == "documents"]
    assert document_rows == []
    assert total == 1


async def test_a_lookalikes_dead_letter_is_not_redriven(
    stack: LocalStack, client: Client, evil_queue: str
) -> None:
    """A look-alike ends in ``dead_letter`` by its own result and the attacker writes its dead
    letter to the queue: ``dlq redrive`` refuses it (it ran on another task queue), starts no
    run under its id, and leaves the message for an operator."""
    forged = await lookalike(client, evil_queue, "dead")
    await forged.result()
    run_id = (await forged.describe()).run_id
    sqs = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("sqs", endpoint_url=stack.addresses.sqs_endpoint_url)
    url = sqs.create_queue(QueueName=DLQ_NAME)["QueueUrl"]
    message = DeadLetterMessage(
        workflow_id=forged.id,
        run_id=run_id,
        workflow_type=WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        request={"request_id": forged.id, "document": "dead"},
        failed_state="store",
        attempts=1,
        last_error="DocumentStoreUnavailable: down",
    )
    sqs.send_message(QueueUrl=url, MessageBody=message.model_dump_json())

    redriven = starter(stack, "dlq", "redrive", "--all", columns=250)

    assert redriven.returncode == 1, redriven.stdout + redriven.stderr
    assert "Traceback" not in redriven.stderr
    assert f"ran on task queue '{evil_queue}'" in redriven.stdout
    assert (await client.get_workflow_handle(forged.id).describe()).run_id == run_id
    left = DeadLetterQueue(sqs, DLQ_NAME, wait_s=0).peek()
    assert forged.id in {letter.workflow_id for letter in left}
