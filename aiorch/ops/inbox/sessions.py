"""Token sessions the inbox remembers: the server's half of a login.

The session cookie is signed, so no one can forge one, but a copied cookie would stay valid for
as long as the cookie says. So a login also records a random session id here, and the cookie
carries only that id: a session counts while this registry knows it and its absolute end
(``INBOX_SESSION_TTL_S`` after the login, however busy the reviewer was) has not passed.
Logging out forgets the id, so a cookie copied before logout opens nothing afterwards.

The registry lives in the inbox's process: a restart ends every token session (reviewers log in
again), and replicas behind a load balancer each know their own (route a reviewer to one
replica, or authenticate through a proxy, ``INBOX_USER_HEADER``). It stays small: ended
sessions are dropped as new ones start, and each token keeps at most ``PER_TOKEN`` sessions
(its oldest is forgotten first).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

PER_TOKEN: Final = 32
SESSION_ID_BYTES: Final = 32


@dataclass(frozen=True)
class Session:
    """Who logged in (the reviewer and their token's id) and when the session ends."""

    reviewer: str
    token_id: str
    ends: datetime


@dataclass
class Sessions:
    """The live token sessions, by session id.

    Args:
        lifetime: how long a session lasts from its login (not from its last use).
        clock: the current time (tests pass their own).
    """

    lifetime: timedelta
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _live: dict[str, Session] = field(default_factory=dict, repr=False)

    def start(self, reviewer: str, token_id: str) -> str:
        """A new session for ``reviewer``'s token; returns its id (for the cookie)."""
        now = self.clock()
        self._live = {sid: s for sid, s in self._live.items() if s.ends > now}
        same_token = [sid for sid, s in self._live.items() if s.token_id == token_id]
        for sid in same_token[: max(0, len(same_token) - PER_TOKEN + 1)]:
            del self._live[sid]  # dicts keep insertion order: the oldest first
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        self._live[session_id] = Session(reviewer, token_id, now + self.lifetime)
        return session_id

    def find(self, session_id: object) -> Session | None:
        """The live session with this id, or None (unknown, forgotten or ended)."""
        if not isinstance(session_id, str):
            return None
        found = self._live.get(session_id)
        if found is None:
            return None
        if found.ends <= self.clock():
            del self._live[session_id]
            return None
        return found

    def end(self, session_id: object) -> None:
        """Forget this session (logout): its cookie opens nothing any more."""
        if isinstance(session_id, str):
            self._live.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._live)
