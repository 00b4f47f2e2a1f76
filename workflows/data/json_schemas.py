"""JSON Schema as pipeline files use it: whether a schema a file gives is valid and
self-contained, and where a value breaks one.

Deterministic (no I/O: a ``$ref`` is resolved inside its schema only): workflow code checks
values with it.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from workflows.payloads import printable

Loc = tuple[Any, ...]


def schema_problems(schema: dict[str, Any]) -> list[tuple[Loc, str]]:
    """Where ``schema`` is not valid JSON Schema (its own ``$schema`` draft, else 2020-12),
    or refers outside itself (a ``$ref`` is resolved inside the schema only: nothing is
    fetched, in a workflow least of all)."""
    try:
        validator = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        validator.check_schema(schema)
    except jsonschema.SchemaError as err:
        return [(tuple(err.absolute_path), printable(err.message, 300))]
    except Exception as err:  # a $schema the library cannot resolve, for one
        return [((), printable(str(err) or type(err).__name__, 300))]
    return [
        (where, "a $ref points inside the schema only (#/...)")
        for where, ref in _refs(schema, ())
        if not (isinstance(ref, str) and ref.startswith("#"))
    ]


def _refs(node: Any, where: Loc) -> list[tuple[Loc, Any]]:
    if isinstance(node, dict):
        found = [((*where, "$ref"), node["$ref"])] if "$ref" in node else []
        for key, value in node.items():
            found += _refs(value, (*where, key))
        return found
    if isinstance(node, list):
        return [item for index, value in enumerate(node) for item in _refs(value, (*where, index))]
    return []


def value_problems(schema: dict[str, Any], value: Any) -> list[tuple[str, str]]:
    """Where ``value`` breaks ``schema``: (a field's path, what is wrong), at most 50. A
    schema that cannot be applied (a reference it cannot resolve) is one problem, never an
    exception: workflow code calls this."""
    found = []
    try:
        validator_type = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        for error in validator_type(schema).iter_errors(value):
            where = ".".join(str(part) for part in error.absolute_path) or "(document)"
            found.append((where, printable(error.message, 200)))
            if len(found) >= 50:
                break
    except Exception as err:  # whatever the library raises, the run gets one line
        return [("(schema)", printable(f"the schema cannot be applied: {err}", 200))]
    return sorted(found)


def input_problems(schema: dict[str, Any], value: Any) -> str | None:
    """The first five places where a run's input ``value`` breaks its ``schema``, as one line
    (``input.PATH: what is wrong; ...``), or None when it fits."""
    found = value_problems(schema, value)
    if not found:
        return None
    return "; ".join(f"input.{where}: {message}" for where, message in found[:5])
