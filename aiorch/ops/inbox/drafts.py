"""Decisions the inbox could not send, kept for the reviewer who typed them.

A review form posted after its session ended (logged out in another tab, expired, a cookie
that no longer verifies) or from an earlier session is never sent: the run would not know who
decided. Its decision, feedback and corrected fields are kept here instead, under a random id
that the browser's (new) session cookie holds, so that once the reviewer logs in again the
run's page shows them filled in, to check and send. A draft is only ever a prefill: nothing is
sent without the reviewer pressing a button on a page with a fresh CSRF token.

Drafts live in the inbox's process (like its sessions), each for ``lifetime`` after it was kept
and at most ``limit`` of them (the oldest is forgotten first), and a draft is given back once,
for the run it was typed for.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

DRAFT_ID_BYTES: Final = 24
# The session key that holds the id of a decision kept for its reviewer.
DRAFT_KEY: Final = "draft"
# The most a draft keeps of the corrected-fields text (the form's textarea).
MAX_FIELDS_CHARS: Final = 64 * 1024


@dataclass(frozen=True)
class Draft:
    """What a reviewer had typed in a run's review form, when it was kept, and whether it was
    kept because the form's session had ended or changed (``stale``; else the form was
    refused, or the reviewer went back from confirming a reject, and the page says why)."""

    workflow_id: str
    decision: str
    feedback: str
    fields: str | None
    review_round: str
    kept_at: datetime
    stale: bool = False
    # The correction form's inputs as typed, by name (None: the form was not the correction's).
    typed: Mapping[str, str] | None = None


@dataclass
class Drafts:
    """The drafts kept, by random id."""

    lifetime: timedelta = timedelta(hours=1)
    limit: int = 256
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _kept: OrderedDict[str, Draft] = field(default_factory=OrderedDict, repr=False)

    def keep(
        self,
        workflow_id: str,
        *,
        decision: str,
        feedback: str,
        fields: str | None,
        review_round: str,
        max_feedback: int,
        stale: bool = False,
        typed: Mapping[str, str] | None = None,
    ) -> str:
        """Keep what was typed (each part cut to what a form may hold; correction inputs past
        that, not at all); returns its id."""
        if typed is not None and sum(len(k) + len(v) for k, v in typed.items()) > MAX_FIELDS_CHARS:
            typed = None
        draft = Draft(
            workflow_id=workflow_id,
            decision=decision[:16],
            feedback=feedback[:max_feedback],
            fields=fields[:MAX_FIELDS_CHARS] if fields is not None else None,
            review_round=review_round[:12],
            kept_at=self.clock(),
            stale=stale,
            typed=dict(typed) if typed is not None else None,
        )
        draft_id = secrets.token_urlsafe(DRAFT_ID_BYTES)
        self._kept[draft_id] = draft
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)
        return draft_id

    def take(self, draft_id: object, workflow_id: str) -> Draft | None:
        """The draft with this id, if it was typed for ``workflow_id`` and is not too old;
        given back once."""
        if not isinstance(draft_id, str):
            return None
        draft = self._kept.get(draft_id)
        if draft is None or draft.workflow_id != workflow_id:
            return None
        del self._kept[draft_id]
        return draft if self.clock() - draft.kept_at <= self.lifetime else None

    def __len__(self) -> int:
        return len(self._kept)
