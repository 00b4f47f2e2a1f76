"""The extraction-schema registry: lookup by name, the JSON Schema a model answers in, and the
deterministic-code rules for ``workflows/documents`` (it runs inside the workflow)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, WithJsonSchema

from tests.unit.test_workflow_code import violations
from workflows.documents import SCHEMAS, Invoice, schema_named
from workflows.documents.schemas import INVOICE, llm_output_schema
from workflows.errors import InvalidRequest

DOCUMENTS_DIR = Path(__file__).resolve().parents[2] / "workflows" / "documents"


def _objects(node: Any) -> list[dict[str, Any]]:
    """Every object schema in ``node``, nested ones included."""
    found = []
    if isinstance(node, dict):
        if "properties" in node:
            found.append(node)
        for value in node.values():
            found.extend(_objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_objects(value))
    return found


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {key for value in node.values() for key in _keys(value)}
    if isinstance(node, list):
        return {key for value in node for key in _keys(value)}
    return set()


def test_invoice_is_registered_under_its_name() -> None:
    """``invoice`` names the invoice schema, whose model is `Invoice`."""
    assert schema_named("invoice") is INVOICE
    assert INVOICE.model is Invoice
    assert set(SCHEMAS) == {"invoice"}


def test_unknown_schema_is_an_invalid_request_naming_the_known_ones() -> None:
    """An unknown name raises InvalidRequest with one line that names the known schemas and
    shows the unknown name, whole up to 64 characters, cut short beyond."""
    with pytest.raises(InvalidRequest) as info:
        schema_named("receipt" + "x" * 500)
    assert str(info.value) == (
        f"unknown extraction schema {'receipt' + 'x' * 51 + ' [cut]'!r}; "
        "the known schemas are: invoice"
    )
    with pytest.raises(InvalidRequest) as info:
        schema_named("r" * 64)
    assert str(info.value) == (
        f"unknown extraction schema {'r' * 64!r}; the known schemas are: invoice"
    )


def test_the_registry_cannot_be_changed_by_a_run() -> None:
    """The registry is read-only: workflow code shares it between runs."""
    with pytest.raises(TypeError):
        SCHEMAS["receipt"] = INVOICE  # type: ignore[index]


def test_json_schema_suits_structured_output_modes() -> None:
    """Every object requires all its properties and allows no others, nothing has a default,
    and the optional due date is "a date or null"."""
    schema = INVOICE.json_schema()
    objects = _objects(schema)
    assert len(objects) == 2  # the invoice and its line item
    for node in objects:
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])
    assert "default" not in _keys(schema)
    due = schema["properties"]["due_date"]["anyOf"]
    assert {"type": "string", "format": "date"} in due
    assert {"type": "null"} in due


# An object a schema writes inline (not a model of its own), with a default.
Inline = Annotated[
    dict[str, str],
    WithJsonSchema({"type": "object", "properties": {"code": {"type": "string", "default": "A"}}}),
]


class Part(BaseModel):
    name: str = "bolt"
    kind: Inline


class Order(BaseModel):
    parts: list[Part]
    codes: list[Inline]
    spare: Inline | None = None


def test_every_object_of_any_model_is_made_strict() -> None:
    """However a model nests its objects (a model of its own, inline in a list, one of an
    "or null"), each requires all its properties and allows no others, and nothing keeps a
    default."""
    schema = llm_output_schema(Order)
    objects = _objects(schema)
    assert len(objects) == 5  # the order, its part, and the inline object in three places
    for node in objects:
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])
    assert "default" not in _keys(schema)


def test_money_is_a_decimal_string_in_the_json_schema() -> None:
    """Amounts, quantities, tax and total are strings of a decimal, never JSON numbers."""
    schema = INVOICE.json_schema()
    line = schema["$defs"]["LineItem"]["properties"]
    for node in (line["quantity"], line["unit_price"], line["amount"]):
        assert node["type"] == "string"
        assert node["pattern"] == r"^-?[0-9]+(\.[0-9]+)?$"
    assert schema["properties"]["total"]["type"] == "string"
    assert schema["properties"]["tax"]["type"] == "string"
    assert schema["properties"]["currency"]["pattern"] == "^[A-Z]{3}$"


def test_json_schema_is_a_fresh_copy_each_time() -> None:
    """Changing the schema one caller got changes nothing for the next (runs share the
    registry)."""
    first = INVOICE.json_schema()
    first["properties"].clear()
    assert INVOICE.json_schema()["properties"]


def test_description_is_one_paragraph_naming_the_fields() -> None:
    """The prompt's paragraph names what to extract and how to write numbers and dates."""
    description = INVOICE.description
    assert "\n" not in description
    for word in ("vendor", "due date", "ISO 4217", "line item", "tax", "total", "YYYY-MM-DD"):
        assert word in description


@pytest.mark.parametrize("module", sorted(DOCUMENTS_DIR.glob("*.py")), ids=lambda path: path.name)
def test_document_modules_keep_the_sandbox_rules(module: Path) -> None:
    """No wall clock, randomness, environment, files, I/O clients or mutable module state in
    the document pipeline's workflow-side modules."""
    assert violations(module.read_text("utf-8")) == []
