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
from datetime import date, datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Annotated, Any, Final, Generic

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from workflows.documents.validation import (
    INVOICE_RULES,
    M,
    Rule,
    ValidationReport,
    validate,
)
from workflows.errors import InvalidRequest
from workflows.payloads import printable

MAX_LINE_ITEMS: Final = 1000
MAX_NAME_CHARS: Final = 500
MAX_DESCRIPTION_CHARS: Final = 2000


def _iso_date(value: Any) -> Any:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise PydanticCustomError("iso_date", "must be an ISO 8601 date such as 2026-03-31")


def _bounded(limit: int) -> AfterValidator:
    def check(value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank", "must not be empty")
        if len(value) > limit:
            raise PydanticCustomError(
                "too_long", "is longer than {limit} characters", {"limit": limit}
            )
        return value

    return AfterValidator(check)


def _at_most_lines(items: list[LineItem]) -> list[LineItem]:
    if len(items) > MAX_LINE_ITEMS:
        raise PydanticCustomError(
            "too_many", "has more than {limit} line items", {"limit": MAX_LINE_ITEMS}
        )
    return items


Amount = Annotated[
    Decimal,
    Field(max_digits=18, decimal_places=6, allow_inf_nan=False),
    WithJsonSchema({"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"}),
]
IsoDate = Annotated[date, BeforeValidator(_iso_date)]
CurrencyCode = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]


class _Fields(BaseModel):
    # Unknown keys are problems, and the JSON Schema says "additionalProperties": false.
    model_config = ConfigDict(extra="forbid", frozen=True)


class LineItem(_Fields):
    """One line of an invoice."""

    description: Annotated[str, _bounded(MAX_DESCRIPTION_CHARS)] = Field(
        description="what was sold, as printed"
    )
    quantity: Amount = Field(description="how many units, as a decimal string")
    unit_price: Amount = Field(description="the price of one unit, as a decimal string")
    amount: Amount = Field(description="the line's amount as printed, as a decimal string")


class Invoice(_Fields):
    """The fields of an invoice."""

    vendor: Annotated[str, _bounded(MAX_NAME_CHARS)] = Field(description="who issued the invoice")
    invoice_number: Annotated[str, _bounded(MAX_NAME_CHARS)] = Field(
        description="the invoice's number or identifier, as printed"
    )
    issue_date: IsoDate = Field(description="the date of issue, YYYY-MM-DD")
    due_date: IsoDate | None = Field(
        default=None, description="the payment due date, YYYY-MM-DD, or null when none is shown"
    )
    currency: CurrencyCode = Field(description="the ISO 4217 currency code, such as USD or EUR")
    line_items: Annotated[list[LineItem], AfterValidator(_at_most_lines)] = Field(
        min_length=1, description="every line item, in the order printed"
    )
    tax: Amount = Field(default=Decimal(0), description='the total tax, "0" when none is shown')
    total: Amount = Field(description="the total due, tax included, as a decimal string")


INVOICE_DESCRIPTION: Final = (
    "An invoice. Extract who issued it (vendor), its number as printed, the issue date and the "
    "due date when one is shown (YYYY-MM-DD; null when there is none), the ISO 4217 currency "
    "code (USD, EUR, ...), every line item in order with its description, quantity, unit price "
    'and amount, the total tax ("0" when none is shown) and the total due. Write every '
    'number as a plain decimal string ("1234.50": no currency symbol, no thousands separator). '
    "Copy what the document says; never compute or invent a value it does not show."
)


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
