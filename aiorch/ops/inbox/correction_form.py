"""The correction form: a run's fields as one input per value, built from the JSON Schema the
fields are validated against, and read back into fields of that schema's types.

A scalar is one input of its type (a decimal string, a number, a date, an enum as a select, a
boolean as a yes/no select, text); an array of objects (an invoice's line items) is a table with
a row per item, a "remove" box per row and one blank row to add; a nested object's values are
inputs named by their path. Anything else (an array of scalars, a value the schema leaves open)
is one input holding its JSON. Inputs are named ``f.`` and their path (``f.line_items.0.amount``)
and labelled by the path validation names problems by (``line_items[0].amount``), so the values
that have problems are marked with their problem text and listed first.

Reading a posted form back starts from the run's own fields (keys the schema does not know stay
as they were): a value that does not parse is an error for that input and no fields at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

Kind = Literal["text", "decimal", "integer", "number", "date", "enum", "boolean", "json"]
Path = tuple[str | int, ...]

# Inputs of the correction form are named PREFIX + their path; a table's row count and a row's
# remove box add these suffixes.
PREFIX: Final = "f."
ROWS: Final = ".rows"
REMOVE: Final = ".remove"
# The most rows a posted table is read with: the most line items a shipped schema allows, and
# the blank row (a forged row count never makes the server loop longer).
MAX_ROWS: Final = 1001
# Text longer than this (or with a line break) gets a textarea rather than a one-line input.
LONG_TEXT: Final = 80
# A string pattern that accepts these and refuses the last is a decimal number's.
_DECIMAL_PROBES: Final = ("12", "-3", "2068.79", "twelve")


@dataclass(frozen=True)
class Scalar:
    """One value's type as the form edits it."""

    kind: Kind
    nullable: bool = False
    options: tuple[Any, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class Columns:
    """An array of objects: its items' properties, each a scalar."""

    columns: tuple[tuple[str, Scalar], ...]
    description: str = ""


@dataclass(frozen=True)
class Entry:
    """One place in the fields the form edits: a scalar's or a table's."""

    path: Path
    node: Scalar | Columns


@dataclass(frozen=True)
class Input:
    """One input as the page shows it."""

    name: str
    id: str
    label: str
    scalar: Scalar
    text: str
    problem: str | None = None
    error: str | None = None

    @property
    def invalid(self) -> bool:
        return self.problem is not None or self.error is not None

    @property
    def long(self) -> bool:
        return self.scalar.kind == "text" and (len(self.text) > LONG_TEXT or "\n" in self.text)

    def selected(self, option: Any) -> bool:
        return self.text == display(option)


@dataclass(frozen=True)
class Table:
    """An array of objects as the page shows it: a row of inputs per item (and a blank one)."""

    name: str
    id: str
    label: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Input, ...], ...]
    removed: frozenset[int] = frozenset()
    problem: str | None = None
    description: str = ""

    @property
    def invalid(self) -> bool:
        return self.problem is not None or any(cell.invalid for row in self.rows for cell in row)


@dataclass(frozen=True)
class CorrectionForm:
    """The whole form: its inputs and tables, those with problems first."""

    items: tuple[Input | Table, ...]


def label_of(path: Path) -> str:
    """A path as validation names it: ``line_items[0].amount``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def name_of(path: Path) -> str:
    return PREFIX + ".".join(str(part) for part in path)


def id_of(path: Path) -> str:
    return "field-" + "-".join(re.sub(r"[^A-Za-z0-9_]", "_", str(part)) for part in path)


def display(value: Any) -> str:
    """A value as its input shows it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


# --- the schema, as the form edits it ---------------------------------------------------------


def entries(schema: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> list[Entry]:
    """The places the form edits: the schema's properties in its order (nested objects by
    path), or, without a schema, the fields' own values by their type."""
    root = schema if schema is not None else _schema_of_value(dict(fields))
    defs = root.get("$defs", {}) if isinstance(root.get("$defs"), dict) else {}
    found: list[Entry] = []
    _walk(root, (), defs, found)
    return found


def _walk(node: Mapping[str, Any], path: Path, defs: Mapping[str, Any], out: list[Entry]) -> None:
    node, _ = _resolved(node, defs)
    for name, sub in (node.get("properties") or {}).items():
        resolved, _ = _resolved(sub, defs)
        if resolved.get("type") == "object" and "properties" in resolved:
            _walk(resolved, (*path, name), defs, out)
            continue
        items = resolved.get("items")
        if resolved.get("type") == "array" and isinstance(items, dict):
            row, _ = _resolved(items, defs)
            if row.get("type") == "object" and "properties" in row:
                columns = tuple(
                    (column, _scalar(spec, defs)) for column, spec in row["properties"].items()
                )
                out.append(Entry((*path, name), Columns(columns, sub.get("description", ""))))
                continue
        out.append(Entry((*path, name), _scalar(sub, defs)))


def _resolved(node: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """``node`` with its ``$ref`` followed and a ``null`` alternative taken off (and whether
    there was one)."""
    nullable = False
    for _ in range(8):  # a $ref chain longer than this is not one a form can show
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            node = {**defs.get(ref.removeprefix("#/$defs/"), {}), **_without(node, "$ref")}
            continue
        options = node.get("anyOf") or node.get("oneOf")
        if isinstance(options, list):
            others = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            nullable = nullable or len(others) < len(options)
            if len(others) == 1:
                node = {**others[0], **_without(node, "anyOf", "oneOf")}
                continue
        types = node.get("type")
        if isinstance(types, list) and "null" in types:
            rest = [t for t in types if t != "null"]
            nullable = True
            node = {**node, "type": rest[0] if len(rest) == 1 else rest}
        break
    return node, nullable


def _without(node: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in node.items() if key not in keys}


def _scalar(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Scalar:
    resolved, nullable = _resolved(node, defs)
    description = str(resolved.get("description", ""))
    kind: Kind = "json"
    options: tuple[Any, ...] = ()
    kind_of = resolved.get("type")
    if isinstance(resolved.get("enum"), list):
        kind, options = "enum", tuple(resolved["enum"])
        nullable = nullable or None in options
        options = tuple(option for option in options if option is not None)
    elif kind_of == "string":
        kind = "date" if resolved.get("format") == "date" else "text"
        pattern = resolved.get("pattern")
        if isinstance(pattern, str) and _is_decimal_pattern(pattern):
            kind = "decimal"
    elif kind_of in ("integer", "number", "boolean"):
        kind = kind_of
    return Scalar(kind=kind, nullable=nullable, options=options, description=description)


def _is_decimal_pattern(pattern: str) -> bool:
    try:
        compiled = re.compile(pattern)
    except re.error:
        return False
    *numbers, word = _DECIMAL_PROBES
    return all(compiled.search(n) for n in numbers) and not compiled.search(word)


def _schema_of_value(value: Any) -> dict[str, Any]:
    """A schema that fits ``value`` (a run whose pipeline names no schema for its fields)."""
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, dict):
        return {"type": "object", "properties": {k: _schema_of_value(v) for k, v in value.items()}}
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        keys = list(dict.fromkeys(key for item in value for key in item))
        columns = {key: _schema_of_value(next(i[key] for i in value if key in i)) for key in keys}
        return {"type": "array", "items": {"type": "object", "properties": columns}}
    return {}


# --- the form, as the page shows it -----------------------------------------------------------


def build(
    schema: Mapping[str, Any] | None,
    fields: Mapping[str, Any],
    problems: Sequence[str] = (),
    *,
    typed: Mapping[str, str] | None = None,
    errors: Mapping[str, str] | None = None,
) -> CorrectionForm:
    """The form for ``fields``, its inputs marked with ``problems`` (``"path: message"``, as
    validation words them); ``typed`` (a posted form) and its ``errors`` show what a reviewer
    typed instead of the fields' values."""
    by_path = _problems_by_path(problems)
    errors = errors or {}
    items: list[Input | Table] = []
    for found in entries(schema, fields):
        value = _value_at(fields, found.path)
        if isinstance(found.node, Scalar):
            items.append(_input(found.path, found.node, value, by_path, typed, errors))
            continue
        items.append(_table(found.path, found.node, value, by_path, typed, errors))
    items.sort(key=lambda item: not item.invalid)  # stable: the schema's order otherwise
    return CorrectionForm(items=tuple(items))


def _input(
    path: Path,
    scalar: Scalar,
    value: Any,
    by_path: Mapping[str, str],
    typed: Mapping[str, str] | None,
    errors: Mapping[str, str],
) -> Input:
    name = name_of(path)
    text = typed.get(name, "") if typed is not None else display(value)
    label = label_of(path)
    return Input(name, id_of(path), label, scalar, text, by_path.get(label), errors.get(name))


def _table(
    path: Path,
    node: Columns,
    value: Any,
    by_path: Mapping[str, str],
    typed: Mapping[str, str] | None,
    errors: Mapping[str, str],
) -> Table:
    name = name_of(path)
    items = value if isinstance(value, list) else []
    count = len(items) + 1  # and a blank row to add one
    removed: set[int] = set()
    if typed is not None:
        count = _row_count(typed.get(name + ROWS), count)
        removed = {i for i in range(count) if f"{name}.{i}{REMOVE}" in typed}
    rows = []
    for index in range(count):
        item = items[index] if index < len(items) and isinstance(items[index], dict) else {}
        rows.append(
            tuple(
                _input((*path, index, column), scalar, item.get(column), by_path, typed, errors)
                for column, scalar in node.columns
            )
        )
    label = label_of(path)
    rows_problems = [
        f"{where}: {text}" if where != label else text
        for where, text in by_path.items()
        if where == label or (where.startswith(label + "[") and "." not in where[len(label) :])
    ]
    return Table(
        name=name,
        id=id_of(path),
        label=label,
        columns=tuple(column for column, _ in node.columns),
        rows=tuple(rows),
        removed=frozenset(removed),
        problem="; ".join(rows_problems) or None,
        description=node.description,
    )


def _row_count(raw: str | None, default: int) -> int:
    try:
        count = int(raw or "")
    except ValueError:
        return default
    return count if 0 <= count <= MAX_ROWS else default


def _problems_by_path(problems: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for problem in problems:
        where, _, text = problem.partition(": ")
        if text:
            found[where] = f"{found[where]}; {text}" if where in found else text
    return found


def _value_at(fields: Mapping[str, Any], path: Path) -> Any:
    value: Any = fields
    for part in path:
        if isinstance(part, str) and isinstance(value, dict):
            value = value.get(part)
        elif isinstance(part, int) and isinstance(value, list) and part < len(value):
            value = value[part]
        else:
            return None
    return value
