"""The review inbox's pages and forms over HTTP (Starlette's test client), with the runs it
shows pinned in memory and the decisions it sends recorded: login and 401, CSRF and 403, model
output rendered as text, refusals shown, security headers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from aiorch.ops.inbox import auth
from aiorch.ops.inbox.app import Inbox, InboxOptions, create_app
from aiorch.ops.inbox.runs import WaitingRun, may_review
from aiorch.ops.inbox.sessions import Sessions
from aiorch.ops.review_views import RunView, earlier_feedback
from aiorch.ops.reviews import ReviewOutcome, ReviewTarget, decision_for_round
from workflows.payloads import (
    HistoryEntry,
    ReviewDecision,
    ReviewSection,
    ReviewView,
    RunStatus,
)

WORKFLOW_ID = "0123456789abcdef01234567"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SINCE = NOW - timedelta(minutes=30)
EVIL = "<script>alert('owned')</script><img src=x onerror=alert(1)>"
SESSION_LIFETIME = timedelta(hours=8)


def entry(event: str, source: str, target: str, **extra: Any) -> HistoryEntry:
    return HistoryEntry(from_state=source, to_state=target, event=event, at=SINCE, **extra)


HISTORY = [
    entry("start", "idle", "fetch_prompt"),
    entry("prompt_ready", "fetch_prompt", "invoke_llm"),
    entry("needs_review", "invoke_llm", "await_review", review_round=1),
    entry("reedit", "await_review", "invoke_llm", reviewer="bob", feedback=EVIL, review_round=1),
    entry("needs_review", "invoke_llm", "await_review", review_round=2),
]
VIEW = ReviewView(
    pipeline="AiOrchestrator",
    state="await_review",
    status="WaitingForInput",
    chain_id="chain-1",
    content_digest="d" * 64,
    review_round=2,
    waiting=True,
    deadline=SINCE + timedelta(seconds=3600),
    title=f"Summarise {EVIL}",
    headline=f"Answer {EVIL}",
    sections=[
        ReviewSection(title="Request", text=f"Summarise {EVIL}", key="request"),
        ReviewSection(title="Metadata", text=f'{{"note": "{EVIL}"}}', key="metadata"),
        ReviewSection(title="The model's reply", text=f"Answer {EVIL}", key="reply"),
    ],
    allowed_reviewers=["alice", "bob"],
    model="sim-large",
    history=HISTORY,
)
STATUS = RunStatus(
    state="await_review",
    status="WaitingForInput",
    progress=60,
    attempts=2,
    model="sim-large",
    history=HISTORY,
    review_round=2,
)


class PinnedRuns:
    """The runs the inbox shows, fixed in memory (the RunSource a Temporal client backs)."""

    def __init__(self) -> None:
        self.failure: Exception | None = None
        # The fields a document run shows for correction (None: a run that takes none), and
        # the JSON Schema they follow (None: the form follows the values' own types).
        self.view_fields: dict[str, Any] | None = None
        self.schema: dict[str, Any] | None = None
        self.problems: list[str] = []

    async def waiting(self, reviewer: str) -> list[WaitingRun]:
        if self.failure:
            raise self.failure
        return [WaitingRun(WORKFLOW_ID, "run-1", "await_review", SINCE, 2, VIEW)]

    async def view(self, workflow_id: str, reviewer: str) -> RunView:
        if workflow_id != WORKFLOW_ID:
            raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
        view = VIEW
        if self.view_fields is not None:
            view = VIEW.model_copy(
                update={"fields": self.view_fields, "corrections": True, "problems": self.problems}
            )
        return RunView(WORKFLOW_ID, "run-1", view, earlier_feedback(HISTORY))

    async def fields_schema(self, run: RunView) -> dict[str, Any] | None:
        return self.schema


class Decisions:
    """Records each decision the inbox sends; answers as the run would, or refuses."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, ReviewDecision]] = []
        self.targets: list[ReviewTarget] = []
        self.refusal: str | None = None

    async def __call__(self, decision: ReviewDecision, target: ReviewTarget) -> ReviewOutcome:
        self.sent.append((target.workflow_id, decision))
        self.targets.append(target)
        if self.refusal is not None:
            raise WorkflowUpdateFailedError(ApplicationError(self.refusal, type="ValueError"))
        applied = entry(
            decision.decision,
            "await_review",
            "generate_embedding",
            reviewer=decision.reviewer,
            review_round=decision.review_round,
        )
        status = STATUS.model_copy(update={"history": [*HISTORY, applied]})
        recorded = decision_for_round(status.history, decision.review_round or 0)
        return ReviewOutcome(sent=decision, status=status, recorded=recorded)


class Clock:
    """The inbox's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def make_client(
    tmp_path: Path, *, header: str | None = None, tokens: bool = True, clock: Clock | None = None
) -> tuple[TestClient, dict[str, str], PinnedRuns, Decisions]:
    made = {name: auth.new_token(name) for name in ("alice",)}
    book = None
    if tokens:
        path = tmp_path / "tokens"
        path.write_text("".join(f"{line}\n" for _, line in made.values()))
        book = auth.TokenBook(path)
    runs, decisions = PinnedRuns(), Decisions()
    inbox = Inbox(
        runs,
        decisions,
        auth.Authenticator(book, header, Sessions(SESSION_LIFETIME, clock or Clock())),
        InboxOptions(web_ui_url=lambda wid: f"http://ui.example/workflows/{wid}"),
        clock=lambda: NOW,
    )
    app = create_app(inbox, session_secret="s" * 64, secure_cookies=False)
    client = TestClient(app, follow_redirects=False)
    return client, {n: t for n, (t, _) in made.items()}, runs, decisions


@pytest.fixture
def inbox(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], PinnedRuns, Decisions]]:
    made = make_client(tmp_path)
    with made[0]:
        yield made


def csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def hidden_fields(html: str) -> dict[str, str]:
    """The review form's hidden fields, as a browser posts them."""
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html)
    return {name: unescape(value) for name, value in found}


def log_in(client: TestClient, token: str) -> None:
    form = client.get("/login")
    response = client.post("/login", data={"token": token, "csrf_token": csrf(form.text)})
    assert response.status_code == 303 and response.headers["location"] == "/"


def test_every_page_needs_a_login_and_says_so_with_401(inbox: Any) -> None:
    """Without a session the list and a run's page answer 401 with the login form, show no
    run, and still carry the security headers; the health check answers without login."""
    client = inbox[0]
    for path in ("/", f"/runs/{WORKFLOW_ID}"):
        response = client.get(path)
        assert response.status_code == 401
        assert 'name="token"' in response.text
        assert "run-link" not in response.text and "Answer" not in response.text
        assert "default-src 'self'" in response.headers["content-security-policy"]
        assert "script-src 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
    assert client.get("/healthz").status_code == 200


def test_a_token_logs_in_a_wrong_one_does_not(inbox: Any) -> None:
    """The login form posts the token with its CSRF token: a wrong token is 401 and says so;
    the right one sets an HttpOnly, SameSite session cookie and opens the inbox."""
    client, tokens, _, _ = inbox
    page = client.get("/login")
    wrong = client.post("/login", data={"token": "nope", "csrf_token": csrf(page.text)})
    assert wrong.status_code == 401 and "That token is not valid." in wrong.text
    right = client.post("/login", data={"token": tokens["alice"], "csrf_token": csrf(wrong.text)})
    assert right.status_code == 303
    cookie = right.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "aiorch-inbox=" in cookie
    listing = client.get("/")
    assert listing.status_code == 200 and "Signed in as <strong>alice</strong>" in listing.text


def test_a_cookie_copied_before_logout_opens_nothing_after_it(tmp_path: Path) -> None:
    """Someone who copied alice's session cookie (a shared machine, a proxy log) replays it
    after she logs out: 401, because logout ended the session on the server, not only in
    her browser."""
    client, tokens, _, _ = make_client(tmp_path)
    with client:
        log_in(client, tokens["alice"])
        assert client.get("/").status_code == 200
        copied = dict(client.cookies)
        token = csrf(client.get("/").text)
        assert client.post("/logout", data={"csrf_token": token}).status_code == 303
    with TestClient(client.app, follow_redirects=False, cookies=copied) as thief:
        replayed = thief.get("/")
        assert replayed.status_code == 401 and "Signed in as" not in replayed.text


def test_a_session_ends_eight_hours_after_login_however_busy(tmp_path: Path) -> None:
    """A reviewer (or a stolen cookie) that uses the inbox every half hour, taking each fresh
    cookie the inbox sends, is still asked to log in again eight hours after the login."""
    clock = Clock()
    client, tokens, _, _ = make_client(tmp_path, clock=clock)
    with client:
        log_in(client, tokens["alice"])
        while clock.now < NOW + SESSION_LIFETIME - timedelta(minutes=1):
            assert client.get("/").status_code == 200
            clock.now += timedelta(minutes=30)
        clock.now = NOW + SESSION_LIFETIME
        assert client.get("/").status_code == 401


def test_the_list_shows_each_waiting_run_with_time_left_as_text(inbox: Any) -> None:
    """A waiting run is listed with a link to its page, its round, its time left (deadline =
    AiStateSince + the plan's review timeout) and excerpts of request and reply, escaped."""
    client, tokens, _, _ = inbox
    log_in(client, tokens["alice"])
    page = client.get("/").text
    assert f'href="/runs/{WORKFLOW_ID}"' in page
    assert "30 min" in page  # 60 min timeout, waiting for 30
    assert "<script" not in page and "&lt;script&gt;" in page


def test_model_output_is_rendered_as_text_never_as_html(inbox: Any) -> None:
    """The reply, the request, its metadata and earlier feedback all hold markup; the run's page
    shows every one of them as text: no tag the model wrote reaches the page as a tag."""
    client, tokens, _, _ = inbox
    log_in(client, tokens["alice"])
    page = client.get(f"/runs/{WORKFLOW_ID}")
    assert page.status_code == 200
    assert "<script" not in page.text and "<img" not in page.text
    assert "Answer &lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;" in page.text
    assert page.text.count("&lt;img src=x onerror=alert(1)&gt;") >= 2  # reply, feedback
    assert "alice, bob" in page.text and 'value="2"' in page.text  # who may review, the round
    assert 'href="http://ui.example/workflows/' in page.text


def test_a_post_without_the_csrf_token_is_refused(inbox: Any) -> None:
    """A review without the session's CSRF token (none, a wrong one, another session's, or a
    request the browser marks cross-site) is 403 and nothing is sent to the run."""
    client, tokens, _, decisions = inbox
    log_in(client, tokens["alice"])
    token = csrf(client.get(f"/runs/{WORKFLOW_ID}").text)
    url = f"/runs/{WORKFLOW_ID}/review"
    form = {"decision": "approve", "review_round": "2"}
    assert client.post(url, data=form).status_code == 403
    assert client.post(url, data={**form, "csrf_token": "x" * 43}).status_code == 403
    cross = client.post(
        url, data={**form, "csrf_token": token}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403
    assert client.post("/logout", data={}).status_code == 403
    assert decisions.sent == []


def test_a_decision_is_sent_for_the_round_shown_as_the_reviewer(inbox: Any) -> None:
    """Reedit with feedback sends one decision: the logged-in reviewer (never a name from the
    form), the round the page showed, the feedback; the page then says what happened."""
    client, tokens, _, decisions = inbox
    log_in(client, tokens["alice"])
    page = client.get(f"/runs/{WORKFLOW_ID}").text
    response = client.post(
        f"/runs/{WORKFLOW_ID}/review",
        data={
            **hidden_fields(page),
            "decision": "reedit",
            "feedback": "  cite the section  ",
            "reviewer": "mallory",
        },
    )
    # Applied: on to the list of runs still waiting, which says what happened.
    assert response.status_code == 303 and response.headers["location"] == "/"
    [(workflow_id, decision)] = decisions.sent
    assert workflow_id == WORKFLOW_ID
    assert (decision.decision, decision.reviewer, decision.review_round, decision.feedback) == (
        "reedit",
        "alice",
        2,
        "cite the section",
    )
    assert "reedit accepted (round 2)" in client.get("/").text
    # To the run the page showed, signed for its chain and what it showed.
    [target] = decisions.targets
    assert (target.run_id, target.chain_id, target.digest) == ("run-1", "chain-1", "d" * 64)


def test_corrected_fields_are_sent_with_an_approval(inbox: Any) -> None:
    """A pipeline that takes corrections shows its fields in a form, with the JSON box as an
    advanced option; the preview's confirmation sends an approval carrying the fields it
    shows (one JSON object)."""
    client, tokens, runs, decisions = inbox
    runs.view_fields = {"total": "25.00"}
    log_in(client, tokens["alice"])
    page = client.get(f"/runs/{WORKFLOW_ID}").text
    assert 'name="f.total"' in page and 'id="fields-json" name="fields"' in page
    client.post(
        f"/runs/{WORKFLOW_ID}/review",
        data={
            "decision": "correct",
            "confirm": "yes",
            "review_round": "2",
            "fields": '{"total": "22.20"}',
            "csrf_token": csrf(page),
        },
    )
    [(_, decision)] = decisions.sent
    assert (decision.decision, decision.fields) == ("approve", {"total": "22.20"})


def test_a_refusal_is_shown_on_the_page(inbox: Any) -> None:
    """When the run refuses the update, its reason is on the next page, escaped."""
    client, tokens, _, decisions = inbox
    log_in(client, tokens["alice"])
    decisions.refusal = "reviewer 'alice' is not allowed to review run <b>x</b>"
    token = csrf(client.get(f"/runs/{WORKFLOW_ID}").text)
    client.post(
        f"/runs/{WORKFLOW_ID}/review",
        data={"decision": "approve", "review_round": "2", "csrf_token": token},
    )
    page = client.get(f"/runs/{WORKFLOW_ID}").text
    assert "The run refused this review: reviewer &#39;alice&#39; is not allowed" in page
    assert "<b>x</b>" not in page


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"decision": "delete", "review_round": "2"}, "Choose approve, reedit or reject."),
        ({"decision": "approve", "review_round": "two"}, "names no review round"),
        ({"decision": "approve", "review_round": "0"}, "Invalid review: review_round"),
        ({"decision": "reedit", "review_round": "2", "feedback": "x" * 20000}, "limited to"),
        ({"decision": "correct-json", "review_round": "2", "fields": "{total: 1"}, "not JSON"),
        ({"decision": "correct-json", "review_round": "2", "fields": "[1, 2]"}, "JSON object"),
        (
            {"decision": "correct", "confirm": "yes", "review_round": "2", "fields": "{x"},
            "are not JSON",
        ),
    ],
)
def test_bad_forms_are_explained_and_never_sent(
    inbox: Any, form: dict[str, str], message: str
) -> None:
    """A form the inbox cannot turn into a valid decision is explained on the page; nothing
    reaches the run."""
    client, tokens, runs, decisions = inbox
    runs.view_fields = {"total": "25.00"}
    log_in(client, tokens["alice"])
    token = csrf(client.get(f"/runs/{WORKFLOW_ID}").text)
    client.post(f"/runs/{WORKFLOW_ID}/review", data={**form, "csrf_token": token})
    assert message in client.get(f"/runs/{WORKFLOW_ID}").text
    assert decisions.sent == []


def test_login_redirects_only_within_the_inbox(inbox: Any) -> None:
    """``next`` may only be a path here: another host or ``//host`` sends the reviewer to /."""
    client, tokens, _, _ = inbox
    for target, expected in (
        ("/runs/abc", "/runs/abc"),
        ("//evil.example/", "/"),
        ("https://evil.example", "/"),
    ):
        client.cookies.clear()  # logged out: a signed-in reviewer's /login moves on at once
        page = client.get("/login")
        response = client.post(
            "/login",
            data={"token": tokens["alice"], "csrf_token": csrf(page.text), "next": target},
        )
        assert response.headers["location"] == expected


def test_unknown_runs_and_an_unreachable_temporal_are_pages_not_tracebacks(inbox: Any) -> None:
    """A run that does not exist is a 404 page; Temporal not answering is a 503 page."""
    client, tokens, runs, _ = inbox
    log_in(client, tokens["alice"])
    assert client.get("/runs/ffffffffffffffffffffffff").status_code == 404
    runs.failure = RPCError("down", RPCStatusCode.UNAVAILABLE, b"")
    down = client.get("/")
    assert down.status_code == 503 and "Temporal is not answering" in down.text


def test_behind_a_proxy_the_header_names_the_reviewer(tmp_path: Path) -> None:
    """With INBOX_USER_HEADER only, the proxy's header is the login: no form, 401 without it,
    and a decision is sent for the user it names (CSRF still required)."""
    client, _, _, decisions = make_client(tmp_path, header="X-Forwarded-User", tokens=False)
    with client:
        anonymous = client.get("/")
        assert anonymous.status_code == 401 and 'name="token"' not in anonymous.text
        headers = {"X-Forwarded-User": "carol"}
        page = client.get(f"/runs/{WORKFLOW_ID}", headers=headers)
        assert page.status_code == 200 and "Signed in as <strong>carol</strong>" in page.text
        form = {"decision": "approve", "review_round": "2", "csrf_token": csrf(page.text)}
        sent = client.post(f"/runs/{WORKFLOW_ID}/review", data=form, headers=headers)
        assert sent.status_code == 303
        assert [d.reviewer for _, d in decisions.sent] == ["carol"]
        assert client.post(f"/runs/{WORKFLOW_ID}/review", data=form).status_code == 401


@pytest.mark.parametrize(
    ("changes", "reviewer", "may"),
    [
        ({}, "alice", True),
        ({"allowed_reviewers": ["bob"]}, "alice", False),
        ({"allowed_reviewers": None}, "anyone", True),
        ({"requested_by": "alice"}, "alice", False),
        ({"waiting": False}, "alice", False),
    ],
)
def test_a_reviewer_may_see_only_runs_waiting_for_them(
    changes: dict[str, Any], reviewer: str, may: bool
) -> None:
    """The inbox lists and shows a run to a reviewer only while it waits, only when its
    reviewers include them, and never to its requester."""
    assert may_review(VIEW.model_copy(update=changes), reviewer) is may
