"""Reading a posted correction form back into fields, and what the correction changes.

Each input is parsed to its schema type (`correction_form.Scalar`): a value that does not parse
is an error for that input, and the form gives no fields at all (`FormErrors`), so nothing is
sent. The fields start from the run's own (keys the schema does not know stay as they were); a
table's rows are its items in order, less those marked "remove" and blank new rows.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

from aiorch.ops.inbox.correction_form import (
    MAX_ROWS,
    REMOVE,
    ROWS,
    Columns,
    Path,
    Scalar,
    display,
    entries,
    label_of,
    name_of,
)

_INTEGER: Final = re.compile(r"-?[0-9]+")
_DECIMAL: Final = re.compile(r"-?[0-9]+(\.[0-9]+)?")


class FormErrors(ValueError):
    """Inputs that do not parse, by input name, each with what is wrong."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__(f"{len(errors)} value(s) do not parse")
        self.errors = dict(errors)


@dataclass(frozen=True)
class Change:
    """One value a correction changes, by its path, before and after, as text."""

    label: str
    before: str
    after: str


def read(
    schema: Mapping[str, Any] | None, fields: Mapping[str, Any], form: Mapping[str, str]
) -> dict[str, Any]:
    """The corrected fields a posted form (``form``: its inputs' texts) gives for ``fields``.

    Raises:
        FormErrors: inputs that do not parse (by name); no fields then.
    """
    corrected = copy.deepcopy(dict(fields))
    errors: dict[str, str] = {}
    for found in entries(schema, fields):
        if isinstance(found.node, Scalar):
            _set_scalar(corrected, found.path, found.node, form, errors)
        else:
            _set_rows(corrected, fields, found.path, found.node, form, errors)
    if errors:
        raise FormErrors(errors)
    return corrected


def _set_scalar(
    target: dict[str, Any],
    path: Path,
    scalar: Scalar,
    form: Mapping[str, str],
    errors: dict[str, str],
) -> None:
    name = name_of(path)
    try:
        value = parse(scalar, form.get(name, ""))
    except ValueError as err:
        errors[name] = str(err)
        return
    if value in (None, "") and not _has(target, path):
        return  # a value the run does not have, left empty: still none
    parent: Any = target
    for part in path[:-1]:
        if not isinstance(parent.get(part), dict):
            parent[part] = {}
        parent = parent[part]
    parent[path[-1]] = value


def _has(fields: Mapping[str, Any], path: Path) -> bool:
    """Whether ``fields`` hold a value (null included) at ``path``."""
    value: Any = fields
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def _set_rows(
    target: dict[str, Any],
    fields: Mapping[str, Any],
    path: Path,
    node: Columns,
    form: Mapping[str, str],
    errors: dict[str, str],
) -> None:
    name = name_of(path)
    before = _at(fields, path)
    items = before if isinstance(before, list) else []
    try:
        count = min(int(form.get(name + ROWS, "")), MAX_ROWS)
    except ValueError:
        count = len(items)
    rows: list[Any] = []
    for index in range(count):
        if f"{name}.{index}{REMOVE}" in form:
            continue
        texts = {column: form.get(f"{name}.{index}.{column}", "") for column, _ in node.columns}
        if index >= len(items) and not any(text.strip() for text in texts.values()):
            continue  # the blank row to add one, left blank
        row = dict(items[index]) if index < len(items) and isinstance(items[index], dict) else {}
        for column, scalar in node.columns:
            cell = f"{name}.{index}.{column}"
            try:
                value = parse(scalar, texts[column])
            except ValueError as err:
                errors[cell] = str(err)
                continue
            if column in row or value not in (None, ""):
                row[column] = value
        rows.append(row)
    if before is None and not rows:
        return
    parent: Any = target
    for part in path[:-1]:
        parent = parent.setdefault(part, {})
    parent[path[-1]] = rows


def _at(fields: Mapping[str, Any], path: Path) -> Any:
    value: Any = fields
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def parse(scalar: Scalar, raw: str) -> Any:
    """One input's text as its schema type (``None`` for an empty value that may be null).

    Raises:
        ValueError: the text is not a value of the type; the message says what to write.
    """
    text = raw.replace("\r\n", "\n")
    if scalar.kind == "text":
        return None if scalar.nullable and text == "" else text
    text = text.strip()
    if text == "" and (scalar.nullable or scalar.kind == "json"):
        return None
    if scalar.kind == "decimal":
        if not _DECIMAL.fullmatch(text):
            raise ValueError(f"{text or '(empty)'} is not a number: write it like 2068.79")
        return text
    if scalar.kind == "integer":
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"{text or '(empty)'} is not a whole number")
        return int(text)
    if scalar.kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{text or '(empty)'} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"{text} is not a finite number")
        return int(text) if _INTEGER.fullmatch(text) else number
    if scalar.kind == "date":
        try:
            date.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"{text or '(empty)'} is not a date: write it like 2026-03-31"
            ) from None
        return text
    if scalar.kind == "boolean":
        if text not in ("true", "false"):
            raise ValueError("choose yes or no")
        return text == "true"
    if scalar.kind == "enum":
        for option in scalar.options:
            if display(option) == text:
                return option
        raise ValueError(f"{text or '(empty)'} is not one of the choices")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg})") from None


def changes(before: Any, after: Any, path: Path = ()) -> list[Change]:
    """Each value that differs between ``before`` and ``after``, by its path (a row added or
    removed is one change)."""
    if isinstance(before, dict) and isinstance(after, dict):
        found: list[Change] = []
        for key in [*before, *(key for key in after if key not in before)]:
            found += changes(before.get(key), after.get(key), (*path, key))
        return found
    if isinstance(before, list) and isinstance(after, list) and _all_objects(before, after):
        found = []
        for index in range(max(len(before), len(after))):
            old = before[index] if index < len(before) else None
            new = after[index] if index < len(after) else None
            if old is None or new is None:
                found.append(_change((*path, index), old, new))
            else:
                found += changes(old, new, (*path, index))
        return found
    return [] if before == after and type(before) is type(after) else [_change(path, before, after)]


def _all_objects(*lists: list[Any]) -> bool:
    return all(isinstance(item, dict) for items in lists for item in items)


def _change(path: Path, before: Any, after: Any) -> Change:
    return Change(
        label=label_of(path),
        before="(none)" if before is None else display(before),
        after="(removed)" if after is None and before is not None else display(after),
    )
