"""Which values a route step can meet, read from the JSON Schema of the value it routes on, and
the cases that no such value can match (``aiorch pipeline check``'s ``unknown-case``).

A route compares the value as text (``str(value)``, ``""`` for null) with each case, so a case
outside the schema's ``enum``, its ``const``, or the texts its type allows (``True``/``False``
for a boolean, digits for an integer, ``""`` for null) is never taken: a ``refunds`` case
against an enum of ``refund`` would send every refund the default way, past its review. A
schema that allows any text (a string without an enum, a number, ``anyOf``...) names no case
as unmatchable.

Deterministic and pure: the compiler runs it as one of its advisory checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from workflows.payloads import printable

# How many allowed values a problem lists.
SHOWN_VALUES = 12

_MATCHED_BY_TYPE: Mapping[str, Callable[[str], bool]] = MappingProxyType(
    {
        "boolean": lambda case: case in ("True", "False"),
        "integer": lambda case: re.fullmatch(r"0|[1-9][0-9]*", case) is not None,
        "null": lambda case: case == "",
    }
)


def shown(value: Any) -> str:
    """``value`` as the route compares it."""
    return "" if value is None else str(value)


def subschema(schema: Any, parts: Iterable[str]) -> Any:
    """The JSON Schema at ``parts`` (fields, or item indexes) below ``schema``, or None when
    the schema does not say."""
    current = schema
    for part in parts:
        if not isinstance(current, dict):
            return None
        properties = current.get("properties")
        if isinstance(properties, dict) and part in properties:
            current = properties[part]
        elif part.isdigit() and isinstance(current.get("items"), dict):
            current = current["items"]
        else:
            return None
    return current


def never_matched(schema: Any, cases: Iterable[str]) -> tuple[list[str], list[str] | None]:
    """The cases no value of ``schema`` can match, and the values it allows as the route sees
    them (None when it allows texts beyond a list: a type)."""
    if not isinstance(schema, dict):
        return [], None
    if "const" in schema:
        allowed = [shown(schema["const"])]
        return [case for case in cases if case not in allowed], allowed
    if isinstance(schema.get("enum"), list):
        allowed = list(dict.fromkeys(shown(value) for value in schema["enum"]))
        return [case for case in cases if case not in allowed], allowed
    types = schema.get("type")
    names = [types] if isinstance(types, str) else types
    if not isinstance(names, list) or not names or any(n not in _MATCHED_BY_TYPE for n in names):
        return [], None
    return [c for c in cases if not any(_MATCHED_BY_TYPE[n](c) for n in names)], None


def problem(path: str, schema: Any, case: str, allowed: list[str] | None) -> str:
    """Why ``case`` is never taken: the values, or the type, of the routed ``path``."""
    if allowed is not None:
        listed = ", ".join(printable(value, 40) or '""' for value in allowed[:SHOWN_VALUES])
        more = ", ..." if len(allowed) > SHOWN_VALUES else ""
        return f"{printable(case, 64)!r} is not a value of {path} ({listed}{more})"
    return f"{printable(case, 64)!r} is no {schema.get('type')} value of {path}, so never matches"
