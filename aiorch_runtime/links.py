"""The links people follow to a run: its page in the review inbox and in the Temporal Web UI.

Built from settings only (``INBOX_URL``, ``TEMPORAL_UI_URL``, ``TEMPORAL_NAMESPACE``), so the
starter, the worker's notifications and the inbox itself print the same addresses.
"""

from __future__ import annotations

from urllib.parse import quote

from aiorch_runtime.config import Settings


def inbox_run_url(settings: Settings, workflow_id: str) -> str | None:
    """The run's page in the review inbox, or None when ``INBOX_URL`` is not set."""
    if not settings.inbox_url:
        return None
    return f"{settings.inbox_url}/runs/{quote(workflow_id, safe='')}"


def inbox_start_line(settings: Settings, workflow_id: str) -> str | None:
    """The line ``starter.py start`` prints under the Web UI link, or None without an inbox."""
    url = inbox_run_url(settings, workflow_id)
    return f"Review inbox: {url}" if url else None


def web_ui_run_url(settings: Settings, workflow_id: str) -> str:
    """The run's page in the Temporal Web UI (``TEMPORAL_UI_URL``)."""
    namespace = quote(settings.temporal_namespace, safe="")
    ui = settings.temporal_ui_url.rstrip("/")
    return f"{ui}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
