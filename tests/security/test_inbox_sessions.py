"""The review inbox's sessions, attacked over HTTP as someone who got hold of a reviewer's
session cookie (a shared machine, a proxy log, a browser profile): replaying it after the
reviewer logged out, and keeping it alive past the session's lifetime by using it. Also: an
inbox started to listen beyond loopback with no ``INBOX_URL``, where its cookie would lack
``Secure``. The inbox runs as `aiorch inbox serve` in the local stack, with a short session
lifetime (``INBOX_SESSION_TTL_S``) so its end comes within the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from aiorch.ops.signing import SigningKey
from tests.support import ROOT
from tests.support.live_stack import E2E_WORKER_ENV, stack_with_worker

pytestmark = pytest.mark.e2e

LIFETIME_S = 4.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {**E2E_WORKER_ENV, "INBOX_SESSION_TTL_S": str(LIFETIME_S)}
    yield from stack_with_worker(tmp_path_factory.mktemp("inbox-sessions"), env, with_inbox=True)


def browser(stack: LocalStack, cookies: httpx.Cookies | None = None) -> httpx.Client:
    url = stack.addresses.inbox_url
    assert url is not None
    return httpx.Client(base_url=url, follow_redirects=False, cookies=cookies, trust_env=False)


def csrf(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def log_in(client: httpx.Client, stack: LocalStack) -> None:
    form = client.get("/login")
    token = stack.inbox_token("reviewer")
    done = client.post("/login", data={"token": token, "csrf_token": csrf(form.text)})
    assert done.status_code == 303, done.text
    assert client.get("/").status_code == 200


def test_a_cookie_copied_before_logout_opens_nothing_after_it(stack: LocalStack) -> None:
    """The attacker copies the reviewer's cookie while she is logged in (it works for them
    too); she logs out; the copy now gets 401 and the login form, not her inbox."""
    with browser(stack) as reviewer:
        log_in(reviewer, stack)
        copied = httpx.Cookies(reviewer.cookies)
        with browser(stack, copied) as attacker:
            assert attacker.get("/").status_code == 200
        logged_out = reviewer.post("/logout", data={"csrf_token": csrf(reviewer.get("/").text)})
        assert logged_out.status_code == 303
    with browser(stack, copied) as attacker:
        replayed = attacker.get("/")
        assert replayed.status_code == 401 and 'name="token"' in replayed.text


def test_using_a_session_does_not_keep_it_alive(stack: LocalStack) -> None:
    """The attacker uses the cookie every half second, always keeping the fresh one the inbox
    sends back; once INBOX_SESSION_TTL_S has passed since the login it gets 401 all the same."""
    with browser(stack) as attacker:
        log_in(attacker, stack)
        logged_in = time.monotonic()
        while time.monotonic() - logged_in < LIFETIME_S - 1.5:
            assert attacker.get("/").status_code == 200
            time.sleep(0.5)
        time.sleep(max(0.0, LIFETIME_S + 0.5 - (time.monotonic() - logged_in)))
        assert attacker.get("/").status_code == 401


def test_an_inbox_listening_beyond_loopback_needs_its_url(stack: LocalStack) -> None:
    """`aiorch inbox serve --host 0.0.0.0` without INBOX_URL refuses to start with one line
    naming INBOX_URL, before it listens or connects to anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INBOX_")}
    env |= {
        **stack.addresses.env(),
        "INBOX_SIGNING_KEY": SigningKey.generate("inbox").private_entry(),
        "INBOX_USER_HEADER": "X-Forwarded-User",
    }
    env.pop("INBOX_URL", None)
    port = free_port()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiorch",
            "inbox",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith(
        "error: the review inbox listens on 0.0.0.0, not on loopback: set INBOX_URL"
    )
    assert len(done.stderr.strip().splitlines()) == 1 and "listening" not in done.stdout
