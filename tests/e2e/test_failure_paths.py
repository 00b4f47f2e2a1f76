"""Failure paths end to end: throttling, server errors, bad replies, outages, crashes, dead
letters, redrive and cancellation.

Everything is real: the dev server, worker processes, moto's SQS and the LLM simulator over
HTTP. Tests that stop or kill a server take a private stack. Real waits here are for real
processes (a Retry-After, a heartbeat timeout, a server restart), never for a Temporal timer
that a time-skipping test could skip.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest
from qdrant_client import models
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from activities.prompt import CORRECTIVE_INSTRUCTION
from activities.vectors import embedded_store
from aiorch.devstack.stack import LocalStack
from aiorch.ops.dead_letters import DeadLetter, DeadLetterQueue
from aiorch.ops.results import finished
from aiorch_runtime.config import load_settings
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support.history_events import scheduled_activities
from tests.support.live_runs import llm_call_key, request, start, status_of, wait_for_state
from tests.support.live_stack import starter
from tests.support.reviewing import signed
from tests.support.simulator import Simulator
from workflows import contract
from workflows.payloads import DeadLetterMessage, RunStatus

pytestmark = [pytest.mark.e2e, pytest.mark.long]

QUEUE_NAME = "ai-orchestrator-dlq"  # DLQ_QUEUE_NAME's default, which the stacks' workers use


# Helpers.


def dead_letter_queue(stack: LocalStack) -> DeadLetterQueue:
    """The stack's dead-letter queue, read the way ``starter.py dlq`` reads it."""
    sqs = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("sqs", endpoint_url=stack.addresses.sqs_endpoint_url)
    return DeadLetterQueue(sqs, QUEUE_NAME, wait_s=0)


def letters_for(queue: DeadLetterQueue, workflow_id: str) -> list[DeadLetter]:
    return [letter for letter in queue.peek() if letter.workflow_id == workflow_id]


def remove_letters(queue: DeadLetterQueue, workflow_id: str) -> None:
    """Delete this run's messages from a shared queue, leaving the others visible."""
    letters = queue.receive_all(timedelta(seconds=30))
    for letter in letters:
        if letter.workflow_id == workflow_id:
            queue.delete(letter)
    queue.release([letter for letter in letters if letter.workflow_id != workflow_id])


def cut_request_in_message(stack: LocalStack, queue: DeadLetterQueue, workflow_id: str) -> None:
    """Replace the run's message by one whose request was cut, as one too large for SQS is."""
    letters = queue.receive_all(timedelta(seconds=30))
    [letter] = [x for x in letters if x.workflow_id == workflow_id]
    assert letter.body is not None
    cut = letter.body.model_copy(
        update={"request": {"request_id": workflow_id, "truncated": "request too large"}}
    )
    sqs = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("sqs", endpoint_url=stack.addresses.sqs_endpoint_url)
    url = sqs.get_queue_url(QueueName=QUEUE_NAME)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=cut.model_dump_json())
    queue.delete(letter)
    queue.release([x for x in letters if x is not letter])


async def wait_until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.05)


def in_flight(simulator: Simulator, run_id: str, path: str) -> Callable[[], bool]:
    """A check: the simulator has an unanswered ``path`` request of this run."""
    return lambda: any(
        r["path"] == path and r["status"] is None for r in simulator.requests(run_id)
    )


async def pending_activity(handle: WorkflowHandle[Any, Any], name: str) -> Any:
    """The pending activity ``name`` as the Web UI shows it (attempt, last failure), or None."""
    description = await handle.describe()
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == name:
            return pending
    return None


async def vectors_of(stack: LocalStack, workflow_id: str) -> int:
    """Points stored for ``workflow_id``. The embedded store is locked by the worker: stop the
    worker first."""
    assert "worker" not in stack.processes or not stack.processes["worker"].is_running()
    store = embedded_store(stack.addresses.vector_store_path)
    try:
        collection = load_settings().vector_collection
        if not await store.collection_exists(collection):
            return 0
        counted = await store.count(
            collection,
            count_filter=models.Filter(
                must=[
                    models.FieldCondition(
                        key="workflow_id", match=models.MatchValue(value=workflow_id)
                    )
                ]
            ),
            exact=True,
        )
        return counted.count
    finally:
        await store.close()


async def expect_cancelled(handle: WorkflowHandle[Any, Any], timeout: float = 30.0) -> RunStatus:
    """Wait for the run to end Cancelled; return its final status (queried after close)."""
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout)
    assert isinstance(info.value.cause, CancelledError), repr(info.value.cause)
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.CANCELED
    return await status_of(handle)


@pytest.fixture
async def private_client(private_stack: LocalStack) -> Client:
    return await Client.connect(
        private_stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )


@pytest.fixture
def private_simulator(private_stack: LocalStack) -> Simulator:
    return Simulator(private_stack.addresses.openai_base_url)


# The LLM provider's errors.


async def test_rate_limit_waits_at_least_retry_after(client: Client, simulator: Simulator) -> None:
    """429 with Retry-After: 2, twice, then success: the run completes, each retry came at least
    2 s after the throttled call (the worker's own backoff is capped at 1 s, so the floor is the
    provider's), and history has two retry_llm entries."""
    handle = await start(client, request("Throttled [sim:status=429:retry_after=2:times=2]"))

    result = await finished(handle)

    assert result.state == "completed"
    chats = simulator.chat_requests(handle.id)
    assert [chat["status"] for chat in chats] == [429, 429, 200]
    gaps = [later["at"] - earlier["at"] for earlier, later in itertools.pairwise(chats)]
    print(f"Retry-After 2 s: gaps between attempts {[f'{gap:.2f}' for gap in gaps]} s")
    assert all(gap >= 2.0 for gap in gaps), gaps
    retries = [entry for entry in result.history if entry.to_state == "retry_llm"]
    assert len(retries) == 2
    assert all((entry.detail or "").startswith("LlmRateLimited: HTTP 429") for entry in retries)
    waits = [entry.detail for entry in result.history if entry.event == "backoff_elapsed"]
    assert waits == ["waited 2.00s", "waited 2.00s"]
    status = await status_of(handle)
    assert status.attempts == 3
    assert [chat["idempotency_key"] for chat in chats] == [
        await llm_call_key(handle, attempt) for attempt in (1, 2, 3)
    ]


async def test_server_errors_fall_back_then_dead_letter(
    client: Client, simulator: Simulator, stack: LocalStack
) -> None:
    """5xx on every call: after LLM_FALLBACK_AFTER (2) failures the calls go to the fallback
    model; when both keep failing the run ends dead_letter with exactly one SQS message whose
    body is the contract's and whose attempts equal the run's llm_max_attempts (4)."""
    payload = request("Always down [sim:status=503]", options={"llm_max_attempts": 4})
    handle = await start(client, payload)
    queue = dead_letter_queue(stack)
    try:
        result = await finished(handle)

        assert result.state == "dead_letter"
        chats = simulator.chat_requests(handle.id)
        assert [chat["model"] for chat in chats] == ["sim-large"] * 2 + ["sim-small"] * 2
        assert [chat["status"] for chat in chats] == [503] * 4
        [letter] = letters_for(queue, handle.id)
        assert letter.problem is None and letter.body is not None
        dead = DeadLetterMessage.model_validate(letter.body.model_dump(mode="json"))
        assert dead.run_id == (await handle.describe()).run_id
        assert (dead.failed_state, dead.attempts) == ("invoke_llm", 4)
        assert dead.request["request_id"] == payload["request_id"]
        assert dead.request["user_message"] == payload["user_message"]
        assert (dead.last_error or "").startswith("LlmRetryable: HTTP 503")
        assert dead.history == result.history[:-1]
        status = await status_of(handle)
        assert (status.state, status.status, status.attempts) == ("dead_letter", "Failed", 4)
    finally:
        remove_letters(queue, handle.id)


async def test_permanent_400_fails_after_one_call(client: Client, simulator: Simulator) -> None:
    """A 400 is permanent: one call, the run ends failed, last_error says why."""
    handle = await start(client, request("Bad request [sim:status=400]"))

    result = await finished(handle)

    assert result.state == "failed"
    assert len(simulator.chat_requests(handle.id)) == 1
    status = await status_of(handle)
    assert status.last_error is not None
    assert status.last_error.startswith("LlmPermanent: HTTP 400 from the LLM")
    assert [entry.event for entry in result.history][-1] == "permanent_error"


async def test_malformed_reply_is_retried_with_a_correction(
    client: Client, simulator: Simulator
) -> None:
    """A reply that is not the contract's JSON is retried, and the retry carries the corrective
    instruction; the run then completes."""
    handle = await start(client, request("Be sloppy once [sim:malformed:times=1]"))

    result = await finished(handle)

    assert result.state == "completed"
    first, second = simulator.chat_requests(handle.id)
    assert first["fault"] == "malformed" and second["fault"] is None
    first_texts = [message["content"] for message in first["messages"]]
    second_texts = [message["content"] for message in second["messages"]]
    assert CORRECTIVE_INSTRUCTION not in first_texts
    assert second_texts[-1] == CORRECTIVE_INSTRUCTION
    retry = next(entry for entry in result.history if entry.to_state == "retry_llm")
    assert (retry.detail or "").startswith("LlmMalformedReply")


# Outages and crashes.


async def test_dead_letter_waits_for_sqs_to_come_back(
    private_stack: LocalStack, private_client: Client
) -> None:
    """SQS stops while a run is dead-lettering: the send keeps retrying (visible as the pending
    activity's attempts and last failure) and the run ends dead_letter only after SQS is back,
    with exactly one message in the (recreated) queue."""
    queue = dead_letter_queue(private_stack)
    # A first dead letter, so the worker has the queue's URL cached when SQS restarts empty.
    first = await start(
        private_client, request("Down before [sim:status=503]", options={"llm_max_attempts": 1})
    )
    assert (await finished(first)).state == "dead_letter"
    private_stack.stop_sqs()
    handle = await start(
        private_client, request("Down during [sim:status=503]", options={"llm_max_attempts": 2})
    )

    deadline = time.monotonic() + 30
    while (
        pending := await pending_activity(handle, contract.ACTIVITY_SEND_DEAD_LETTER)
    ) is None or (pending.attempt < 3):
        assert time.monotonic() < deadline, "send_dead_letter never retried"
        await asyncio.sleep(0.2)
    assert "Could not connect to the endpoint URL" in pending.last_failure.message
    assert (await status_of(handle)).state == "retry_llm"
    sqs_back_at = time.time()
    private_stack.start_sqs()

    result = await asyncio.wait_for(finished(handle), 60)

    assert result.state == "dead_letter"
    description = await handle.describe()
    assert description.close_time is not None
    assert description.close_time.timestamp() > sqs_back_at
    assert result.history[-1].at.timestamp() > sqs_back_at
    [letter] = queue.peek()
    assert letter.workflow_id == handle.id
    assert letter.body is not None and letter.body.attempts == 2
    print(
        f"SQS outage: send_dead_letter failed {pending.attempt - 1}+ times; run closed "
        f"{description.close_time.timestamp() - sqs_back_at:.1f}s after SQS was started again"
    )


async def test_worker_killed_during_hanging_call_completes_with_one_vector(
    private_stack: LocalStack, private_client: Client, private_simulator: Simulator
) -> None:
    """The worker is SIGKILLed while the LLM call hangs; a new worker takes over: the hung
    attempt times out on its heartbeat, the retry succeeds, and the store holds exactly one
    vector for the run."""
    handle = await start(private_client, request("Hang once [sim:hang=60:times=1]"))
    await wait_until(in_flight(private_simulator, handle.id, "chat"), "the hanging call")

    private_stack.kill_worker()
    killed_at = time.monotonic()
    private_stack.start_worker()
    result = await asyncio.wait_for(finished(handle), 45)
    took = time.monotonic() - killed_at

    assert result.state == "completed"
    assert len(private_simulator.chat_requests(handle.id)) == 2
    retry = next(entry for entry in result.history if entry.to_state == "retry_llm")
    assert retry.detail == "Timeout: activity timed out (HEARTBEAT)"
    embeddings = [r for r in private_simulator.requests(handle.id) if r["path"] == "embeddings"]
    assert len(embeddings) == 1
    private_stack.processes["worker"].stop()
    assert await vectors_of(private_stack, handle.id) == 1
    print(f"worker SIGKILL: run completed {took:.1f}s after the kill")


async def test_runs_in_flight_survive_a_dev_server_restart(
    private_stack: LocalStack, private_client: Client, private_simulator: Simulator
) -> None:
    """The dev server stops mid-run and starts again on the same SQLite file. Runs waiting for
    review, in a slow LLM call and in a Retry-After backoff all reach their expected end."""
    client = private_client
    approve = await start(client, request("Approve me after", review="always"))
    reject = await start(client, request("Reject me after", review="always"))
    slow = [await start(client, request(f"Slow {n} [sim:delay_ms=4000]")) for n in range(2)]
    backoff = await start(client, request("Wait [sim:status=429:retry_after=4:times=1]"))
    await wait_for_state(approve, "await_review")
    await wait_for_state(reject, "await_review")
    for handle in slow:
        await wait_until(in_flight(private_simulator, handle.id, "chat"), "a slow call")
    await wait_for_state(backoff, "retry_llm")

    stopped_at = time.monotonic()
    private_stack.restart_temporal()
    down_for = time.monotonic() - stopped_at

    await approve.signal(
        contract.SIGNAL_REVIEW, await signed(approve, private_stack.reviewer_key, "approve", "ann")
    )
    await reject.signal(
        contract.SIGNAL_REVIEW, await signed(reject, private_stack.reviewer_key, "reject", "bob")
    )
    expected = {approve.id: "completed", reject.id: "failed", backoff.id: "completed"}
    expected.update({handle.id: "completed" for handle in slow})
    handles = [approve, reject, backoff, *slow]
    results = await asyncio.wait_for(asyncio.gather(*(finished(h) for h in handles)), 60)
    assert {h.id: r.state for h, r in zip(handles, results, strict=True)} == expected
    print(f"dev server restart: down for {down_for:.1f}s; all {len(handles)} runs finished")


# Dead letters, from the operator's side.


async def test_dlq_list_and_redrive(
    private_stack: LocalStack, private_client: Client, private_simulator: Simulator
) -> None:
    """Three runs dead-letter while the LLM is down. `dlq list` names them and consumes
    nothing; with the LLM healthy again, `dlq redrive ID` starts that run anew (same id, new
    run, fresh attempt budget) and completes it, deleting only its message; `dlq redrive --all`
    does the rest, taking each request from the run's own history (also where the message's
    copy was cut to fit SQS), and the queue is empty."""
    private_simulator.set_fault({"status": 503, "path": "chat"})
    options = {"llm_max_attempts": 2}
    first = await start(private_client, request("Redrive me first", options=options))
    second = await start(private_client, request("Redrive me second", options=options))
    third = await start(private_client, request("Redrive me third", options=options))
    runs = (first, second, third)
    for handle in runs:
        assert (await finished(handle)).state == "dead_letter"
    dead_runs = {h.id: (await h.describe()).run_id for h in runs}
    queue = dead_letter_queue(private_stack)
    cut_request_in_message(private_stack, queue, third.id)

    for _ in range(2):  # listing twice shows the same: nothing was consumed
        listed = starter(private_stack, "dlq", "list")
        assert listed.returncode == 0, listed.stderr
        for handle in runs:
            line = next(line for line in listed.stdout.splitlines() if handle.id in line)
            assert "invoke_llm" in line and " 2 " in line and "LlmRetryable: HTTP 503" in line
        assert f"3 dead letter(s) in the queue '{QUEUE_NAME}'" in listed.stdout
    as_json = json.loads(starter(private_stack, "dlq", "list", "--json").stdout)
    assert sorted((x["workflow_id"], x["run_id"], x["attempts"]) for x in as_json) == sorted(
        (h.id, dead_runs[h.id], 2) for h in runs
    )
    assert as_json[-1]["workflow_id"] == third.id  # oldest first: third's was sent again last
    assert all(0 <= x["age_s"] < 120 for x in as_json)
    private_simulator.clear_faults()

    redriven = starter(private_stack, "dlq", "redrive", first.id)

    assert redriven.returncode == 0, redriven.stderr
    assert f"{first.id}: started run" in redriven.stdout
    assert f"{first.id}: deleted message" in redriven.stdout
    assert "1 started, 0 already redriven, 0 refused, 0 skipped, 0 failed" in redriven.stdout
    new_first = private_client.get_workflow_handle(first.id)
    result = await finished(new_first)
    assert result.state == "completed"
    assert (await new_first.describe()).run_id != dead_runs[first.id]
    assert (await status_of(new_first)).attempts == 1
    old = private_client.get_workflow_handle(first.id, run_id=dead_runs[first.id])
    assert (await finished(old)).state == "dead_letter"  # the old run stays as it was
    assert [letter.workflow_id for letter in queue.peek()] == [second.id, third.id]

    rest = starter(private_stack, "dlq", "redrive", "--all")

    assert rest.returncode == 0, rest.stderr
    assert "2 started, 0 already redriven, 0 refused, 0 skipped, 0 failed" in rest.stdout
    for handle in (second, third):
        assert f"{handle.id}: started run" in rest.stdout
        assert (await finished(private_client.get_workflow_handle(handle.id))).state == (
            "completed"
        )
    answered = [c for c in private_simulator.chat_requests(third.id) if c["status"] == 200]
    assert "Redrive me third" in answered[-1]["messages"][1]["content"]
    assert queue.peek() == []
    again = starter(private_stack, "dlq", "list")
    assert "0 dead letter(s)" in again.stdout


# Cancellation.


async def test_cancel_during_embedding_leaves_no_vector(
    private_stack: LocalStack, private_client: Client, private_simulator: Simulator
) -> None:
    """`starter.py cancel` during a slow embedding call ends the run Cancelled with the
    compensation (delete_embedding) recorded, and no vector survives, not even once the slow
    call has answered: the cancel reaches the activity with a heartbeat's answer (sent at most
    every 8 s) while the 14 s call is in flight, so nothing was written and nothing is deleted.
    A cancel that lands while the vector is being written (call shorter than the first
    heartbeat) lets the write finish and the compensation deletes that vector."""
    private_simulator.set_fault({"path": "embeddings", "delay_ms": 14_000, "times": 1})
    slow = await start(private_client, request("Cancel me while embedding"))
    await wait_until(in_flight(private_simulator, slow.id, "embeddings"), "the embedding call")

    cancelled = starter(private_stack, "cancel", slow.id)

    assert cancelled.returncode == 0, cancelled.stderr
    status = await expect_cancelled(slow)
    last = status.history[-1]
    assert (last.from_state, last.event, last.to_state) == (
        "generate_embedding",
        "cancel",
        "cancelled",
    )
    assert last.detail == "compensation: deleted 0 vector(s)"
    assert (await scheduled_activities(slow))[-1] == contract.ACTIVITY_DELETE_EMBEDDING

    private_simulator.clear_faults()
    private_simulator.set_fault({"path": "embeddings", "delay_ms": 1500, "times": 1})
    written = await start(private_client, request("Cancel me while writing"))
    await wait_until(in_flight(private_simulator, written.id, "embeddings"), "the embedding call")
    await written.cancel()
    status = await expect_cancelled(written)
    assert status.history[-1].detail == "compensation: deleted 1 vector(s)"

    # A drained worker exits once every activity it holds has ended (WORKER_SHUTDOWN_GRACE,
    # 30 s, is longer than the slow call): had the cancel not stopped the call, it would
    # answer and be written before the exit. SIGKILL (the stop's timeout) would hide that.
    worker = private_stack.processes["worker"]
    worker.stop(timeout=60)
    assert worker.returncode == 0
    assert await vectors_of(private_stack, slow.id) == 0
    assert await vectors_of(private_stack, written.id) == 0


async def test_cancel_during_hanging_llm_call_ends_promptly(
    stack: LocalStack, client: Client, simulator: Simulator
) -> None:
    """`starter.py cancel` while the LLM call hangs ends the run Cancelled within seconds,
    with no compensation needed (nothing was written)."""
    handle = await start(client, request("Hang forever [sim:hang]"))
    await wait_until(in_flight(simulator, handle.id, "chat"), "the hanging call")

    cancelled = starter(stack, "cancel", handle.id)
    status = await expect_cancelled(handle)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"cancellation requested for {handle.id}" in cancelled.stdout

    # Promptly by the server's own clock, from the cancel request it recorded to the close (the
    # CLI's start-up under a loaded machine is not the run's), and before the call's own
    # timeout could play a part (LLM_TIMEOUT_S=20): no attempt timed out, none was retried.
    events = (await handle.fetch_history()).events
    requested = next(
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
    )
    took = events[-1].event_time.ToDatetime() - requested.event_time.ToDatetime()
    print(f"cancel during a hanging LLM call: closed {took.total_seconds():.1f}s after the request")
    assert took < timedelta(seconds=10)
    assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT]
    assert [r["path"] for r in simulator.requests(handle.id)].count("chat") == 1
    last = status.history[-1]
    assert (last.from_state, last.event, last.detail) == (
        "invoke_llm",
        "cancel",
        "no side effects to undo",
    )
    assert contract.ACTIVITY_DELETE_EMBEDDING not in await scheduled_activities(handle)
