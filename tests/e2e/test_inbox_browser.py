"""The review inbox in a real browser: Debian's Chromium driven by Playwright, against the real
local stack (dev server, worker, LLM simulator) with the inbox process it starts.

No browser is ever downloaded: Playwright launches ``/usr/bin/chromium``. Without it the tests
skip, except under ``CI=true``, where a missing browser is a failure (CI installs it).
The walk-through also takes the README's screenshot, ``docs/images/inbox.png``. A document
run's correction goes through the form built from its extraction schema, and its stored row
(an SQLite document store) is read back.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright
from sqlalchemy import create_engine, text
from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.stack import LocalStack
from aiorch.ops import pipelines
from aiorch.ops.results import finished
from aiorch.ops.visibility import start_run
from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.temporal import DATA_CONVERTER, encrypted_converter
from tests.support.builders import new_request_id
from tests.support.invoices import invoice_fields, text_document
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.simulator import Simulator
from workflows import contract
from workflows.documents.payloads import DocumentRequest

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
# Headless, and quiet on a machine without a network: no background fetches, no updates.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The README's screenshot; the suite rewrites it only when asked (`make screenshots`), so a test
# run leaves the checkout as it was.
README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "inbox.png"
MESSAGE = "Summarise our refund policy <script>alert('owned')</script>"
FEEDBACK = "Please cite the policy section number."


def chromium_or_skip() -> Path:
    """Debian's Chromium; a missing browser fails the test under CI=true, else skips it."""
    if CHROMIUM.is_file():
        return CHROMIUM
    reason = f"{CHROMIUM} is missing: apt-get install -y chromium"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


# Runs of the tenant "quorum" need two approvals from the group alice and bob belong to.
QUORUM_TENANT = "quorum"
QUORUM_POLICY = {
    f"llm@{QUORUM_TENANT}": {"name": "two-of-pair", "stages": [{"group": "pair", "approvals": 2}]}
}


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'documents.db'}"


@pytest.fixture(scope="module")
def inbox_stack(tmp_path_factory: pytest.TempPathFactory, store_url: str) -> Iterator[LocalStack]:
    """A stack with the inbox; the worker lets only alice and bob review (mallory can log in
    to the inbox but is outside the allowed set), the tenant ``quorum``'s runs need both, and
    documents are stored in an SQLite file."""
    chromium_or_skip()
    env = {
        **E2E_WORKER_ENV,
        "DOCUMENT_STORE_URL": store_url,
        "ALLOWED_REVIEWERS": "alice,bob",
        "REVIEW_POLICIES": json.dumps(QUORUM_POLICY),
        "REVIEW_GROUPS": json.dumps({"pair": ["alice", "bob"]}),
    }
    with LocalStack(
        tmp_path_factory.mktemp("inbox-stack"),
        with_worker=True,
        worker_env=env,
        with_inbox=True,
        inbox_reviewers=("alice", "mallory", "bob"),
    ) as running:
        yield running


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless, for the module."""
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium_or_skip()), args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context
    finally:
        await context.close()


async def log_in(context: BrowserContext, stack: LocalStack, reviewer: str) -> Page:
    """A page of ``context`` on the inbox, logged in as ``reviewer`` with their token."""
    url = stack.addresses.inbox_url
    assert url is not None
    page = await context.new_page()
    response = await page.goto(url)
    assert response is not None and response.status == 401  # the login form, not the inbox
    await page.fill("#token", stack.inbox_token(reviewer))
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{url}/")
    return page


async def waiting_run(stack: LocalStack, message: str, **fields: Any) -> WorkflowHandle[Any, Any]:
    """A new run (review always; ``fields`` of its request) once it waits for review."""
    client = await Client.connect(stack.addresses.temporal_address, data_converter=DATA_CONVERTER)
    handle = await start(client, request(message, review="always", **fields))
    await wait_for_state(handle, "await_review")
    return handle


async def open_run(page: Page, stack: LocalStack, workflow_id: str) -> None:
    """From the inbox list (once visibility shows the run), open the run's page."""
    url = stack.addresses.inbox_url
    for _ in range(50):
        await page.goto(f"{url}/")
        if await page.locator(f"a.run-link:text('{workflow_id}')").count():
            break
        await asyncio.sleep(0.2)
    await page.click(f"a.run-link:text('{workflow_id}')")
    await page.wait_for_url(f"{url}/runs/{workflow_id}")


async def test_a_reviewer_reedits_then_approves_in_the_browser(
    inbox_stack: LocalStack, context: BrowserContext, tmp_path: Path
) -> None:
    """alice logs in with her token, finds the waiting run in the list, reads the reply (the
    simulator echoes the request, ``<script>`` included, which shows as text and never runs),
    sends it back with feedback (the next prompt carries it), then approves round 2, and the run
    completes. Takes the README's screenshot on the way."""
    handle = await waiting_run(inbox_stack, MESSAGE)
    page = await log_in(context, inbox_stack, "alice")
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))

    await open_run(page, inbox_stack, handle.id)
    reply = page.locator("#section-reply")
    assert "<script>alert('owned')</script>" in await reply.inner_text()
    assert await page.locator("main script").count() == 0
    assert await page.locator("#round").inner_text() == "1"

    await page.fill("#feedback", FEEDBACK)
    await page.click("button[value=reedit]")
    await page.wait_for_selector(".flash.ok")
    assert "reedit accepted (round 1)" in await page.locator(".flash").inner_text()

    status = await wait_for_state(handle, "await_review")
    while status.review_round < 2:
        status = await wait_for_state(handle, "await_review")
    prompts = Simulator(inbox_stack.addresses.openai_base_url).chat_requests(handle.id)
    assert len(prompts) == 2
    assert FEEDBACK in str(prompts[1]["messages"]) and FEEDBACK not in str(prompts[0]["messages"])

    row = page.locator("tr", has=page.locator(f"a.run-link:text('{handle.id}')"))
    for _ in range(50):  # visibility may lag a moment behind the run
        await page.goto(f"{inbox_stack.addresses.inbox_url}/")
        if "revised per feedback" in await row.inner_text():
            break
        await asyncio.sleep(0.2)
    assert "revised per feedback" in await row.inner_text()  # the list shows round 2's reply
    await page.goto(f"{inbox_stack.addresses.inbox_url}/runs/{handle.id}")
    assert await page.locator("#round").inner_text() == "2"
    assert FEEDBACK in await page.locator(".feedback").inner_text()
    shot = (
        README_SCREENSHOT if os.environ.get("UPDATE_SCREENSHOTS") == "1" else tmp_path / "inbox.png"
    )
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(b"\x89PNG")

    await page.click("button[value=approve]")
    await page.wait_for_selector(".flash.ok")
    assert "approve accepted (round 2)" in await page.locator(".flash").inner_text()
    result = await handle.result()
    assert result["state"] == "completed"
    approval = [entry for entry in result["history"] if entry["event"] == "approve"]
    assert [entry["reviewer"] for entry in approval] == ["alice"]
    assert dialogs == []  # nothing the model wrote ever ran


async def test_a_reviewer_outside_the_allowed_set_sees_nothing_of_the_run(
    inbox_stack: LocalStack, context: BrowserContext
) -> None:
    """mallory can log in to the inbox, but the worker's ALLOWED_REVIEWERS leaves her out: the
    run is not on her list (alice's shows it), its page answers 404 with nothing of it, and
    the run still waits."""
    handle = await waiting_run(inbox_stack, "Draft a reply to the customer")
    alice = await log_in(context, inbox_stack, "alice")
    await open_run(alice, inbox_stack, handle.id)  # listed for a reviewer who may decide it
    page = await log_in(await context.browser.new_context(), inbox_stack, "mallory")  # type: ignore[union-attr]
    url = inbox_stack.addresses.inbox_url
    await page.goto(f"{url}/")
    assert handle.id not in await page.content()
    response = await page.goto(f"{url}/runs/{handle.id}")
    assert response is not None and response.status == 404
    text = await page.content()
    assert "waiting for your review" in text and "Draft a reply" not in text
    assert (await wait_for_state(handle, "await_review")).history[-1].event == "needs_review"
    await handle.cancel()


async def test_a_post_without_the_csrf_token_is_refused(
    inbox_stack: LocalStack, context: BrowserContext
) -> None:
    """A logged-in reviewer's browser posting a review without the form's CSRF token (what a
    forged form on another site would send) gets 403, and the run is untouched."""
    handle = await waiting_run(inbox_stack, "Check this answer")
    page = await log_in(context, inbox_stack, "alice")
    url = f"{inbox_stack.addresses.inbox_url}/runs/{handle.id}/review"

    response = await page.request.post(
        url, form={"decision": "approve", "review_round": "1"}, max_redirects=0
    )
    assert response.status == 403
    forged = await page.request.post(
        url,
        form={"decision": "approve", "review_round": "1", "csrf_token": "guessed"},
        max_redirects=0,
    )
    assert forged.status == 403
    assert (await wait_for_state(handle, "await_review")).review_round == 1
    await handle.cancel()


def test_no_login_gets_401(inbox_stack: LocalStack) -> None:
    """Without a session (or a proxy header the inbox trusts) every page answers 401, and no
    run is shown; the health check needs no login."""
    url = inbox_stack.addresses.inbox_url
    for path in ("/", f"/runs/{new_request_id()}"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}{path}", timeout=10)
        assert refused.value.code == 401
        body = refused.value.read().decode()
        assert "Reviewer token" in body and "run-link" not in body
        assert "default-src 'self'" in refused.value.headers["Content-Security-Policy"]
        assert refused.value.headers["X-Frame-Options"] == "DENY"
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as health:
        assert health.status == 200


async def test_with_encryption_on_the_inbox_shows_decrypted_content(
    tmp_path: Path, browser: Browser
) -> None:
    """With payload encryption on (the worker's PAYLOAD_KEYS, which the inbox gets too), the
    history holds only ciphertext, and the inbox still lists the run and shows its request and
    reply decrypted, with its plan's deadline."""
    keys = {"PAYLOAD_KEYS": f"k1:{new_key()}", "REQUIRE_ENCRYPTION": "true"}
    with LocalStack(
        tmp_path / "stack",
        with_worker=True,
        worker_env={**E2E_WORKER_ENV, **keys},
        with_inbox=True,
        inbox_reviewers=("alice",),
    ) as stack:
        client = await Client.connect(
            stack.addresses.temporal_address,
            data_converter=encrypted_converter(KeyRing.parse(keys["PAYLOAD_KEYS"])),
        )
        handle = await start(client, request("Summarise the secret plan", review="always"))
        await wait_for_state(handle, "await_review")
        started = await anext(aiter(handle.fetch_history_events(page_size=1)))
        raw_input = started.workflow_execution_started_event_attributes.input.payloads[0]
        assert b"secret plan" not in raw_input.data  # ciphertext in Temporal

        context = await browser.new_context()
        try:
            page = await log_in(context, stack, "alice")
            await open_run(page, stack, handle.id)
            request_text = await page.locator("#section-request").inner_text()
            assert "Summarise the secret plan" in request_text
            assert "secret plan" in await page.locator("#section-reply").inner_text()
            assert "h 59 min" in await page.locator("#time-left").inner_text()
        finally:
            await context.close()
        await handle.cancel()


async def test_a_quorum_run_shows_one_of_two_and_completes_with_a_second_reviewer(
    inbox_stack: LocalStack, browser: Browser
) -> None:
    """Under a two-approval policy, alice's approval in her browser is counted ("1 of 2
    approvals: alice") and the run still waits; her page then shows her vote instead of the
    form. bob, in a browser session of his own, sees "1 of 2 approvals: alice", approves, and
    the run completes, its history naming both."""
    handle = await waiting_run(inbox_stack, "Draft the quarterly note", tenant=QUORUM_TENANT)
    alice_context, bob_context = await browser.new_context(), await browser.new_context()
    try:
        alice = await log_in(alice_context, inbox_stack, "alice")
        await open_run(alice, inbox_stack, handle.id)
        assert await alice.locator("#approvals").inner_text() == "0 of 2 approvals"
        await alice.click("button[value=approve]")
        await alice.wait_for_selector(".flash.ok")
        assert "1 of 2 approvals: alice" in await alice.locator(".flash").inner_text()
        assert (await wait_for_state(handle, "await_review")).review_round == 1
        await alice.goto(f"{inbox_stack.addresses.inbox_url}/runs/{handle.id}")
        assert await alice.locator("#approvals").inner_text() == "1 of 2 approvals: alice"
        assert await alice.locator("#voted").count() == 1
        assert await alice.locator("button[value=approve]").count() == 0

        bob = await log_in(bob_context, inbox_stack, "bob")
        await open_run(bob, inbox_stack, handle.id)
        assert await bob.locator("#approvals").inner_text() == "1 of 2 approvals: alice"
        await bob.click("button[value=approve]")
        await bob.wait_for_selector(".flash.ok")
        assert "approve accepted (round 1)" in await bob.locator(".flash").inner_text()
    finally:
        await alice_context.close()
        await bob_context.close()
    result = await handle.result()
    assert result["state"] == "completed"
    votes = [e["reviewer"] for e in result["history"] if e["event"] == "review_vote"]
    [approval] = [e for e in result["history"] if e["event"] == "approve"]
    assert votes == ["alice"]
    assert approval["detail"] == "approve by bob (2 of 2 approvals: alice, bob)"


async def test_a_mistyped_token_keeps_the_deep_link(
    inbox_stack: LocalStack, context: BrowserContext
) -> None:
    """Friction: a deep link to a run asks for a login; one mistyped token, then the right one,
    used to land on the login form again. Now the right one opens the run's page."""
    handle = await waiting_run(inbox_stack, "Check the onboarding email")
    url = f"{inbox_stack.addresses.inbox_url}/runs/{handle.id}"
    page = await context.new_page()
    response = await page.goto(url)
    assert response is not None and response.status == 401
    await page.fill("#token", "mistyped")
    await page.click("button[type=submit]")
    assert "That token is not valid." in await page.content()
    await page.fill("#token", inbox_stack.inbox_token("alice"))
    await page.click("button[type=submit]")
    await page.wait_for_url(url)
    assert await page.locator("#round").inner_text() == "1"
    await handle.cancel()


async def test_a_decision_sent_after_logging_out_elsewhere_is_kept(
    inbox_stack: LocalStack, context: BrowserContext
) -> None:
    """Friction: alice types feedback, logs out in another tab, then presses Reedit. The
    decision used to be lost (and logging in answered 405 on the review path). Now the login
    form leads back to the run's page with her feedback filled in, and one click sends it."""
    handle = await waiting_run(inbox_stack, "Summarise the travel policy")
    page = await log_in(context, inbox_stack, "alice")
    await open_run(page, inbox_stack, handle.id)
    await page.fill("#feedback", FEEDBACK)
    other = await context.new_page()
    await other.goto(f"{inbox_stack.addresses.inbox_url}/")
    await other.click("button.link")  # Log out
    await page.click("button[value=reedit]")
    assert "Your session has ended" in await page.content()
    await page.fill("#token", inbox_stack.inbox_token("alice"))
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{inbox_stack.addresses.inbox_url}/runs/{handle.id}")
    assert await page.locator("#feedback").input_value() == FEEDBACK
    assert "Not sent yet: your reedit of round 1" in await page.locator("#draft").inner_text()
    assert (await wait_for_state(handle, "await_review")).review_round == 1  # nothing sent
    await page.click("button[value=reedit]")
    await page.wait_for_selector(".flash.ok")
    assert "reedit accepted (round 1)" in await page.locator(".flash").inner_text()
    await handle.cancel()


async def test_a_tampered_session_keeps_the_decision(
    inbox_stack: LocalStack, context: BrowserContext
) -> None:
    """Friction: with a session cookie that no longer verifies, a reedit answered "form out of
    date" and lost the feedback. Now it asks for a login and keeps the feedback."""
    handle = await waiting_run(inbox_stack, "Summarise the expense rules")
    page = await log_in(context, inbox_stack, "alice")
    await open_run(page, inbox_stack, handle.id)
    await page.fill("#feedback", FEEDBACK)
    [cookie] = await context.cookies()
    await context.add_cookies([{**cookie, "value": "x" + cookie["value"][1:]}])  # type: ignore[typeddict-item]
    await page.click("button[value=reedit]")
    assert "Your session has ended" in await page.content()
    await page.fill("#token", inbox_stack.inbox_token("alice"))
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{inbox_stack.addresses.inbox_url}/runs/{handle.id}")
    assert await page.locator("#feedback").input_value() == FEEDBACK
    await handle.cancel()


async def test_a_reedit_needs_feedback_and_a_reject_is_confirmed(
    inbox_stack: LocalStack, context: BrowserContext
) -> None:
    """Friction: "Reedit with feedback" took empty feedback, and Reject was one click beside
    it. Now an empty reedit is refused on the page (nothing sent), and Reject opens a page of
    its own: "back to the run" sends nothing and keeps the feedback; "Yes, reject" rejects."""
    handle = await waiting_run(inbox_stack, "Summarise the leave policy")
    page = await log_in(context, inbox_stack, "alice")
    await open_run(page, inbox_stack, handle.id)

    await page.click("button[value=reedit]")
    await page.wait_for_selector(".flash.error")
    assert "A reedit needs feedback" in await page.locator(".flash").inner_text()
    await page.fill("#feedback", "Not for publication.")
    await page.click("button[value=reject]")
    assert "Reject round 1?" in await page.locator("h1").inner_text()
    assert (await wait_for_state(handle, "await_review")).review_round == 1
    await page.click("#cancel-reject")
    assert await page.locator("#feedback").input_value() == "Not for publication."
    assert (await wait_for_state(handle, "await_review")).history[-1].event == "needs_review"

    await page.click("button[value=reject]")
    await page.click("#confirm-reject")
    await page.wait_for_selector(".flash.ok")
    result = await finished(handle)
    assert result.state == "failed"
    rejection = result.history[-1]
    assert (rejection.event, rejection.feedback) == ("reject", "Not for publication.")


async def test_the_flash_after_an_approve_names_no_passing_state(
    inbox_stack: LocalStack, context: BrowserContext
) -> None:
    """Friction: after an approve the flash said "now generate_embedding" while the run had
    already completed. Now it says the approval was accepted, and no state."""
    handle = await waiting_run(inbox_stack, "Summarise the security checklist")
    page = await log_in(context, inbox_stack, "alice")
    await open_run(page, inbox_stack, handle.id)
    await page.click("button[value=approve]")
    await page.wait_for_selector(".flash.ok")
    flash = await page.locator(".flash").inner_text()
    assert "approve accepted (round 1)" in flash and "generate_embedding" not in flash
    assert (await finished(handle)).state == "completed"


async def test_a_reviewer_corrects_an_invoice_total_through_the_form(
    inbox_stack: LocalStack, context: BrowserContext, store_url: str
) -> None:
    """A document run whose invoice prints a wrong total is listed by its file name (its text
    columns wide enough not to wrap mid-word at 1280 px); on its
    page the total comes first, marked invalid with its problem. alice types the right total
    into its input (no JSON), sees the preview of that one change, confirms, and the run
    stores the corrected total, its history counting 1 changed field."""
    printed = invoice_fields(401)
    right_total = printed["total"]
    printed["total"] = str(Decimal(right_total) + Decimal("10.00"))
    request_id = new_request_id()
    path = inbox_stack.addresses.input_dir / f"{request_id}-globex.txt"
    path.write_bytes(text_document(printed).data)
    client = await Client.connect(
        inbox_stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )
    workflow_id = await start_run(
        client,
        DocumentRequest(request_id=request_id, document=path.as_uri()),
        task_queue=contract.DEFAULT_TASK_QUEUE,
        pipeline=pipelines.named("documents"),
    )
    handle = client.get_workflow_handle(workflow_id)
    await wait_for_state(handle, "await_review")

    page = await log_in(context, inbox_stack, "alice")
    await open_run(page, inbox_stack, workflow_id)  # once the list shows it
    await page.goto(f"{inbox_stack.addresses.inbox_url}/")
    row = page.locator("tr", has=page.locator(f"a.run-link:text('{workflow_id}')"))
    assert await row.locator("td.request").inner_text() == f"{request_id}-globex.txt"
    for column in ("td.request", "td.review"):  # wide enough at 1280 px to wrap between words
        box = await row.locator(column).bounding_box()
        assert box is not None and box["width"] >= 150
    await page.goto(f"{inbox_stack.addresses.inbox_url}/runs/{workflow_id}")
    total = page.locator("#field-total")
    assert await total.get_attribute("aria-invalid") == "true"
    assert "but the line amounts" in await page.locator("#field-total-note").inner_text()
    first = page.locator("#correction input:not([type=hidden]), #correction select").first
    assert await first.get_attribute("id") == "field-total"

    await total.fill(right_total)
    await page.click("#preview-correction")
    changes = page.locator("#changes li")
    assert await changes.all_inner_texts() == [f"total: {printed['total']} → {right_total}"]
    assert (await wait_for_state(handle, "await_review")).review_round == 1  # nothing sent yet
    await page.click("#confirm-correction")
    await page.wait_for_selector(".flash.ok")

    result = await finished(handle)
    assert result.state == "completed"
    [correction] = [entry for entry in result.history if entry.event == "correct"]
    assert correction.reviewer == "alice"
    assert "with 1 changed field (total)" in (correction.detail or "")
    [stored] = stored_fields(store_url, request_id)
    assert stored == {**printed, "total": right_total}


def stored_fields(url: str, request_id: str) -> list[dict[str, Any]]:
    """The fields of every row the document store holds for ``request_id``."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            query = text("SELECT fields FROM documents WHERE request_id = :id")
            found = connection.execute(query, {"id": request_id}).all()
    finally:
        engine.dispose()
    return [row.fields if isinstance(row.fields, dict) else json.loads(row.fields) for row in found]
