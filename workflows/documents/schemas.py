"""The extraction schemas: what the model is asked to extract from a document, by name.

A request names its schema (``invoice``); the registry gives the pydantic model of the fields,
the JSON Schema the model answers in, a paragraph for the prompt, and the business rules that
`workflows.documents.validation` checks after the schema. Pure pydantic with no I/O, so the
workflow looks schemas up and validates fields itself.

The JSON Schema is made for providers' structured-output modes, which accept a subset of JSON
Schema: every object lists all its properties as required and allows no others, an optional
value is "this type or null", there are no defaults, and bounds a provider may not support
(string lengths, the most line items) are checked by the model alone. Money is a decimal string
(``"1234.50"``): never a float, so a cent is never lost on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Generic

from pydantic import BaseModel

from workflows.documents.invoice import INVOICE_DESCRIPTION, INVOICE_RULES, Invoice
from workflows.documents.validation import M, Rule, ValidationReport, validate
from workflows.errors import InvalidRequest
from workflows.payloads import printable


def llm_output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema in the form structured-output modes accept (module docstring)."""
    return _strict(model.model_json_schema())


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    strict = {key: value for key, value in node.items() if key != "default"}
    if "properties" in strict:
        strict["properties"] = {name: _strict(sub) for name, sub in strict["properties"].items()}
        strict["required"] = list(strict["properties"])
        strict["additionalProperties"] = False
    if "$defs" in strict:
        strict["$defs"] = {name: _strict(sub) for name, sub in strict["$defs"].items()}
    if "items" in strict:
        strict["items"] = _strict(strict["items"])
    if "anyOf" in strict:
        strict["anyOf"] = [_strict(sub) for sub in strict["anyOf"]]
    return strict


@dataclass(frozen=True)
class ExtractionSchema(Generic[M]):
    """A named schema: the fields' model, a paragraph for the prompt and the business rules."""

    name: str
    model: type[M]
    description: str
    rules: tuple[Rule[M], ...] = ()

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema the model must answer in (a new copy each call)."""
        return llm_output_schema(self.model)

    def check(self, value: Any) -> ValidationReport:
        """Validate what the model produced: the schema first, then the rules. Never raises."""
        return validate(self.model, self.rules, value)


INVOICE: Final = ExtractionSchema(
    name="invoice", model=Invoice, description=INVOICE_DESCRIPTION, rules=INVOICE_RULES
)

SCHEMAS: Final[Mapping[str, ExtractionSchema[Any]]] = MappingProxyType({INVOICE.name: INVOICE})


def schema_named(name: str) -> ExtractionSchema[Any]:
    """The registered schema called ``name``.

    Raises:
        InvalidRequest: no schema has that name; the message names the known ones.
    """
    try:
        return SCHEMAS[name]
    except KeyError:
        raise InvalidRequest(
            f"unknown extraction schema {printable(name, 64)!r}; the known schemas are: "
            + ", ".join(sorted(SCHEMAS))
        ) from None
