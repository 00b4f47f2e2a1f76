"""Fields addressed by path, as validation names them (``total``, ``line_items[1].amount``):
read one, set one, list every value with its path.

A reviewer's correction names the fields it changes by these paths (``aiorch review ID correct
--set PATH=VALUE``), and a problem validation found names its field by the same path, so the
fields a reviewer reads and the problems they fix line up.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Final

from workflows.documents.validation import field_path

FieldPath = tuple[str | int, ...]

# One step of a path: a name (first, or after a dot) or an index in brackets.
_STEP: Final = re.compile(r"(?:^|\.)(?P<name>[^.\[\]]+)|\[(?P<index>\d+)\]")


class FieldPathError(ValueError):
    """A path that does not parse or names no field, or a value of the wrong type for its
    field (the message says which, in one line)."""


def parse(text: str) -> FieldPath:
    """``line_items[1].amount`` as ``("line_items", 1, "amount")``.

    Raises:
        FieldPathError: not a path.
    """
    steps: list[str | int] = []
    at = 0
    while at < len(text):
        found = _STEP.match(text, at)
        if found is None or (found["name"] is not None and found[0].startswith(".") == (at == 0)):
            break  # a name after the first comes after a dot, and only then
        steps.append(found["name"] if found["name"] is not None else int(found["index"]))
        at = found.end()
    if not steps or at != len(text) or not isinstance(steps[0], str):
        raise FieldPathError(
            f"{text!r} is not a field path (such as total or line_items[1].amount)"
        )
    return tuple(steps)


def shown(path: FieldPath) -> str:
    """``path`` as validation writes it."""
    return field_path(path)


def leaves(value: Any, path: FieldPath = ()) -> list[tuple[str, Any]]:
    """Every value in ``value`` that holds no other (an empty list or object counts as one),
    with its path, in order."""
    if isinstance(value, dict) and value:
        return [item for key, sub in value.items() for item in leaves(sub, (*path, key))]
    if isinstance(value, list) and value:
        return [item for n, sub in enumerate(value) for item in leaves(sub, (*path, n))]
    return [(shown(path), value)] if path else []


def value_at(fields: Any, path: FieldPath) -> Any:
    """The value ``path`` names in ``fields``.

    Raises:
        FieldPathError: it names no field of ``fields``.
    """
    value = fields
    for depth, step in enumerate(path):
        if not _holds(value, step):
            near = _near(path[: depth + 1], fields)
            raise FieldPathError(f"{shown(path)} names no field of the run's fields{near}")
        value = value[step]
    return value


def _holds(value: Any, step: str | int) -> bool:
    if isinstance(step, str):
        return isinstance(value, dict) and step in value
    return isinstance(value, list) and step < len(value)


def _near(path: FieldPath, fields: Any) -> str:
    """Where the path went astray: the fields its parent holds, or how many items."""
    try:
        parent = value_at(fields, path[:-1]) if len(path) > 1 else fields
    except FieldPathError:
        return ""
    if isinstance(parent, dict):
        where = f"{shown(path[:-1])} has" if len(path) > 1 else "they are"
        return f" ({where}: {', '.join(map(str, parent))})"
    if isinstance(parent, list):
        return f" ({shown(path[:-1])} has {len(parent)} item(s), from [0])"
    return f" ({shown(path[:-1])} holds one value)"


def with_value(fields: dict[str, Any], path: FieldPath, value: Any) -> dict[str, Any]:
    """A copy of ``fields`` with ``value`` where ``path`` names a field.

    Raises:
        FieldPathError: it names no field of ``fields``.
    """
    value_at(fields, path)
    changed = copy.deepcopy(fields)
    parent: Any = value_at(changed, path[:-1])
    parent[path[-1]] = value
    return changed


def typed(path: FieldPath, current: Any, text: str) -> Any:
    """``text`` read as the type of ``current``, the value the field holds: text for text (or
    an empty field), a JSON number for a number, ``true``/``false`` for a boolean, a JSON list
    or object for one.

    Raises:
        FieldPathError: ``text`` is not a value of that type.
    """
    if current is None or isinstance(current, str):
        return text
    kind = _kind(current)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if _kind(value) != kind:
        raise FieldPathError(f"{shown(path)} holds {kind}; {text!r} is not one")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean (true or false)"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a list (as JSON)"
    if isinstance(value, dict):
        return "an object (as JSON)"
    return "text" if isinstance(value, str) else "null"
