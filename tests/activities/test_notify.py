"""notify_reviewers against a real HTTP receiver (an aiohttp server on loopback): what it sends
in each format, and how each answer maps onto Temporal's retries."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
import pytest
import pytest_asyncio
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.notify import NotifyActivities, shown_id, webhook
from aiorch_runtime.config import Settings
from tests.support.webhooks import Receiver, running_broken_receiver, running_receiver
from workflows import errors
from workflows.payloads import ReviewNotice

WORKFLOW_ID = "0123456789abcdef01234567"
DEADLINE = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
NOTICE = ReviewNotice(
    workflow_id=WORKFLOW_ID,
    run_id="run-1",
    reason="review_needed",
    state="await_review",
    review_round=2,
    deadline=DEADLINE,
)


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running_receiver() as running:
        yield running


def settings(url: str | None, **extra: Any) -> Settings:
    return Settings(
        review_webhook_url=SecretStr(url) if url else None,
        inbox_url="https://inbox.example.com/",
        temporal_ui_url="https://temporal.example.com",
        **extra,
    )


async def notify(config: Settings, notice: ReviewNotice = NOTICE) -> int:
    async with aiohttp.ClientSession() as session:
        activities = NotifyActivities(webhook(config), session)
        return await ActivityEnvironment().run(activities.notify_reviewers, notice)


async def test_json_notification_names_run_reason_deadline_and_links(receiver: Receiver) -> None:
    """The default format is one JSON object with the run, the reason, the deadline (ISO 8601
    UTC) and both links, plus an idempotency key also sent as a header; no content at all."""
    assert await notify(settings(receiver.url)) == 200
    [(headers, body)] = receiver.calls
    assert body == {
        "event": "review_needed",
        "text": body["text"],
        "workflow_id": WORKFLOW_ID,
        "run_id": "run-1",
        "state": "await_review",
        "review_round": 2,
        "reason": "review needed",
        "deadline": "2026-12-01T09:30:00Z",
        "inbox_url": f"https://inbox.example.com/runs/{WORKFLOW_ID}",
        "web_ui_url": f"https://temporal.example.com/namespaces/default/workflows/{WORKFLOW_ID}",
        "idempotency_key": f"{WORKFLOW_ID}:review_needed:round-2",
    }
    assert body["text"].startswith(f"Review needed: run {WORKFLOW_ID} waits for a reviewer")
    assert "2026-12-01 09:30 UTC" in body["text"]
    assert headers["Idempotency-Key"] == body["idempotency_key"]
    assert headers["Content-Type"].startswith("application/json")


async def test_slack_format_has_text_and_blocks_with_link_buttons(receiver: Receiver) -> None:
    """REVIEW_WEBHOOK_FORMAT=slack sends Slack's incoming-webhook shape: a fallback text with
    the inbox link, a mrkdwn section and buttons to the inbox and the Web UI."""
    escalated = NOTICE.model_copy(update={"reason": "escalated", "state": "escalate"})
    await notify(settings(receiver.url, review_webhook_format="slack"), escalated)
    [(_, body)] = receiver.calls
    assert set(body) == {"text", "blocks"}
    inbox = f"https://inbox.example.com/runs/{WORKFLOW_ID}"
    assert body["text"].startswith("Review escalated:") and body["text"].endswith(inbox)
    section, actions = body["blocks"]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert f"<{inbox}|Open it in the review inbox>" in section["text"]["text"]
    assert [button["url"] for button in actions["elements"]] == [
        inbox,
        f"https://temporal.example.com/namespaces/default/workflows/{WORKFLOW_ID}",
    ]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 301])
async def test_a_refusal_is_final_and_never_quotes_the_url(receiver: Receiver, status: int) -> None:
    """4xx (other than 408/425/429) and redirects (never followed) fail for good:
    non-retryable NotificationRejected, with no trace of the URL (a secret) in the message."""
    receiver.answers = [(status, {"Location": "http://elsewhere.example/"})]
    with pytest.raises(ApplicationError) as info:
        await notify(settings(receiver.url))
    assert info.value.type == errors.NOTIFICATION_REJECTED and info.value.non_retryable
    assert f"HTTP {status}" in info.value.message and "secret-path" not in info.value.message
    assert len(receiver.calls) == 1


@pytest.mark.parametrize(("status", "delay"), [(503, None), (429, timedelta(seconds=7))])
async def test_overload_is_retried_honouring_retry_after(
    receiver: Receiver, status: int, delay: timedelta | None
) -> None:
    """5xx and 429 are retryable (NotificationFailed), and a Retry-After sets the next delay."""
    receiver.answers = [(status, {"Retry-After": "7"} if delay else {})]
    with pytest.raises(ApplicationError) as info:
        await notify(settings(receiver.url))
    assert info.value.type == errors.NOTIFICATION_FAILED and not info.value.non_retryable
    assert info.value.next_retry_delay == delay


async def test_a_receiver_that_is_down_is_retryable_and_the_url_stays_secret() -> None:
    """Nothing listening: a retryable NotificationFailed naming the error type, not the URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ApplicationError) as info:
        await notify(settings(f"http://127.0.0.1:{port}/hooks/secret-path"))
    assert info.value.type == errors.NOTIFICATION_FAILED and not info.value.non_retryable
    assert "unreachable" in info.value.message and "secret-path" not in info.value.message


async def test_an_answer_no_client_accepts_is_retryable_and_the_url_stays_secret() -> None:
    """A receiver whose status line is broken makes the HTTP client raise an error whose text
    quotes the URL it called; the notification fails retryably naming only the error's type,
    so the URL (a secret) reaches neither the run's history nor the worker's log."""
    async with running_broken_receiver() as url:
        with pytest.raises(ApplicationError) as info:
            await notify(settings(url))
    assert info.value.type == errors.NOTIFICATION_FAILED and not info.value.non_retryable
    assert info.value.message == "review webhook unreachable (ClientResponseError)"
    assert "secret-path" not in str(info.value) and "127.0.0.1" not in str(info.value)


# A workflow id is whatever the client that started the run chose (the security review's run).
ATTACK_ID = (
    "<!channel> @here *urgent* _now_ `x` ~y~ &amp; [approve here](https://evil.example/login) "
    "<https://evil.example/inbox|Review in the inbox>"
)
MARKUP = set("<>&[]*_`~@|")


@pytest.mark.parametrize("fmt", ["json", "slack"])
async def test_a_workflow_id_puts_no_markup_link_or_mention_into_the_text(
    receiver: Receiver, fmt: str
) -> None:
    """A run whose id is Slack mrkdwn and Markdown (a <!channel> mention, an @here, emphasis,
    a Markdown link and a Slack link to a look-alike page) is announced with that id
    percent-encoded wherever text is rendered: no markup character, no mention and no link of
    the attacker's reaches the receiver, and the id can still be read back. The links to the
    inbox and the Web UI quote it, so it cannot end a Slack link either."""
    notice = NOTICE.model_copy(update={"workflow_id": ATTACK_ID})
    await notify(settings(receiver.url, review_webhook_format=fmt), notice)
    [(_, body)] = receiver.calls
    inbox = f"https://inbox.example.com/runs/{quote(ATTACK_ID, safe='')}"
    texts = [body["text"]]
    if fmt == "slack":
        assert body["text"].endswith(" " + inbox)
        texts = [body["text"].removesuffix(" " + inbox)]
        section = body["blocks"][0]["text"]["text"]
        link = f"<{inbox}|Open it in the review inbox>"
        assert section.startswith("*") and section.endswith(f"* {link}")
        texts.append(section.removesuffix(f"* {link}").removeprefix("*"))
        assert not set(inbox) & {"<", ">", "|", " "}
        assert body["blocks"][1]["elements"][0]["url"] == inbox
    for text in texts:
        assert not MARKUP & set(text), text
        assert "evil.example" not in text and "https:" not in text
        [encoded] = [word for word in text.split() if word.startswith("%3C%21channel")]
        assert unquote(encoded) == ATTACK_ID
    if fmt == "json":
        assert body["workflow_id"] == ATTACK_ID  # data for the receiver, not text to render


async def test_the_projects_own_ids_read_as_they_are(receiver: Receiver) -> None:
    """Ids the project makes (24 hex digits) and plain ones with dashes are shown unchanged."""
    assert shown_id(WORKFLOW_ID) == WORKFLOW_ID
    assert shown_id("order-2026-12") == "order-2026-12"
    assert shown_id("a.b_c d") == "a%2Eb%5Fc%20d"


async def test_a_worker_without_a_webhook_refuses_for_good() -> None:
    """A plan that asks for notifications reaching a worker without REVIEW_WEBHOOK_URL fails
    the notification (non-retryable), never the run."""
    with pytest.raises(ApplicationError) as info:
        await notify(settings(None))
    assert info.value.type == errors.NOTIFICATION_REJECTED and info.value.non_retryable
