"""What changed between two outcomes' outputs: a reply's text as a unified diff, a document's
fields one by one by path (``line_items[2].amount``: before -> after; added; removed)."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aiorch.ops.field_paths import leaves
from aiorch.ops.lab.outcomes import ForkKind, ForkOutcome


class _Diff(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldChange(_Diff):
    """One field that differs: ``changed`` (``before`` -> ``after``), ``added`` (only
    ``after``) or ``removed`` (only ``before``)."""

    path: str
    change: Literal["changed", "added", "removed"]
    before: Any = None
    after: Any = None


class OutputDiff(_Diff):
    """The candidate's output against another outcome's (``against``).

    ``same`` when both ended and neither the text nor any field differs; ``text`` is the
    unified diff of the replies (none when they are equal or neither has one), ``fields`` the
    fields that differ; ``note`` says why there is nothing to compare (an outcome failed).
    """

    against: ForkKind
    same: bool
    text: str | None = None
    fields: list[FieldChange] = Field(default_factory=list)
    note: str | None = None


def _same(before: Any, after: Any) -> bool:
    # JSON's true is not its 1, though Python's True == 1.
    return before == after and isinstance(before, bool) == isinstance(after, bool)


def field_changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[FieldChange]:
    """Each field (a value that holds no other) that differs from ``before`` to ``after``,
    in ``before``'s order, then those only ``after`` has, in its order."""
    old, new = dict(leaves(before or {})), dict(leaves(after or {}))
    changes = [
        FieldChange(path=path, change="changed", before=value, after=new[path])
        if path in new
        else FieldChange(path=path, change="removed", before=value)
        for path, value in old.items()
        if path not in new or not _same(value, new[path])
    ]
    changes += [
        FieldChange(path=path, change="added", after=value)
        for path, value in new.items()
        if path not in old
    ]
    return changes


def text_diff(
    before: str | None, after: str | None, before_name: str, after_name: str
) -> str | None:
    """The unified diff from ``before`` to ``after`` (a missing text as an empty one), or None
    when they are equal."""
    if (before or "") == (after or ""):
        return None
    lines = difflib.unified_diff(
        (before or "").splitlines(),
        (after or "").splitlines(),
        fromfile=before_name,
        tofile=after_name,
        lineterm="",
    )
    return "\n".join(lines)


def _failure(outcome: ForkOutcome) -> str | None:
    return None if outcome.error is None else f"the {outcome.kind} failed: {outcome.error}"


def output_diff(other: ForkOutcome, candidate: ForkOutcome) -> OutputDiff:
    """What the candidate's output changed against ``other``'s."""
    note = _failure(other) or _failure(candidate)
    if note is not None:
        return OutputDiff(against=other.kind, same=False, note=note)
    text = text_diff(other.text, candidate.text, other.kind, candidate.kind)
    fields = field_changes(other.fields, candidate.fields)
    return OutputDiff(
        against=other.kind, same=text is None and not fields, text=text, fields=fields
    )


def differs(outcome: ForkOutcome, original: ForkOutcome) -> bool:
    """Whether ``outcome``'s output is not the original's (a failed one always is)."""
    return not output_diff(original, outcome).same
