"""Review notifications, attacked through the one thing a client chooses that they carry: the
workflow id. The worker posts Slack-format notifications to a receiver in the test (Slack,
Mattermost and Rocket.Chat render ``text`` as mrkdwn or Markdown); the attacker holds only a
Temporal client and starts a run whose id is a channel-wide mention and a phishing link."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import unquote

import pytest
from temporalio.client import Client

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from tests.e2e.conftest import new_id, request, wait_for_state
from tests.live import E2E_WORKER_ENV, stack_with_worker
from tests.webhooks import HOOK_PATH, Receiver, running_receiver
from workflows import contract

pytestmark = pytest.mark.e2e

# The security review's run id, verbatim, plus an @here (a mention Mattermost expands).
ATTACK_ID = (
    "<!channel> @here [approve here](https://evil.example/login) "
    "<https://evil.example/inbox|Review in the inbox>"
)
MARKUP = set("<>&[]*_`~@|")


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
    <https://evil.example/inbox|...>`` waits for review; the Slack notification the receiver
    gets shows that id percent-encoded in its text and its section, so no mention fires and no
    link of the attacker's is drawn, and the buttons still lead to the run's inbox page."""
    payload = request("Quarterly summary", review="always", request_id=new_id())
    handle = await client.start_workflow(
        contract.WORKFLOW_TYPE, payload, id=ATTACK_ID, task_queue=contract.DEFAULT_TASK_QUEUE
    )
    await wait_for_state(handle, "await_review")
    body = await first_notice(receiver)
    section = body["blocks"][0]["text"]["text"]
    inbox_button = body["blocks"][1]["elements"][0]["url"]
    assert unquote(inbox_button) == f"https://inbox.example.com/runs/{ATTACK_ID}"
    headline = body["text"].removesuffix(" " + inbox_button)
    shown = section.removesuffix(f"* <{inbox_button}|Open it in the review inbox>")
    for text in (headline, shown.removeprefix("*")):
        assert not MARKUP & set(text), text
        assert "evil.example" not in text
        [encoded] = [word for word in text.split() if word.startswith("%3C%21channel")]
        assert unquote(encoded) == ATTACK_ID
    assert not set(inbox_button) & {"<", ">", "|", " "}
    await handle.terminate("the attack is over")
