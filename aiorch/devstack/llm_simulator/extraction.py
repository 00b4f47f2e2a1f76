"""The simulator as a field extractor: when the system prompt carries a JSON Schema (the
document pipeline's extraction prompt), the reply is one JSON object read off the document.

A deterministic stand-in for a model, good enough to exercise the pipeline offline:

- a top-level property takes the value of a ``Label: value`` line whose label, lowercased with
  spaces as underscores, is its name (``Invoice number: INV-7`` -> ``invoice_number``);
- an array of objects takes one item per ``Line: a | b | c`` line, the values in the order
  of the item's properties;
- a reviewer's feedback line of the same ``Label: value`` form overrides what the document says
  (so a re-analysis with feedback can fix a field);
- a property with an ``enum`` that no such line gives takes the value the document mentions
  last, as a whole word, ignoring case (a prompt that lists the choices and then quotes a
  ticket gets the choice the ticket names; one that names none gets the last choice listed);
- a property the document does not show is null.

Values are strings, as the document prints them; directives (``[sim:...]``) are stripped.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from aiorch.devstack.llm_simulator.faults import strip_directives

SCHEMA_MARKER = "JSON Schema: "
_LABELLED = re.compile(
    r"^\s*(?:Reviewer feedback:\s*)?(?P<label>[A-Za-z][A-Za-z _-]{0,60}):\s*(?P<value>.*?)\s*$"
)
_ITEM_LABEL = "line"


def output_schema(system_prompt: str) -> dict[str, Any] | None:
    """The JSON Schema a system prompt asks the reply to follow, if it asks for one."""
    _, marker, rest = system_prompt.partition(SCHEMA_MARKER)
    if not marker:
        return None
    try:
        schema = json.loads(rest.strip())
    except json.JSONDecodeError:
        return None
    return schema if isinstance(schema, dict) else None


def _key(label: str) -> str:
    return re.sub(r"[\s-]+", "_", label.strip().lower())


def _item_properties(schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    items = spec.get("items", {})
    if "$ref" in items:
        items = schema.get("$defs", {}).get(items["$ref"].rsplit("/", 1)[-1], {})
    return list(items.get("properties", {}))


def extract(schema: dict[str, Any], document: str, feedback: list[str]) -> dict[str, Any]:
    """The object ``schema`` asks for, read off ``document`` (feedback lines win)."""
    values: dict[str, str] = {}
    rows: list[list[str]] = []
    for line in [*document.splitlines(), *feedback]:
        match = _LABELLED.match(strip_directives(line))
        if match is None:
            continue
        key, value = _key(match.group("label")), match.group("value")
        if key == _ITEM_LABEL:
            rows.append([cell.strip() for cell in value.split("|")])
        else:
            values[key] = value
    found: dict[str, Any] = {}
    for name, spec in schema.get("properties", {}).items():
        if spec.get("type") == "array":
            columns = _item_properties(schema, spec)
            found[name] = [dict(zip(columns, row, strict=False)) for row in rows]
        elif name not in values and isinstance(spec.get("enum"), list):
            found[name] = mentioned_last(spec["enum"], strip_directives(document))
        else:
            found[name] = values.get(name)
    return found


def mentioned_last(choices: list[Any], text: str) -> Any:
    """The choice ``text`` mentions last as a whole word (case ignored), or None."""
    best, at = None, -1
    for choice in choices:
        if not isinstance(choice, str) or not choice:
            continue
        for match in re.finditer(rf"(?<!\w){re.escape(choice)}(?!\w)", text, re.IGNORECASE):
            if match.start() > at:
                best, at = choice, match.start()
    return best


def off_by_one(found: dict[str, Any], name: str) -> dict[str, Any]:
    """``found`` with the decimal field ``name`` one more than the document says (a wrong
    answer a rule such as "total = subtotal + tax" catches); unchanged when it is no number."""
    try:
        value = Decimal(str(found.get(name)))
    except InvalidOperation:
        return found
    if not value.is_finite():
        return found
    return {**found, name: str(value + 1)}
