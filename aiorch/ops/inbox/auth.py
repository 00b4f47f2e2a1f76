"""Who is reviewing: per-reviewer tokens, or the user header of an authenticating proxy; and the
per-session CSRF token every form carries.

Two ways in, configured by the operator (at least one):

- **Tokens** (``INBOX_TOKENS_FILE``): one line per token, ``REVIEWER:sha256:HEX`` (SHA-256 of
  the token, hex; ``#`` starts a comment). ``aiorch inbox new-token alice`` makes
  a random token (256 bits) and prints it once, with the line to add. Only hashes are stored:
  a leaked file opens nothing. A reviewer logs in with the token once; the inbox then keeps a
  session (``sessions.Sessions``: the reviewer, the token's id, i.e. the first 16 hex digits of
  its hash, and an absolute end, ``INBOX_SESSION_TTL_S`` after the login) and the cookie holds
  only its random id. Removing a token's line ends its sessions at the next request (the file
  is re-read when it changes); logging out ends that session on the server, so a copy of the
  cookie opens nothing afterwards.
- **Proxy** (``INBOX_USER_HEADER``, e.g. ``X-Forwarded-User``): the header's value is the
  reviewer. Trusted only when configured, and then only as far as the deployment guarantees that
  every request comes through the proxy, which sets the header itself and drops any copy a
  client sends (README, "Behind an authenticating proxy").

The session is a signed cookie (Starlette's ``SessionMiddleware``), HttpOnly, SameSite=Lax (a
reviewer arriving from a chat link stays logged in; CSRF tokens guard every POST), ``Secure``
(and named ``__Host-...``) unless the inbox is plain ``http://`` on a loopback host: ``INBOX_URL``
says where reviewers open it, and an inbox without one must listen on loopback
(`check_inbox_url`), so a deployment reached over the network always gets a ``Secure`` cookie.
Its signing secret is derived from the inbox's signing key, so rotating the key ends every
session.

CSRF: every session holds a random token; every form carries it and every POST must return it
(compared in constant time), else 403. A request a browser marks as cross-site
(``Sec-Fetch-Site: cross-site``) is refused before that.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from aiorch.ops.inbox.sessions import Sessions
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import ConfigError
from workflows.payloads import MAX_REVIEWER_CHARS

TOKEN_BYTES: Final = 32
TOKEN_ID_CHARS: Final = 16
CSRF_FIELD: Final = "csrf_token"
_LINE: Final = re.compile(r"^(?P<name>.+):sha256:(?P<digest>[0-9a-f]{64})$")
# What a reviewer name may hold: printable characters, no line breaks or controls.
_NAME: Final = re.compile(r"^[^\x00-\x1f\x7f]+$")

Via = Literal["token", "proxy"]


@dataclass(frozen=True)
class Reviewer:
    """An authenticated reviewer: the name the inbox signs reviews for, and how it was told."""

    name: str
    via: Via


def token_digest(token: str) -> str:
    """SHA-256 of a token, hex: what the tokens file stores."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token(reviewer: str) -> tuple[str, str]:
    """A fresh random token for ``reviewer`` and its tokens-file line."""
    check_reviewer_name(reviewer, "the reviewer name")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return token, f"{reviewer}:sha256:{token_digest(token)}"


def check_reviewer_name(name: str, where: str) -> str:
    """``name`` if it can be a reviewer (the contract's ``ReviewerName``), stripped.

    Raises:
        ConfigError: it is empty, too long or holds control characters.
    """
    name = name.strip()
    if not name or len(name) > MAX_REVIEWER_CHARS or not _NAME.match(name):
        raise ConfigError(
            f"{where} must be 1 to {MAX_REVIEWER_CHARS} printable characters (no line breaks)"
        )
    return name


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """Token digests -> reviewer names, from the text of a tokens file.

    Raises:
        ConfigError: a line is malformed (named by number, never quoted) or a hash repeats.
    """
    book: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ConfigError(f"{source}, line {number}: expected REVIEWER:sha256:<64 hex digits>")
        name = check_reviewer_name(match["name"], f"{source}, line {number}: the reviewer")
        if match["digest"] in book:
            raise ConfigError(f"{source}, line {number}: this token hash is listed twice")
        book[match["digest"]] = name
    return book


class TokenBook:
    """The reviewers' hashed tokens, re-read whenever the file changes (so a removed line
    ends that token's sessions without a restart)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._book: dict[str, str] = {}
        self._reload()

    def _reload(self) -> None:
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            text = self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
            raise ConfigError(
                f"INBOX_TOKENS_FILE={str(self._path)!r}: cannot read it ({reason})"
            ) from None
        self._book = parse_tokens(text, "INBOX_TOKENS_FILE")
        self._stamp = stamp

    def __len__(self) -> int:
        return len(self._book)

    def login(self, token: str) -> tuple[str, str] | None:
        """(reviewer, token id) for a valid token, else None; constant time over the book."""
        self._reload()
        digest = token_digest(token)
        found: tuple[str, str] | None = None
        for known, name in self._book.items():
            if hmac.compare_digest(known, digest):
                found = (name, known[:TOKEN_ID_CHARS])
        return found

    def holds(self, reviewer: str, token_id: str) -> bool:
        """Whether that reviewer's token (by id) is still listed."""
        try:
            self._reload()
        except ConfigError:
            return False  # an unreadable file lets nobody in until it is fixed
        return any(
            name == reviewer and digest.startswith(token_id) for digest, name in self._book.items()
        )


def session_secret(key: SigningKey) -> str:
    """The session cookie's signing secret, derived from the inbox's signing key (HKDF-SHA256
    with its own label, so the two uses never share key material directly)."""
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"ai-orchestrator/inbox/session"
    ).derive(key.private_key.private_bytes_raw())
    return derived.hex()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is this machine's
    loopback: ``localhost`` or an address in 127.0.0.0/8 or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_inbox_url(bind_host: str, inbox_url: str | None) -> None:
    """An inbox that listens beyond loopback must be told where reviewers reach it, or its
    cookie could go out without ``Secure`` over a TLS proxy.

    Raises:
        ConfigError: ``bind_host`` is not loopback and ``INBOX_URL`` is unset (one line).
    """
    if not inbox_url and not is_loopback(bind_host):
        raise ConfigError(
            f"the review inbox listens on {bind_host}, not on loopback: set INBOX_URL to the "
            "address reviewers open (https://... behind TLS), so its session cookie is Secure"
        )


def secure_cookies(inbox_url: str | None) -> bool:
    """Whether the session cookie is ``Secure``: always, except for a plain ``http://`` inbox
    on a loopback host (the local stack), where browsers would not send it back otherwise.
    Without ``INBOX_URL`` the inbox listens on loopback only (`check_inbox_url`)."""
    if not inbox_url:
        return False
    parts = urlsplit(inbox_url)
    return not (parts.scheme == "http" and is_loopback(parts.hostname or ""))


def cookie_name(secure: bool) -> str:
    """``__Host-`` tells browsers the cookie is Secure, host-only and for path ``/``."""
    return "__Host-aiorch-inbox" if secure else "aiorch-inbox"


class Authenticator:
    """Decides who a request is from, given the operator's configuration.

    Raises:
        ConfigError: (on construction) neither tokens nor a proxy header is configured.
    """

    def __init__(
        self,
        tokens: TokenBook | None,
        user_header: str | None,
        sessions: Sessions,
    ) -> None:
        if tokens is None and not user_header:
            raise ConfigError(
                "the review inbox needs a way to know its reviewers: INBOX_TOKENS_FILE "
                "(aiorch inbox new-token NAME) or INBOX_USER_HEADER behind an "
                "authenticating proxy"
            )
        self.tokens = tokens
        self.user_header = user_header
        self.sessions = sessions

    @property
    def has_login_form(self) -> bool:
        """True when reviewers log in with a token."""
        return self.tokens is not None

    def proxy_user(self, headers: MutableMapping[str, str] | Any) -> str | None:
        """The proxy's user header, when configured and well-formed."""
        if not self.user_header:
            return None
        value = headers.get(self.user_header)
        if not value:
            return None
        try:
            return check_reviewer_name(value, self.user_header)
        except ConfigError:
            return None

    def reviewer(self, headers: Any, session: MutableMapping[str, Any]) -> Reviewer | None:
        """The request's reviewer, or None (the caller answers 401).

        The proxy's header wins when configured and present; otherwise a token session the
        inbox still knows (not logged out, not past its end), as long as its token is listed.
        """
        proxied = self.proxy_user(headers)
        if proxied is not None:
            if session.get("proxy_user") != proxied:
                # Another person behind the same browser profile: a fresh session, new CSRF.
                session.clear()
                session["proxy_user"] = proxied
            return Reviewer(proxied, "proxy")
        found = self.sessions.find(session.get("sid"))
        if (
            self.tokens is not None
            and found is not None
            and self.tokens.holds(found.reviewer, found.token_id)
        ):
            return Reviewer(found.reviewer, "token")
        return None

    def log_in(self, token: str, session: MutableMapping[str, Any]) -> str | None:
        """Start a token session; returns the reviewer, or None for an unknown token."""
        if self.tokens is None or not token:
            return None
        found = self.tokens.login(token.strip())
        if found is None:
            return None
        session.clear()  # a new identity gets a new CSRF token too (no session fixation)
        session["sid"] = self.sessions.start(*found)
        return found[0]

    def log_out(self, session: MutableMapping[str, Any]) -> None:
        """End the session on the server and in the cookie."""
        self.sessions.end(session.get("sid"))
        session.clear()


def csrf_token(session: MutableMapping[str, Any]) -> str:
    """The session's CSRF token, made on first use."""
    token = session.get("csrf")
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def csrf_ok(session: MutableMapping[str, Any], sent: object) -> bool:
    """Whether ``sent`` (the form's field) is this session's CSRF token."""
    expected = session.get("csrf")
    return (
        isinstance(expected, str)
        and isinstance(sent, str)
        and hmac.compare_digest(expected.encode(), sent.encode())
    )
