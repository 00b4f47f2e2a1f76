"""A run's recorded entries as ledger rows: its history entries (transitions, review decisions
and votes) and its corrections (one row per field a reviewer changed).

An entry is keyed by its content and its occurrence (identical entries are numbered), a key
that neither a continued run carrying its chain's entries nor the bound that drops the oldest
ones moves.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from google.protobuf.timestamp_pb2 import Timestamp

from aiorch.ops import field_paths
from aiorch.ops.reviews import DECISION_EVENTS
from workflows.payloads import NOTE_CONTINUED_AS_NEW, NOTE_REVIEW_VOTE, Correction, HistoryEntry

NOTES: Final = frozenset({NOTE_CONTINUED_AS_NEW, NOTE_REVIEW_VOTE})


def utc(moment: datetime | Timestamp) -> datetime:
    """A moment as the ledger stores it: UTC, without a zone."""
    if isinstance(moment, Timestamp):
        return moment.ToDatetime()
    return moment.astimezone(UTC).replace(tzinfo=None)


def entry_ids(history: Sequence[HistoryEntry]) -> list[str]:
    """A key for each entry: its content's digest and, for identical entries, its occurrence."""
    seen: Counter[str] = Counter()
    keys = []
    for entry in history:
        digest = hashlib.sha256(entry.model_dump_json().encode()).hexdigest()[:32]
        keys.append(f"{digest}-{seen[digest]}")
        seen[digest] += 1
    return keys


def as_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False)


def decides(entry: HistoryEntry) -> bool:
    """A review's decision (by a reviewer or a rule) or a vote a review policy counted."""
    return entry.event in DECISION_EVENTS or entry.event == NOTE_REVIEW_VOTE


def review_start(entry: HistoryEntry, before: Sequence[HistoryEntry]) -> datetime | None:
    """When the review ``entry`` decided (or voted in) began: the latest transition into its
    state among the entries ``before`` it (None when the bound dropped it)."""
    for earlier in reversed(before):
        if earlier.event not in NOTES and earlier.to_state == entry.from_state:
            return earlier.at
    return None


def decision_row(
    ids: dict[str, str], key: str, entry: HistoryEntry, before: Sequence[HistoryEntry]
) -> dict[str, Any]:
    """``entry`` (a decision or a vote, recorded after the entries ``before``) as a
    ``review_decisions`` row."""
    began = review_start(entry, before)
    vote = entry.event == NOTE_REVIEW_VOTE
    return {
        **ids,
        "entry_id": key,
        "review_round": entry.review_round,
        "kind": "vote" if vote else "decision",
        "decision": (entry.vote or "") if vote else entry.event,
        "reviewer": entry.reviewer,
        "review_group": entry.group,
        "rule": entry.rule,
        "state": entry.from_state,
        "review_started_at": utc(began) if began is not None else None,
        "decided_at": utc(entry.at),
        "delay_s": (entry.at - began).total_seconds() if began is not None else None,
        "feedback_present": bool(entry.feedback),
    }


def correction_rows(ids: dict[str, str], correction: Correction) -> list[dict[str, Any]]:
    """One row per field a correction changed (by path, ``line_items[1].amount``); a reedit
    is one row for the whole result (path ``""``)."""
    common = {
        **ids,
        "review_round": correction.review_round,
        "reviewer": correction.reviewer,
        "kind": correction.kind,
        "at": utc(correction.at),
        "feedback_present": bool(correction.feedback),
    }
    before, after = correction.before, correction.after
    if correction.kind != "correct" or not isinstance(before, dict) or not isinstance(after, dict):
        return [{**common, "field_path": "", "before": as_json(before), "after": as_json(after)}]
    old, new = dict(field_paths.leaves(before)), dict(field_paths.leaves(after))
    changed = [
        path for path in [*old, *(p for p in new if p not in old)] if old.get(path) != new.get(path)
    ]
    return [
        {
            **common,
            "field_path": path,
            "before": as_json(old.get(path)),
            "after": as_json(new.get(path)),
        }
        for path in changed
    ]
