"""The inbox's rough edges, each reproduced over HTTP and fixed: the login target kept across a
mistyped token and never a POST-only path; a decision and its feedback kept across a re-login
or a form from an earlier session; feedback required for a reedit; a reject confirmed on a page
of its own; a flash that names no state the run has already left; and a review policy's
progress (who approved, how many more) on the list and the run's page."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.testclient import TestClient

from aiorch.ops.inbox.runs import WaitingRun
from aiorch.ops.review_views import RunView, earlier_feedback
from aiorch.ops.reviews import ReviewOutcome, ReviewTarget
from tests.unit.test_inbox_pages import (
    HISTORY,
    SINCE,
    STATUS,
    VIEW,
    WORKFLOW_ID,
    csrf,
    entry,
    hidden_fields,
    log_in,
    make_client,
)
from workflows.payloads import NOTE_REVIEW_VOTE, ReviewDecision, ReviewProgress

RUN_PAGE = f"/runs/{WORKFLOW_ID}"
REVIEW = f"/runs/{WORKFLOW_ID}/review"
FEEDBACK = "Cite section 4.2 & keep <it> short"


def logged_in(tmp_path: Path) -> tuple[TestClient, dict[str, str], Any, Any]:
    client, tokens, runs, decisions = make_client(tmp_path)
    client.__enter__()
    log_in(client, tokens["alice"])
    return client, tokens, runs, decisions


def log_in_from(client: TestClient, page: str, token: str) -> Any:
    """Post the login form ``page`` shows (its CSRF token and its ``next``) with ``token``."""
    target = hidden_fields(page).get("next", "/")
    return client.post("/login", data={"token": token, "csrf_token": csrf(page), "next": target})


def test_a_mistyped_token_keeps_the_page_the_reviewer_came_for(tmp_path: Path) -> None:
    """A notification's deep link asks for a login; one mistyped token, then the right one,
    lands on the run's page, not on the login form (the friction: next became /login)."""
    client, tokens, _, _ = make_client(tmp_path)
    with client:
        asked = client.get(RUN_PAGE)
        assert asked.status_code == 401
        wrong = log_in_from(client, asked.text, "not-a-token")
        assert wrong.status_code == 401 and hidden_fields(wrong.text)["next"] == RUN_PAGE
        right = log_in_from(client, wrong.text, tokens["alice"])
        assert right.status_code == 303 and right.headers["location"] == RUN_PAGE
        assert client.get(RUN_PAGE).status_code == 200


def test_a_signed_in_reviewer_opening_login_goes_on(tmp_path: Path) -> None:
    """/login for a reviewer who is signed in already leads on to where they were going."""
    client, _, _, _ = logged_in(tmp_path)
    response = client.get(f"/login?next={quote(RUN_PAGE)}")
    assert response.status_code == 303 and response.headers["location"] == RUN_PAGE


def test_a_decision_posted_after_logout_is_kept_and_logging_in_leads_to_the_run(
    tmp_path: Path,
) -> None:
    """alice logs out in another tab, then sends a reedit from the page she had open: nothing
    is sent, the login form leads back to the run's page (never to the POST-only review path,
    which answered 405), and the page shows her decision and feedback filled in."""
    client, tokens, _, decisions = logged_in(tmp_path)
    form = {**hidden_fields(client.get(RUN_PAGE).text), "decision": "reedit", "feedback": FEEDBACK}
    client.post("/logout", data={"csrf_token": form["csrf_token"]})

    refused = client.post(REVIEW, data=form)
    assert refused.status_code == 401
    assert "Your session has ended" in refused.text
    assert hidden_fields(refused.text)["next"] == RUN_PAGE
    back = log_in_from(client, refused.text, tokens["alice"])
    assert back.headers["location"] == RUN_PAGE
    page = client.get(RUN_PAGE).text

    assert decisions.sent == []
    assert "Not sent yet: your reedit of round 2" in page
    assert "Cite section 4.2 &amp; keep &lt;it&gt; short</textarea>" in page
    assert "Not sent yet" not in client.get(RUN_PAGE).text  # shown once


def test_a_tampered_session_cookie_keeps_the_decision_too(tmp_path: Path) -> None:
    """A cookie that no longer verifies (expired key, tampered) is no session: the POST gets the
    login form (401, not a 403 that loses the text), and after logging in the feedback is
    there."""
    client, tokens, _, decisions = logged_in(tmp_path)
    form = {**hidden_fields(client.get(RUN_PAGE).text), "decision": "reedit", "feedback": FEEDBACK}
    cookie = client.cookies["aiorch-inbox"]
    client.cookies.clear()
    client.cookies.set("aiorch-inbox", "tampered" + cookie[8:])

    refused = client.post(REVIEW, data=form)
    assert refused.status_code == 401
    log_in_from(client, refused.text, tokens["alice"])
    assert "keep &lt;it&gt; short</textarea>" in client.get(RUN_PAGE).text
    assert decisions.sent == []


def test_a_form_from_an_earlier_session_is_not_sent_but_kept(tmp_path: Path) -> None:
    """Logged in again in another tab (a new CSRF token), alice posts the old tab's form: 403,
    nothing sent, and the run's page has what she typed; a cross-site or same-site (another
    subdomain's) post keeps nothing."""
    client, tokens, _, decisions = logged_in(tmp_path)
    old = {**hidden_fields(client.get(RUN_PAGE).text), "decision": "reedit", "feedback": FEEDBACK}
    client.post("/logout", data={"csrf_token": old["csrf_token"]})
    log_in(client, tokens["alice"])

    for elsewhere in ("cross-site", "same-site"):
        other = client.post(REVIEW, data=old, headers={"Sec-Fetch-Site": elsewhere})
        assert other.status_code == 403
        assert "keep &lt;it&gt; short" not in client.get(RUN_PAGE).text
    stale = client.post(REVIEW, data=old, headers={"Sec-Fetch-Site": "same-origin"})
    assert stale.status_code == 403 and "Your decision was not sent" in stale.text
    assert "keep &lt;it&gt; short</textarea>" in client.get(RUN_PAGE).text
    assert decisions.sent == []


def test_a_reedit_needs_feedback(tmp_path: Path) -> None:
    """Reedit with an empty (or blank) feedback is explained on the page and never sent."""
    client, _, _, decisions = logged_in(tmp_path)
    form = {**hidden_fields(client.get(RUN_PAGE).text), "decision": "reedit", "feedback": "  "}
    client.post(REVIEW, data=form)
    assert "A reedit needs feedback" in client.get(RUN_PAGE).text
    assert decisions.sent == []


def test_a_reject_is_confirmed_on_a_page_of_its_own(tmp_path: Path) -> None:
    """Reject first shows a confirmation page (no script: a plain form) carrying the round and
    the feedback; nothing is sent until "Yes, reject"; "back to the run" keeps the feedback."""
    client, _, _, decisions = logged_in(tmp_path)
    form = {**hidden_fields(client.get(RUN_PAGE).text), "decision": "reject", "feedback": FEEDBACK}

    asked = client.post(REVIEW, data=form)
    assert asked.status_code == 200 and "Reject round 2?" in asked.text
    assert decisions.sent == []
    assert f'href="{RUN_PAGE}"' in asked.text
    assert "keep &lt;it&gt; short</textarea>" in client.get(RUN_PAGE).text  # cancelled

    sent_back = {name: html.unescape(value) for name, value in hidden_fields(asked.text).items()}
    confirmed = client.post(REVIEW, data=sent_back | {"decision": "reject"})
    assert confirmed.status_code == 303
    [(_, decision)] = decisions.sent
    assert (decision.decision, decision.feedback, decision.review_round) == ("reject", FEEDBACK, 2)


def test_the_flash_after_a_decision_names_no_state_the_run_has_left(tmp_path: Path) -> None:
    """After an approve the list says it was accepted, not "now generate_embedding" (a state the
    run passes through in moments, while the run's page may already say completed)."""
    client, _, _, _ = logged_in(tmp_path)
    form = {**hidden_fields(client.get(RUN_PAGE).text), "decision": "approve"}
    client.post(REVIEW, data=form)
    listing = client.get("/").text
    assert "approve accepted (round 2)" in listing and "generate_embedding" not in listing


TALLY = ReviewProgress(
    policy="two-of-finance",
    group="finance",
    reviewers=["alice", "bob", "carol"],
    approvals=["bob"],
    approvals_needed=3,
)


class Tallied:
    """A run under a policy of three approvals from finance, bob having approved; alice's
    approval is counted as a vote."""

    def __init__(self) -> None:
        self.view = VIEW.model_copy(update={"review": TALLY, "allowed_reviewers": TALLY.reviewers})

    async def waiting(self, reviewer: str) -> list[WaitingRun]:
        return [WaitingRun(WORKFLOW_ID, "run-1", "await_review", SINCE, 2, self.view)]

    async def view_of(self, workflow_id: str, reviewer: str) -> RunView:
        return RunView(WORKFLOW_ID, "run-1", self.view, earlier_feedback(HISTORY))


async def counted(decision: ReviewDecision, target: ReviewTarget) -> ReviewOutcome:
    vote = entry(
        NOTE_REVIEW_VOTE,
        "await_review",
        "await_review",
        reviewer=decision.reviewer,
        review_round=decision.review_round,
        vote=decision.decision,
    )
    tally = TALLY.model_copy(update={"approvals": ["bob", decision.reviewer]})
    status = STATUS.model_copy(update={"history": [*HISTORY, vote], "review": tally})
    return ReviewOutcome(sent=decision, status=status, recorded=None, counted=vote)


def test_a_quorum_shows_who_approved_and_counts_a_vote(tmp_path: Path) -> None:
    """The list and the run's page show the policy's progress ("1 of 3 approvals: bob"); alice's
    approval is counted, and the flash says so with the new tally; once she has voted, her page
    shows her vote instead of the form."""
    client, _, runs, _ = logged_in(tmp_path)
    tallied = Tallied()
    runs.waiting = tallied.waiting
    runs.view = tallied.view_of
    app_inbox = find_inbox(client)
    app_inbox.submit = counted

    assert "1 of 3 approvals: bob" in client.get("/").text
    page = client.get(RUN_PAGE).text
    assert "two-of-finance: stage 1 of 2, group finance" in page
    assert '<dd id="approvals">1 of 3 approvals: bob</dd>' in page
    client.post(REVIEW, data={**hidden_fields(page), "decision": "approve"})
    assert "approve counted (round 2): 2 of 3 approvals: bob, alice" in client.get("/").text

    tallied.view = tallied.view.model_copy(
        update={"review": TALLY.model_copy(update={"approvals": ["bob", "alice"]})}
    )
    mine = client.get(RUN_PAGE).text
    assert 'id="voted"' in mine and 'name="decision"' not in mine


def find_inbox(client: TestClient) -> Any:
    """The Inbox behind the test client's app (its routes' endpoints are its bound methods)."""
    for route in client.app.routes:  # type: ignore[attr-defined]
        owner = getattr(getattr(route, "endpoint", None), "__self__", None)
        if owner is not None:
            return owner
    raise AssertionError("no inbox behind the app")
