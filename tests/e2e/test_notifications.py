"""Review notifications end to end: a worker with REVIEW_WEBHOOK_URL calls a local webhook
receiver (an aiohttp server in the test) once per review wait and once per escalation, with the
inbox link; with the receiver down, runs still complete."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from tests.support.history_events import scheduled_activities
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker
from tests.support.reviewing import signed
from tests.support.webhooks import HOOK_PATH, Receiver, running_receiver
from workflows import contract

pytestmark = pytest.mark.e2e

INBOX_URL = "https://inbox.example.com"


@pytest.fixture(scope="module")
def receiver_port() -> int:
    """The receiver's port, picked when the stack starts (a port picked at import could be
    taken by the time the module's tests run)."""
    return free_port()


@pytest.fixture(scope="module")
def notifying_stack(
    tmp_path_factory: pytest.TempPathFactory, receiver_port: int
) -> Iterator[LocalStack]:
    """A stack whose worker notifies the receiver's fixed address."""
    env = {
        **E2E_WORKER_ENV,
        "REVIEW_WEBHOOK_URL": f"http://127.0.0.1:{receiver_port}{HOOK_PATH}",
        "INBOX_URL": INBOX_URL,
    }
    yield from stack_with_worker(tmp_path_factory.mktemp("notify-stack"), env)


@pytest.fixture(scope="module")
async def notify_client(notifying_stack: LocalStack) -> Client:
    return await connect(notifying_stack)


@pytest.fixture
async def receiver(receiver_port: int) -> AsyncIterator[Receiver]:
    async with running_receiver(receiver_port) as running:
        yield running


async def notices_for(receiver: Receiver, workflow_id: str, count: int) -> list[dict[str, object]]:
    """The notifications about ``workflow_id`` once ``count`` have arrived (10 s at most)."""
    for _ in range(100):
        found = [body for body in receiver.bodies if body["workflow_id"] == workflow_id]
        if len(found) >= count:
            return found
        await asyncio.sleep(0.1)
    return [body for body in receiver.bodies if body["workflow_id"] == workflow_id]


async def test_one_notification_per_review_wait_and_per_escalation(
    notifying_stack: LocalStack, notify_client: Client, receiver: Receiver
) -> None:
    """A run that waits for review is announced once (review_needed, round 1, its deadline,
    the inbox link); when its short review timeout expires it is announced once more
    (escalated); approving it completes the run and announces nothing else."""
    payload = request("Summarise the incident", review="always", options={"review_timeout_s": 2})
    handle = await start(notify_client, payload)
    await wait_for_state(handle, "await_review")
    [needed] = await notices_for(receiver, handle.id, 1)
    assert needed["event"] == "review_needed" and needed["review_round"] == 1
    assert needed["inbox_url"] == f"{INBOX_URL}/runs/{handle.id}"
    assert isinstance(needed["deadline"], str) and needed["deadline"].endswith("Z")

    await wait_for_state(handle, "escalate")
    notices = await notices_for(receiver, handle.id, 2)
    assert [n["event"] for n in notices] == ["review_needed", "escalated"]
    assert notices[1]["inbox_url"] == f"{INBOX_URL}/runs/{handle.id}"
    assert notices[1]["deadline"] != needed["deadline"]

    review = await signed(handle, notifying_stack.reviewer_key, "approve", "alice")
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, review)
    assert (await handle.result())["state"] == "completed"
    # Nothing more is on its way: the closed run's history holds two notifications, both
    # completed (so neither is retried), and the receiver got those two.
    history = (await handle.fetch_history()).events
    notify_ids = {
        event.event_id
        for event in history
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name
        == contract.ACTIVITY_NOTIFY_REVIEWERS
    }
    completed = {
        event.activity_task_completed_event_attributes.scheduled_event_id
        for event in history
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    }
    assert len(notify_ids) == 2 and notify_ids <= completed
    assert len([b for b in receiver.bodies if b["workflow_id"] == handle.id]) == 2
    keys = [headers["Idempotency-Key"] for headers, _ in receiver.calls]
    assert len(keys) == len(set(keys))


async def test_runs_complete_while_the_receiver_is_down(
    notifying_stack: LocalStack, notify_client: Client
) -> None:
    """With nothing listening at the webhook's address, a run that waits for review is
    reviewed and completes as usual: the failing notification holds nothing up."""
    handle = await start(notify_client, request("Draft the memo", review="always"))
    await wait_for_state(handle, "await_review")
    review = await signed(handle, notifying_stack.reviewer_key, "approve", "alice")
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, review)
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result["state"] == "completed"
    assert [entry["event"] for entry in result["history"]][-2:] == ["approve", "embedded"]
    # It did try: the notification is in the run's history, failing on its own.
    assert contract.ACTIVITY_NOTIFY_REVIEWERS in await scheduled_activities(handle)
