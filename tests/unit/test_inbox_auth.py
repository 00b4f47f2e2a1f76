"""The review inbox's authentication: hashed reviewer tokens, the proxy's user header, session
cookies and CSRF tokens (aiorch.ops.inbox.auth)."""

from __future__ import annotations

import hashlib
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from aiorch.ops.inbox import auth
from aiorch.ops.inbox.sessions import PER_TOKEN, Sessions
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import ConfigError

LOGIN_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LIFETIME = timedelta(hours=8)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = LOGIN_AT

    def __call__(self) -> datetime:
        return self.now


def sessions(clock: Clock | None = None) -> Sessions:
    return Sessions(LIFETIME, clock or Clock())


def tokens_file(tmp_path: Path, *names: str) -> tuple[Path, dict[str, str]]:
    """A tokens file with a fresh token per name; the tokens by name."""
    made = {name: auth.new_token(name) for name in names}
    path = tmp_path / "tokens"
    path.write_text("# reviewers\n" + "".join(f"{line}\n" for _, line in made.values()))
    return path, {name: token for name, (token, _) in made.items()}


def test_new_tokens_are_random_and_only_their_hash_is_stored(tmp_path: Path) -> None:
    """A token is 256 random bits; its line holds the reviewer and the SHA-256 of the token,
    never the token itself."""
    token, line = auth.new_token("alice")
    other, _ = auth.new_token("alice")
    assert token != other and len(token) >= 43
    assert token not in line
    assert line == f"alice:sha256:{hashlib.sha256(token.encode()).hexdigest()}"
    # SHA-256 of "abc", FIPS 180-2's first example.
    assert auth.token_digest("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_a_listed_token_logs_its_reviewer_in_and_others_do_not(tmp_path: Path) -> None:
    """login maps a token to its reviewer and token id; an unknown, empty or near-miss token
    is refused."""
    path, tokens = tokens_file(tmp_path, "alice", "bob")
    book = auth.TokenBook(path)
    assert len(book) == 2
    name, token_id = book.login(tokens["alice"]) or ("", "")
    assert name == "alice" and len(token_id) == auth.TOKEN_ID_CHARS
    assert book.login(tokens["bob"])[0] == "bob"  # type: ignore[index]
    assert book.login("") is None
    assert book.login(tokens["alice"][:-1]) is None
    assert book.login(auth.token_digest(tokens["alice"])) is None  # the hash is no password


def test_removing_a_token_ends_its_sessions_without_a_restart(tmp_path: Path) -> None:
    """The book re-reads the file when it changes: a session of a removed token is over."""
    path, tokens = tokens_file(tmp_path, "alice", "bob")
    authn = auth.Authenticator(auth.TokenBook(path), None, sessions())
    session: dict[str, Any] = {}
    assert authn.log_in(tokens["alice"], session) == "alice"
    assert authn.reviewer({}, session) == auth.Reviewer("alice", "token")

    kept = [line for line in path.read_text().splitlines() if not line.startswith("alice:")]
    path.write_text("\n".join(kept) + "\n")
    os.utime(path, ns=(1, 1))  # a different stamp even within one clock tick
    assert authn.reviewer({}, session) is None


@pytest.mark.parametrize(
    "content",
    [
        "alice:md5:0123",
        "alice:sha256:" + "g" * 64,
        "alice:sha256:" + "a" * 63,
        ":sha256:" + "a" * 64,
        "alice\x07:sha256:" + "a" * 64,
        "alice:sha256:{0}\nbob:sha256:{0}".format("a" * 64),
    ],
)
def test_malformed_token_files_fail_at_start_naming_the_line(tmp_path: Path, content: str) -> None:
    """A bad line (wrong scheme, not 64 hex digits, no or a bad name, a hash listed twice) is a
    ConfigError naming the line's number, never quoting it."""
    path = tmp_path / "tokens"
    path.write_text(content + "\n")
    with pytest.raises(ConfigError, match=r"INBOX_TOKENS_FILE, line \d") as info:
        auth.TokenBook(path)
    assert "a" * 64 not in str(info.value)


def test_an_unreadable_tokens_file_is_one_line(tmp_path: Path) -> None:
    """A missing file is a ConfigError that names the setting."""
    with pytest.raises(ConfigError, match=r"INBOX_TOKENS_FILE=.*cannot read it"):
        auth.TokenBook(tmp_path / "missing")


def test_the_inbox_needs_a_way_to_know_its_reviewers() -> None:
    """Neither tokens nor a proxy header: the inbox refuses to start."""
    with pytest.raises(ConfigError, match=r"INBOX_TOKENS_FILE .* or INBOX_USER_HEADER"):
        auth.Authenticator(None, None, sessions())


def test_the_proxy_header_is_trusted_only_when_configured(tmp_path: Path) -> None:
    """With INBOX_USER_HEADER set, its value is the reviewer; without it the same header is
    ignored, whatever it says. A header holding control characters or too long is nobody."""
    path, _ = tokens_file(tmp_path, "alice")
    proxied = auth.Authenticator(None, "X-Forwarded-User", sessions())
    assert proxied.reviewer({"X-Forwarded-User": "carol"}, {}) == auth.Reviewer("carol", "proxy")
    assert proxied.reviewer({}, {}) is None
    assert proxied.reviewer({"X-Forwarded-User": "car\nol"}, {}) is None
    assert proxied.reviewer({"X-Forwarded-User": "x" * 201}, {}) is None
    tokens_only = auth.Authenticator(auth.TokenBook(path), None, sessions())
    assert tokens_only.reviewer({"X-Forwarded-User": "carol"}, {}) is None


def test_another_proxy_user_gets_a_fresh_session(tmp_path: Path) -> None:
    """When the proxy names someone else than the session's user, the session (CSRF token
    included) starts over, so one person's form cannot be posted as another's."""
    proxied = auth.Authenticator(None, "X-Forwarded-User", sessions())
    session: dict[str, Any] = {}
    proxied.reviewer({"X-Forwarded-User": "carol"}, session)
    carols = auth.csrf_token(session)
    proxied.reviewer({"X-Forwarded-User": "dave"}, session)
    assert session["proxy_user"] == "dave" and auth.csrf_token(session) != carols


def test_logging_in_starts_a_new_session(tmp_path: Path) -> None:
    """A login clears what the session held before (its CSRF token too): no session fixation."""
    path, tokens = tokens_file(tmp_path, "alice")
    authn = auth.Authenticator(auth.TokenBook(path), None, sessions())
    session: dict[str, Any] = {"reviewer": "mallory", "token_id": "0" * 16}
    before = auth.csrf_token(session)
    assert authn.reviewer({}, session) is None  # a forged session names no listed token
    assert authn.log_in("wrong", session) is None and session["reviewer"] == "mallory"
    assert authn.log_in(tokens["alice"], session) == "alice"
    assert "csrf" not in session and auth.csrf_token(session) != before


def test_csrf_tokens_are_per_session_and_checked_exactly() -> None:
    """A session's CSRF token is random and stable; only that exact string passes."""
    one: dict[str, Any] = {}
    two: dict[str, Any] = {}
    token = auth.csrf_token(one)
    assert auth.csrf_token(one) == token != auth.csrf_token(two)
    assert auth.csrf_ok(one, token)
    for sent in (None, "", token[:-1], token + "x", auth.csrf_token(two), ["list"]):
        assert not auth.csrf_ok(one, sent)
    assert not auth.csrf_ok({}, token)


def test_a_session_ends_at_its_absolute_end_however_busy(tmp_path: Path) -> None:
    """A token session used all day long still ends INBOX_SESSION_TTL_S after its login:
    using it does not extend it."""
    path, tokens = tokens_file(tmp_path, "alice")
    clock = Clock()
    authn = auth.Authenticator(auth.TokenBook(path), None, sessions(clock))
    session: dict[str, Any] = {}
    assert authn.log_in(tokens["alice"], session) == "alice"
    while clock.now < LOGIN_AT + LIFETIME - timedelta(minutes=1):
        assert authn.reviewer({}, session) == auth.Reviewer("alice", "token")
        clock.now += timedelta(minutes=30)
    clock.now = LOGIN_AT + LIFETIME
    assert authn.reviewer({}, session) is None
    assert len(authn.sessions) == 0


def test_logging_out_ends_every_copy_of_the_session(tmp_path: Path) -> None:
    """Logout forgets the session on the server: a copy of the cookie's contents taken before
    (another tab, or someone who copied the cookie) names nobody afterwards, and the session
    holds no reviewer name a forger could reuse."""
    path, tokens = tokens_file(tmp_path, "alice")
    authn = auth.Authenticator(auth.TokenBook(path), None, sessions())
    session: dict[str, Any] = {}
    authn.log_in(tokens["alice"], session)
    copied = dict(session)
    assert set(copied) == {"sid"}
    authn.log_out(session)
    assert session == {}
    assert authn.reviewer({}, copied) is None


def test_a_token_keeps_a_bounded_number_of_sessions(tmp_path: Path) -> None:
    """Logging in again and again keeps at most PER_TOKEN sessions for one token: the oldest
    ends first, so the inbox's memory stays bounded."""
    path, tokens = tokens_file(tmp_path, "alice")
    authn = auth.Authenticator(auth.TokenBook(path), None, sessions())
    first: dict[str, Any] = {}
    authn.log_in(tokens["alice"], first)
    for _ in range(PER_TOKEN + 8):
        authn.log_in(tokens["alice"], {})
    assert len(authn.sessions) == PER_TOKEN
    assert authn.reviewer({}, first) is None


@pytest.mark.parametrize(
    ("host", "url", "refused"),
    [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("192.0.2.7", None, True),
        ("inbox.internal", None, True),
        ("0.0.0.0", "https://review.example.com", False),
    ],
)
def test_an_inbox_beyond_loopback_needs_its_url(host: str, url: str | None, refused: bool) -> None:
    """Without INBOX_URL the inbox may only listen on loopback (where a plain http:// cookie is
    right); anywhere else it refuses to start with one line naming INBOX_URL, since its cookie
    would otherwise go out without Secure behind a TLS proxy."""
    if refused:
        with pytest.raises(ConfigError, match=rf"listens on {re.escape(host)}, not on loopback"):
            auth.check_inbox_url(host, url)
    else:
        auth.check_inbox_url(host, url)


@pytest.mark.parametrize(
    ("url", "secure"),
    [
        (None, False),
        ("http://127.0.0.1:8703", False),
        ("http://localhost:8703", False),
        ("http://[::1]:8703", False),
        ("http://inbox.internal:8703", True),
        ("https://inbox.example.com", True),
        ("https://127.0.0.1:8703", True),
    ],
)
def test_session_cookies_are_secure_except_on_plain_loopback(url: str | None, secure: bool) -> None:
    """The cookie is Secure and ``__Host-`` prefixed everywhere but a local http:// inbox."""
    assert auth.secure_cookies(url) is secure
    assert auth.cookie_name(secure).startswith("__Host-") is secure


def test_the_session_secret_comes_from_the_signing_key_but_is_not_it() -> None:
    """Every replica with the same key signs cookies alike; the secret is derived, so the key
    itself never signs cookies, and another key gives another secret."""
    key = SigningKey.generate("inbox")
    secret = auth.session_secret(key)
    assert secret == auth.session_secret(SigningKey.parse(key.private_entry()))
    assert secret != auth.session_secret(SigningKey.generate("inbox"))
    assert key.private_entry().split(":")[1] not in secret
