"""Review notifications, attacked through the one thing a client chooses that they carry: the
workflow id. The worker posts Slack-format notifications to a receiver in the test (Slack,
Mattermost and Rocket.Chat render ``text`` as mrkdwn or Markdown); the attacker holds only a
Temporal client and starts a run whose id is a channel-wide mention and a phishing link."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from tests.support.builders import new_request_id
from tests.support.live_runs import request, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, stack_with_worker
from tests.support.webhooks import HOOK_PATH, Receiver, running_receiver
from workflows import contract, errors

pytestmark = pytest.mark.e2e

# The security review's run id, verbatim, plus an @here (a mention Mattermost expands).
ATTACK_ID = (
    "<!channel> @here [approve here](https://evil.example/login) "
    "<https://evil.example/inbox|Review in the inbox>"
)


@pytest.fixture(scope="module")
def receiver_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, receiver_port: int) -> Iterator[LocalStack]:
    env = {
        **E2E_WORKER_ENV,
        "REVIEW_WEBHOOK_URL": f"http://127.0.0.1:{receiver_port}{HOOK_PATH}",
        "REVIEW_WEBHOOK_FORMAT": "slack",
        "INBOX_URL": "https://inbox.example.com",
    }
    yield from stack_with_worker(tmp_path_factory.mktemp("notification-text"), env)


@pytest.fixture
async def receiver(receiver_port: int) -> AsyncIterator[Receiver]:
    async with running_receiver(receiver_port) as running:
        yield running


async def first_notice(receiver: Receiver) -> dict[str, Any]:
    for _ in range(100):
        if receiver.bodies:
            body: dict[str, Any] = receiver.bodies[0]
            return body
        await asyncio.sleep(0.1)
    raise AssertionError("no notification arrived within 10 s")


async def test_a_run_id_cannot_mention_the_channel_or_plant_a_link(
    stack: LocalStack, client: Client, receiver: Receiver
) -> None:
    """A run started by a plain client with the id ``<!channel> @here [approve here](...)
    <https://evil.example/inbox|...>`` fails at once (a run's id must be its request id) and
    posts nothing, while a run under its own id, asking for the same review, is announced: the
    id never reaches the channel. (Should an id with markup ever reach the activity, its text
    is percent-encoded: ``tests/activities/test_notify.py``.)"""
    payload = request("Quarterly summary", review="always", request_id=new_request_id())
    attack = await client.start_workflow(
        contract.WORKFLOW_TYPE, payload, id=ATTACK_ID, task_queue=contract.DEFAULT_TASK_QUEUE
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(attack.result(), 30)
    assert errors.INVALID_REQUEST in str(failed.value.cause)
    honest = await client.start_workflow(
        contract.WORKFLOW_TYPE,
        payload,
        id=payload["request_id"],
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    await wait_for_state(honest, "await_review")
    body = await first_notice(receiver)
    assert len(receiver.bodies) == 1
    assert payload["request_id"] in body["text"]
    assert "evil.example" not in json.dumps(receiver.bodies)
    await honest.terminate("the attack is over")
