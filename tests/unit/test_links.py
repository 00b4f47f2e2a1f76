"""The links to a run (inbox and Web UI) and the settings they and the notifications read."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from aiorch_runtime.config import ConfigError, Settings
from aiorch_runtime.links import inbox_run_url, inbox_start_line, web_ui_run_url


def test_inbox_links_exist_only_with_an_inbox_url() -> None:
    """Without INBOX_URL there is no inbox link (and starter.py prints no inbox line); with
    it, the run's page is INBOX_URL/runs/<id>, a trailing slash or not."""
    assert inbox_run_url(Settings(), "abc") is None
    assert inbox_start_line(Settings(), "abc") is None
    settings = Settings(inbox_url="https://review.example.com/")
    assert inbox_run_url(settings, "abc") == "https://review.example.com/runs/abc"
    assert inbox_start_line(settings, "abc") == "Review inbox: https://review.example.com/runs/abc"


def test_web_ui_links_name_the_namespace_and_quote_what_they_must() -> None:
    """The Web UI link carries the namespace and the workflow id, each URL-quoted."""
    settings = Settings(temporal_ui_url="https://ui.example/", temporal_namespace="team a")
    assert web_ui_run_url(settings, "x/y") == (
        "https://ui.example/namespaces/team%20a/workflows/x%2Fy"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("inbox_url", "ftp://inbox"),
        ("inbox_url", "inbox.example.com"),
        ("review_webhook_url", SecretStr("file:///etc/passwd")),
        ("inbox_user_header", "X Forwarded User"),
        ("review_webhook_format", "teams"),
    ],
)
def test_bad_inbox_and_webhook_settings_are_refused(field: str, value: Any) -> None:
    """A non-http(s) URL, a header name with spaces or an unknown format fails at start."""
    with pytest.raises((ValueError, ConfigError)):
        Settings(**{field: value})


def test_notifications_are_on_only_with_a_webhook_url() -> None:
    """No REVIEW_WEBHOOK_URL (or an empty one): notifications off, no activity planned."""
    assert not Settings().notifications_enabled
    assert not Settings(review_webhook_url=SecretStr("")).notifications_enabled
    assert Settings(review_webhook_url=SecretStr("https://hooks.example/x")).notifications_enabled
