"""The invoice: its fields as the model extracts them, and the business rules checked once the
fields pass the schema.

Each line's amount is its quantity times its unit price, the lines plus tax make the total (both
within a cent), the due date is not before the issue date (that both dates parse is the
schema's part), and the currency is an ISO 4217 code in use (`ISO_4217_CURRENCIES`, kept in this
module: nothing is downloaded).
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from workflows.documents.validation import Rule
from workflows.steps.document_payloads import Problem

CENT: Final = Decimal("0.01")

# ISO 4217 List One: the alphabetic codes of currencies in use (2025 amendments: XCG replaced ANG,
# ZWG replaced ZWL, SLE replaced SLL). Codes that are not money an invoice is paid in are left
# out: precious metals (XAU, XAG, XPD, XPT), bond-market units (XBA-XBD), XDR, XSU, XUA, the
# testing code XTS and "no currency" XXX.
_LIST_ONE = """
AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP
BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB
EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD
JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP
MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR
RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND
TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XCD XCG XOF XPF
YER ZAR ZMW ZWG
"""
ISO_4217_CURRENCIES: Final = frozenset(_LIST_ONE.split())


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


def line_amounts_match(invoice: Invoice) -> list[Problem]:
    """Each line's amount is its quantity times its unit price, within a cent."""
    found = []
    for index, line in enumerate(invoice.line_items):
        expected = line.quantity * line.unit_price
        if abs(expected - line.amount) > CENT:
            found.append(
                Problem(
                    field=f"line_items[{index}].amount",
                    message=f"is {line.amount}, but quantity * unit_price is {expected}",
                )
            )
    return found


def total_matches(invoice: Invoice) -> list[Problem]:
    """The line amounts plus tax make the total, within a cent."""
    lines = sum((line.amount for line in invoice.line_items), Decimal(0))
    expected = lines + invoice.tax
    if abs(expected - invoice.total) <= CENT:
        return []
    return [
        Problem(
            field="total",
            message=(
                f"is {invoice.total}, but the line amounts ({lines}) plus tax ({invoice.tax}) "
                f"make {expected}"
            ),
        )
    ]


def due_after_issue(invoice: Invoice) -> list[Problem]:
    """The due date, when there is one, is not before the issue date."""
    if invoice.due_date is None or invoice.due_date >= invoice.issue_date:
        return []
    return [
        Problem(
            field="due_date",
            message=(
                f"{invoice.due_date.isoformat()} is before issue_date "
                f"{invoice.issue_date.isoformat()}"
            ),
        )
    ]


def currency_in_use(invoice: Invoice) -> list[Problem]:
    """The currency is an ISO 4217 code of a currency in use."""
    if invoice.currency in ISO_4217_CURRENCIES:
        return []
    return [
        Problem(
            field="currency",
            message=f"{invoice.currency} is not an ISO 4217 code of a currency in use",
        )
    ]


INVOICE_RULES: Final[tuple[Rule[Invoice], ...]] = (
    line_amounts_match,
    total_matches,
    due_after_issue,
    currency_in_use,
)
