"""Rendering the inbox's pages: the templates (autoescaped, whatever their file name), the
context every page gets (its CSRF token, the reviewer, a flash message), and the error pages
any action may answer with."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates
from temporalio.service import RPCError

from aiorch.ops.inbox import auth
from aiorch.ops.inbox.forms import local_path
from aiorch.ops.review_views import RunUnreadable, time_left
from workflows.payloads import MAX_FEEDBACK_CHARS

log = logging.getLogger("ai-orchestrator.inbox")

HERE: Final = Path(__file__).resolve().parent


def templates() -> Jinja2Templates:
    """The page templates, autoescaped whatever their file name (all are HTML)."""
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["when"] = _when
    environment.filters["quote"] = lambda value: quote(str(value), safe="")
    return Jinja2Templates(env=environment)


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "unknown"


class Pages:
    """The templates and the error pages, for one authenticator and clock."""

    def __init__(self, authenticator: auth.Authenticator, clock: Callable[[], datetime]) -> None:
        self.auth, self.clock = authenticator, clock
        self.templates = templates()

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session = request.session
        response = self.templates.TemplateResponse(
            request,
            name,
            {
                "base": request.scope.get("root_path", ""),
                "csrf_token": auth.csrf_token(session),
                "csrf_field": auth.CSRF_FIELD,
                "reviewer": context.pop("reviewer", None),
                "flash": session.pop("flash", None),
                "login_form": self.auth.has_login_form,
                "now": self.clock(),
                "time_left": time_left,
                "max_feedback": MAX_FEEDBACK_CHARS,
                **context,
            },
            status_code=status,
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    def unauthorized(
        self, request: Request, message: str | None = None, *, next_path: str | None = None
    ) -> Response:
        """401: the login form, leading back to ``next_path`` (default: this page, when it is
        one a browser can open again, else the inbox)."""
        if self.auth.has_login_form:
            target = next_path or (local_path(request) if request.method == "GET" else "/")
            return self.page(request, "login.html", 401, next=target, error=message)
        return self.page(
            request,
            "error.html",
            401,
            title="Not signed in",
            message=f"No reviewer was named by the proxy ({self.auth.user_header}).",
        )

    def forbidden(self, request: Request) -> Response:
        return self.page(
            request,
            "error.html",
            403,
            title="Request refused",
            message="This form is out of date or did not come from this inbox: reload the "
            "page and try again.",
        )

    def temporal_down(self, request: Request, reviewer: auth.Reviewer, err: RPCError) -> Response:
        log.warning("Temporal did not answer: %s", err.status.name if err.status else "error")
        return self.page(
            request,
            "error.html",
            503,
            reviewer=reviewer,
            title="Temporal is not answering",
            message="The inbox cannot reach Temporal right now; try again in a moment.",
        )

    def unreadable(self, request: Request, reviewer: auth.Reviewer, err: RunUnreadable) -> Response:
        return self.page(
            request,
            "error.html",
            502,
            reviewer=reviewer,
            title="Cannot show this run",
            message=str(err),
        )

    def not_yours(self, request: Request, reviewer: auth.Reviewer, workflow_id: str) -> Response:
        """The one 404 for a run that does not exist and one the reviewer may not decide now."""
        return self.page(
            request,
            "error.html",
            404,
            reviewer=reviewer,
            title="No such run",
            message=f"There is no run {workflow_id} waiting for your review.",
        )
