"""The review inbox, tried by a logged-in reviewer who reads what is not theirs: a run only
alice may review, a run bob requested, and a run that waits for nobody. Each is missing from
bob's list and answers 404 to his GET and POST alike, without a word of its content, while
alice sees the run she may decide. The inbox runs as `aiorch inbox serve` in the local stack."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV

pytestmark = pytest.mark.e2e

SECRET = "Quarterly numbers nobody else may read"


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return {**E2E_WORKER_ENV, "ALLOWED_REVIEWERS": "alice,bob,carol"}


@pytest.fixture(scope="module")
def stack_options() -> dict[str, Any]:
    return {"with_inbox": True, "inbox_reviewers": ("alice", "bob")}


def csrf(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


@pytest.fixture
def logged_in(stack: LocalStack) -> Iterator[dict[str, httpx.Client]]:
    url = stack.addresses.inbox_url
    assert url is not None
    browsers = {}
    for name in ("alice", "bob"):
        browser = httpx.Client(base_url=url, follow_redirects=False, trust_env=False)
        form = browser.get("/login")
        done = browser.post(
            "/login", data={"token": stack.inbox_token(name), "csrf_token": csrf(form.text)}
        )
        assert done.status_code == 303, done.text
        browsers[name] = browser
    yield browsers
    for browser in browsers.values():
        browser.close()


async def test_a_reviewer_sees_and_decides_only_runs_waiting_for_them(
    client: Client, logged_in: dict[str, httpx.Client]
) -> None:
    """Bob is refused, with the same 404 as for a run that does not exist, every run he may
    not decide now: one narrowed to alice, one he requested, one that completed; alice's list
    and page show hers."""
    only_alice = await start(
        client,
        request(SECRET, review="always", options={"allowed_reviewers": ["alice"]}),
    )
    bobs_own = await start(client, request(SECRET, review="always", requested_by="bob"))
    done = await start(client, request(SECRET, review="never"))
    await wait_for_state(only_alice, "await_review")
    await wait_for_state(bobs_own, "await_review")
    assert (await finished(done)).state == "completed"

    bob, alice = logged_in["bob"], logged_in["alice"]
    listing = bob.get("/")
    assert listing.status_code == 200
    nobody = "0123456789abcdef01234567"
    unknown = bob.get(f"/runs/{nobody}")
    assert unknown.status_code == 404
    token = csrf(listing.text)
    for handle in (only_alice, bobs_own, done):
        assert handle.id not in listing.text
        page = bob.get(f"/runs/{handle.id}")
        assert page.status_code == 404
        assert page.text.replace(handle.id, nobody) == unknown.text
        posted = bob.post(
            f"/runs/{handle.id}/review",
            data={"decision": "approve", "csrf_token": token, "review_round": "1"},
        )
        assert posted.status_code == 404
        assert SECRET not in posted.text

    theirs = alice.get("/")
    assert only_alice.id in theirs.text and bobs_own.id in theirs.text
    assert done.id not in theirs.text
    page = alice.get(f"/runs/{only_alice.id}")
    assert page.status_code == 200 and SECRET in page.text
    assert alice.get(f"/runs/{done.id}").status_code == 404
    for handle in (only_alice, bobs_own):
        await handle.terminate("the test is over")
