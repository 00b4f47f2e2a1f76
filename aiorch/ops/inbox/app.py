"""The review inbox's web app (Starlette, Jinja2 templates with autoescaping on).

Pages: ``/`` lists the runs waiting for a reviewer (``runs.RunReader``); ``/runs/{id}`` shows
one run in full, with where its review policy stands (who approved, how many more it needs) and
a form to approve, reedit with feedback (required), reject (confirmed on a page of its own), or
correct the fields (a form built from their schema, previewed before it is sent:
``correction_pages``); ``/login`` and ``/logout`` for token sessions; ``/healthz`` for health
checks (no login, no content). Every page needs an authenticated reviewer
(``auth.Authenticator``), else 401; every POST needs the session's CSRF token, else 403. No page
needs JavaScript.

Logging in leads back to the page that asked for it (kept across mistyped tokens; a POST leads
back to the page its form was on, never to the POST's own path). A review form posted after its
session ended, or from an earlier session, is not sent: what the reviewer typed is kept
(``drafts.Drafts``) and shown on the run's page again once they are logged in.

A decision is sent as the ``submit_review`` update for the round the reviewer looked at, signed
by the inbox's key for the reviewer it authenticated (``aiorch.ops.reviews.submit_review`` with
``SigningKey.signer``): the workflow checks the signature, the round, and whether that reviewer
may review the run, and its refusal is shown on the page as it said it.

Model output, requests and feedback are only ever template data, rendered as text: Jinja's
autoescaping is on for every template, and nothing is marked safe. Every response carries a
Content-Security-Policy without inline code, ``X-Frame-Options: DENY`` and ``nosniff``
(``headers``); pages that show content are ``Cache-Control: no-store`` (``pages``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops.inbox import auth
from aiorch.ops.inbox.correction_pages import CorrectionPages
from aiorch.ops.inbox.drafts import DRAFT_KEY, Drafts
from aiorch.ops.inbox.forms import (
    CORRECT,
    CORRECT_JSON,
    REVIEW_FORM_FIELDS,
    decision_of,
    field_text,
    run_path,
    safe_next,
    target_of,
)
from aiorch.ops.inbox.headers import SecurityHeaders
from aiorch.ops.inbox.pages import HERE
from aiorch.ops.inbox.runs import NotYours, WaitingRun
from aiorch.ops.review_views import RunUnreadable, RunView
from aiorch.ops.reviews import ReviewOutcome, ReviewTarget, refusal_reason
from workflows.payloads import ReviewDecision

log = logging.getLogger("ai-orchestrator.inbox")

# A failed login costs the guesser this long (tokens are 256-bit random: this is politeness).
LOGIN_FAILURE_DELAY_S: Final = 0.3


class RunSource(Protocol):
    """Where the inbox reads runs (``runs.RunReader`` over a Temporal client)."""

    async def waiting(self, reviewer: str) -> list[WaitingRun]: ...

    async def view(self, workflow_id: str, reviewer: str) -> RunView: ...

    async def fields_schema(self, run: RunView) -> dict[str, Any] | None: ...


Submit = Callable[[ReviewDecision, ReviewTarget], Awaitable[ReviewOutcome]]
"""Sends a reviewer's decision to the run the page showed, signed for it and for what it showed
(``aiorch.ops.reviews.submit_review``)."""


@dataclass(frozen=True)
class InboxOptions:
    """What the pages need to know about the deployment."""

    web_ui_url: Callable[[str], str]


class Inbox(CorrectionPages):
    """The pages and actions, bound to one run source, one signer and one authenticator."""

    runs: RunSource

    def __init__(
        self,
        runs: RunSource,
        submit: Submit,
        authenticator: auth.Authenticator,
        options: InboxOptions,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        drafts: Drafts | None = None,
    ) -> None:
        super().__init__(authenticator, clock)
        self.runs, self.submit, self.options = runs, submit, options
        self.web_ui_url = options.web_ui_url
        self.drafts = drafts if drafts is not None else Drafts(clock=clock)

    def same_site_post(self, request: Request, form: Any) -> bool:
        """A POST that a browser does not mark as cross-site and that carries the CSRF token."""
        if request.headers.get("sec-fetch-site") == "cross-site":
            return False
        return auth.csrf_ok(request.session, form.get(auth.CSRF_FIELD))

    async def index(self, request: Request) -> Response:
        reviewer = self.auth.reviewer(request.headers, request.session)
        if reviewer is None:
            return self.unauthorized(request)
        try:
            rows = await self.runs.waiting(reviewer.name)
        except RPCError as err:
            return self.temporal_down(request, reviewer, err)
        return self.page(request, "inbox.html", reviewer=reviewer, runs=rows)

    async def run_page(self, request: Request) -> Response:
        reviewer = self.auth.reviewer(request.headers, request.session)
        if reviewer is None:
            return self.unauthorized(request)
        workflow_id = request.path_params["workflow_id"]
        try:
            view = await self.runs.view(workflow_id, reviewer.name)
        except NotYours:
            return self.not_yours(request, reviewer, workflow_id)
        except RunUnreadable as err:
            return self.unreadable(request, reviewer, err)
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                return self.page(
                    request,
                    "error.html",
                    404,
                    reviewer=reviewer,
                    title="No such run",
                    message=f"There is no run {workflow_id} (or it is past retention).",
                )
            return self.temporal_down(request, reviewer, err)
        draft = self.drafts.take(request.session.get(DRAFT_KEY), workflow_id)
        if draft is not None:
            request.session.pop(DRAFT_KEY, None)
        return await self.run_response(request, reviewer, view, draft)

    async def login_form(self, request: Request) -> Response:
        if not self.auth.has_login_form:
            return self.unauthorized(request)
        target = safe_next(request.query_params.get("next"))
        if self.auth.reviewer(request.headers, request.session) is not None:
            return RedirectResponse(target, status_code=303)  # signed in already: go on
        return self.page(request, "login.html", next=target)

    async def login(self, request: Request) -> Response:
        form = await request.form()
        if not self.same_site_post(request, form):
            return self.forbidden(request)
        target = safe_next(form.get("next"))
        token = form.get("token")
        # A decision kept while the reviewer was logged out outlives the new session's start.
        draft = request.session.get(DRAFT_KEY)
        name = self.auth.log_in(token if isinstance(token, str) else "", request.session)
        if name is None:
            await asyncio.sleep(LOGIN_FAILURE_DELAY_S)
            return self.unauthorized(request, "That token is not valid.", next_path=target)
        if isinstance(draft, str):
            request.session[DRAFT_KEY] = draft
        log.info("reviewer %s logged in", name)
        return RedirectResponse(target, status_code=303)

    async def logout(self, request: Request) -> Response:
        form = await request.form()
        if not self.same_site_post(request, form):
            return self.forbidden(request)
        self.auth.log_out(request.session)
        return RedirectResponse("/login" if self.auth.has_login_form else "/", status_code=303)

    async def review(self, request: Request) -> Response:
        form = await request.form()
        if request.headers.get("sec-fetch-site") == "cross-site":
            return self.forbidden(request)
        workflow_id = request.path_params["workflow_id"]
        reviewer = self.auth.reviewer(request.headers, request.session)
        if reviewer is None or not auth.csrf_ok(request.session, form.get(auth.CSRF_FIELD)):
            return self.not_sent(request, form, workflow_id, reviewer)
        try:
            run = await self.runs.view(workflow_id, reviewer.name)
        except NotYours:
            # Refused before it is sent: what the run would answer is not this reviewer's to read.
            return self.not_yours(request, reviewer, workflow_id)
        except RunUnreadable as err:
            return self.unreadable(request, reviewer, err)
        except RPCError as err:
            return self.temporal_down(request, reviewer, err)
        if form.get("decision") in (CORRECT, CORRECT_JSON) and form.get("confirm") != "yes":
            return await self.preview(request, form, reviewer, run)
        back = RedirectResponse(run_path(workflow_id), status_code=303)
        try:
            decision = decision_of(form, reviewer.name)
        except ValueError as err:
            self.keep_draft(request, form, workflow_id)
            request.session["flash"] = {"level": "error", "text": str(err)}
            return back
        if decision.decision == "reject" and form.get("confirm") != "yes":
            self.keep_draft(request, form, workflow_id)  # "back to the run" keeps the feedback
            return self.page(
                request,
                "confirm.html",
                reviewer=reviewer,
                workflow_id=workflow_id,
                feedback=decision.feedback,
                review_round=decision.review_round,
                hidden={name: field_text(form, name) for name in REVIEW_FORM_FIELDS},
            )
        flash = await self.send(target_of(form, workflow_id, decision), decision)
        request.session["flash"] = flash
        if flash["level"] != "ok":
            return back  # refused: the page again, with why
        self.drafts.take(request.session.pop(DRAFT_KEY, None), workflow_id)
        # Applied: the run waits for this reviewer no more, so the list of those that do.
        return RedirectResponse("/", status_code=303)

    def not_sent(
        self, request: Request, form: Any, workflow_id: str, reviewer: auth.Reviewer | None
    ) -> Response:
        """A review form the inbox must not send: its session has ended (401, the login form,
        leading back to the run), or it came from another session (403). What the reviewer
        typed is kept for the run's page, when the browser says the form was this inbox's own
        (``Sec-Fetch-Site: same-origin``, or a browser that does not say)."""
        if request.headers.get("sec-fetch-site") in (None, "same-origin"):
            self.keep_draft(request, form, workflow_id, stale=True)
        if reviewer is None:
            return self.unauthorized(
                request,
                "Your session has ended: log in again. Your decision was not sent; what you "
                "typed is kept on the run's page.",
                next_path=run_path(workflow_id),
            )
        return self.page(
            request,
            "error.html",
            403,
            reviewer=reviewer,
            title="Your decision was not sent",
            message="This form is out of date or did not come from this inbox (it was shown "
            "in a session that has ended or changed): nothing was sent. What you typed is "
            "kept: open the run again to check it and send it.",
            link=run_path(workflow_id),
            link_text="Open the run again",
        )

    async def send(self, target: ReviewTarget, decision: ReviewDecision) -> dict[str, str]:
        """Send ``decision`` to the run ``target`` names; the message for the page (what
        happened, or why it was refused)."""
        workflow_id = target.workflow_id
        try:
            outcome = await self.submit(decision, target)
        except WorkflowUpdateFailedError as err:
            reason = refusal_reason(err)
            log.info(
                "%s's %s of %s refused: %s",
                decision.reviewer,
                decision.decision,
                workflow_id,
                reason,
            )
            return {"level": "error", "text": f"The run refused this review: {reason}"}
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return {
                    "level": "error",
                    "text": "The run this page showed has ended or was replaced: your decision "
                    "was not sent. The page now shows where the run is.",
                }
            log.warning("review of %s not sent: %s", workflow_id, err.status.name)
            return {"level": "error", "text": "Temporal is not answering; try again."}
        log.info(
            "%s sent %s for round %s of %s",
            decision.reviewer,
            decision.decision,
            decision.review_round,
            workflow_id,
        )
        level = "ok" if outcome.applied_as_sent else "error"
        return {"level": level, "text": outcome.describe(workflow_id, where=False)}

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")


def create_app(inbox: Inbox, *, session_secret: str, secure_cookies: bool) -> Starlette:
    """The ASGI app: routes, sessions and security headers around ``inbox``; a session lasts
    as long as ``inbox``'s authenticator says (the cookie's own age only tells the browser
    when to drop it)."""
    routes = [
        Route("/", inbox.index, methods=["GET"]),
        Route("/healthz", inbox.healthz, methods=["GET"]),
        Route("/login", inbox.login_form, methods=["GET"]),
        Route("/login", inbox.login, methods=["POST"]),
        Route("/logout", inbox.logout, methods=["POST"]),
        Route("/runs/{workflow_id}", inbox.run_page, methods=["GET"]),
        Route("/runs/{workflow_id}/review", inbox.review, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(SecurityHeaders, hsts=secure_cookies),
        Middleware(
            SessionMiddleware,
            secret_key=session_secret,
            session_cookie=auth.cookie_name(secure_cookies),
            max_age=int(inbox.auth.sessions.lifetime.total_seconds()),
            same_site="lax",  # Strict would log out a reviewer arriving from a chat link
            https_only=secure_cookies,
        ),
    ]
    return Starlette(routes=routes, middleware=middleware)
