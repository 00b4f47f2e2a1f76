"""Review notifications: a webhook called when a run starts waiting for a reviewer or escalates.

The operator configures one URL (``REVIEW_WEBHOOK_URL``, a secret: a Slack incoming-webhook URL
is a credential) and its format (``REVIEW_WEBHOOK_FORMAT``):

- ``json`` (default): ``{"event", "text", "workflow_id", "run_id", "state", "review_round",
  "reason", "deadline", "inbox_url", "web_ui_url", "idempotency_key"}``; ``deadline`` is ISO
  8601 UTC (null when the run has none), ``inbox_url`` null without ``INBOX_URL``.
- ``slack``: a Slack-compatible ``{"text": ..., "blocks": [...]}`` (a section with the same
  line and link buttons to the inbox and the Web UI), which Slack, Mattermost and Rocket.Chat
  incoming webhooks accept.

A notification carries ids, the round, the deadline and links, never the request or the reply:
the receiver is outside the payload codec. The workflow id is the caller's choice, so wherever
text is rendered (``text``, the Slack section) it appears percent-encoded except for ASCII
letters, digits and ``-`` (`shown_id`): nothing a client puts in it can become Slack mrkdwn or
Markdown (a link, emphasis, ``<!channel>`` or an ``@here`` mention). The JSON ``workflow_id``
field is the id itself, data for the receiver, which must escape it before rendering it; the
links quote it. Every call sends an ``Idempotency-Key`` header (also
in the JSON body), ``<workflow id>:<event>:round-<n>``, the same for every retry of one
notification, so a receiver can drop the copy a retried call may leave.

The workflow starts ``notify_reviewers`` and never waits for it (``workflows.steps``): whatever
happens here, the run goes on. Failures are mapped for Temporal's retry policy
(``activity_policy.NOTIFY_RETRY``): a receiver that is down, slow, 5xx, 408 or 429 (honouring
``Retry-After``) is retried a few times; any other answer outside 2xx, including a redirect
(never followed: the URL is the operator's, a redirect is not), fails for good with the
non-retryable ``NotificationRejected``. Error texts never contain the URL.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import aiohttp
from pydantic import SecretStr
from temporalio import activity
from temporalio.exceptions import ApplicationError

from aiorch_runtime.config import Settings
from aiorch_runtime.links import inbox_run_url, web_ui_run_url
from workflows import contract, errors
from workflows.payloads import ReviewNotice

log = logging.getLogger("ai-orchestrator.notify")

# Shorter than the activity's start-to-close timeout (activity_policy.NOTIFY_TIMEOUT), so a slow
# receiver ends in this activity's own clear error rather than an activity timeout.
HTTP_TIMEOUT: Final = aiohttp.ClientTimeout(total=10, connect=5)
USER_AGENT: Final = "ai-orchestrator-notify/1"
MAX_RETRY_AFTER: Final = timedelta(minutes=2)
_RETRYABLE_STATUSES: Final = frozenset({408, 425, 429})
_HEADLINES: Final = {
    "review_needed": "Review needed",
    "escalated": "Review escalated",
}


def idempotency_key(notice: ReviewNotice) -> str:
    """The same for every attempt of one notification, different for every other."""
    return f"{notice.workflow_id}:{notice.reason}:round-{notice.review_round}"


def shown_id(workflow_id: str) -> str:
    """``workflow_id`` as text a chat app may render: every character but an ASCII letter, a
    digit or ``-`` percent-encoded (UTF-8), so none is markup in Slack mrkdwn or Markdown and
    none starts a mention; the project's own ids (hex) are unchanged."""
    return "".join(
        char if char.isascii() and (char.isalnum() or char == "-") else _percent(char)
        for char in workflow_id
    )


def _percent(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "replace"))


def _deadline_text(deadline: datetime | None) -> str:
    if deadline is None:
        return "no deadline"
    return deadline.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def headline(notice: ReviewNotice) -> str:
    """One line for a person: what happened, which run, until when."""
    what = (
        "waits for a reviewer"
        if notice.reason == "review_needed"
        else "was not reviewed in time and escalated"
    )
    until = "dead-lettered" if notice.reason == "escalated" else "escalated"
    return (
        f"{_HEADLINES[notice.reason]}: run {shown_id(notice.workflow_id)} {what} (round "
        f"{notice.review_round}); {until} at {_deadline_text(notice.deadline)} unless reviewed"
    )


def json_body(notice: ReviewNotice, *, inbox_url: str | None, web_ui_url: str) -> dict[str, Any]:
    """The generic JSON notification."""
    return {
        "event": notice.reason,
        "text": headline(notice),
        "workflow_id": notice.workflow_id,
        "run_id": notice.run_id,
        "state": notice.state,
        "review_round": notice.review_round,
        "reason": _HEADLINES[notice.reason].lower(),
        "deadline": (
            notice.deadline.astimezone(UTC).isoformat().replace("+00:00", "Z")
            if notice.deadline
            else None
        ),
        "inbox_url": inbox_url,
        "web_ui_url": web_ui_url,
        "idempotency_key": idempotency_key(notice),
    }


def _mrkdwn(text: str) -> str:
    """Text safe inside Slack mrkdwn: its three control characters escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(notice: ReviewNotice, *, inbox_url: str | None, web_ui_url: str) -> dict[str, Any]:
    """The Slack-compatible notification: ``text`` (the fallback) and ``blocks``."""
    text = headline(notice)
    link = f" <{inbox_url}|Open it in the review inbox>" if inbox_url else ""
    buttons = [("Review in the inbox", inbox_url), ("Temporal Web UI", web_ui_url)]
    return {
        "text": f"{text}{' ' + inbox_url if inbox_url else ''}",
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*{_mrkdwn(text)}*{link}"},
            },
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": label},
                        "url": url,
                        "action_id": f"aiorch-{index}",
                    }
                    for index, (label, url) in enumerate(buttons)
                    if url
                ],
            },
        ],
    }


def _retry_after(response: aiohttp.ClientResponse) -> timedelta | None:
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(timedelta(seconds=max(seconds, 0.0)), MAX_RETRY_AFTER)


@dataclass(frozen=True)
class Webhook:
    """Where review notifications go (``REVIEW_WEBHOOK_URL``; None: nowhere), in which format
    (``REVIEW_WEBHOOK_FORMAT``), and the links to a run they carry (its inbox page, None
    without ``INBOX_URL``, and its Web UI page)."""

    url: SecretStr | None
    format: Literal["json", "slack"]
    inbox_link: Callable[[str], str | None]
    web_ui_link: Callable[[str], str]


def webhook(settings: Settings) -> Webhook:
    """The review webhook ``settings`` configure."""
    return Webhook(
        url=settings.review_webhook_url,
        format=settings.review_webhook_format,
        inbox_link=functools.partial(inbox_run_url, settings),
        web_ui_link=functools.partial(web_ui_run_url, settings),
    )


class NotifyActivities:
    """The ``notify_reviewers`` activity, with its webhook and HTTP session injected by the
    worker."""

    def __init__(self, hook: Webhook, session: aiohttp.ClientSession) -> None:
        self.webhook = hook
        self._session = session

    def body(self, notice: ReviewNotice) -> dict[str, Any]:
        """The notification for ``notice`` in the configured format."""
        inbox_url = self.webhook.inbox_link(notice.workflow_id)
        web_ui_url = self.webhook.web_ui_link(notice.workflow_id)
        if self.webhook.format == "slack":
            return slack_body(notice, inbox_url=inbox_url, web_ui_url=web_ui_url)
        return json_body(notice, inbox_url=inbox_url, web_ui_url=web_ui_url)

    @activity.defn(name=contract.ACTIVITY_NOTIFY_REVIEWERS)
    async def notify_reviewers(self, notice: ReviewNotice) -> int:
        """POST the notification; returns the receiver's HTTP status.

        Raises:
            ApplicationError: ``NotificationRejected`` (non-retryable) for an answer no retry
                can change, or when this worker has no webhook configured; a retryable one
                for a receiver that is down, slow or overloaded.
        """
        return await self.post(idempotency_key(notice), self.body(notice))

    async def post(self, key: str, body: dict[str, Any]) -> int:
        """POST ``body`` to the webhook with idempotency key ``key`` (what every notification
        does, mapped for Temporal's retries as the module docstring says).

        Raises:
            ApplicationError: as `notify_reviewers`.
        """
        secret = self.webhook.url
        if secret is None:
            raise ApplicationError(
                "REVIEW_WEBHOOK_URL is not set on this worker",
                type=errors.NOTIFICATION_REJECTED,
                non_retryable=True,
            )
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": key,
        }
        try:
            async with self._session.post(
                secret.get_secret_value(),
                data=data,
                headers=headers,
                timeout=HTTP_TIMEOUT,
                allow_redirects=False,
            ) as response:
                status = response.status
                if 200 <= status < 300:
                    log.info("notified the webhook: %s (HTTP %s)", key, status)
                    return status
                if status >= 500 or status in _RETRYABLE_STATUSES:
                    raise ApplicationError(
                        f"review webhook answered HTTP {status}",
                        type=errors.NOTIFICATION_FAILED,
                        next_retry_delay=_retry_after(response),
                    )
        except (TimeoutError, aiohttp.ClientError) as err:
            # Never str(err): it may quote the URL, which is a secret.
            raise ApplicationError(
                f"review webhook unreachable ({type(err).__name__})",
                type=errors.NOTIFICATION_FAILED,
            ) from None
        raise ApplicationError(
            f"review webhook refused the notification (HTTP {status})",
            type=errors.NOTIFICATION_REJECTED,
            non_retryable=True,
        )
