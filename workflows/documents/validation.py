"""Validation of the fields a model extracted: first the schema, then the schema's business rules.

It runs inside the workflow on whatever JSON value the model produced, so it is deterministic
(no clock, no I/O) and never raises: each finding is a `Problem` naming its field by path
(``line_items[2].amount``), and the run sends a document with problems to review instead of
storing it. The business rules compare amounts and dates, which must exist first, so they run
only on a value the schema accepts; a value the schema refuses reports the schema's problems
alone.

The invoice rules (`INVOICE_RULES`) live here: each line's amount is its quantity times its unit
price, the lines plus tax make the total (both within a cent), the due date is not before the
issue date (that both dates parse is the schema's part), and the currency is an ISO 4217 code in
use (`ISO_4217_CURRENCIES`, kept in this module: nothing is downloaded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal, localcontext
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from workflows.payloads import printable

if TYPE_CHECKING:
    from workflows.documents.schemas import Invoice

M = TypeVar("M", bound=BaseModel)
Rule = Callable[[M], list["Problem"]]

CENT: Final = Decimal("0.01")
# A value broken everywhere is reported, not listed in full (the list travels in history).
MAX_PROBLEMS: Final = 50
# Enough digits that no product or sum of 18-digit amounts is ever rounded.
_PRECISION: Final = 80
# The path shown for a value that is not an object at all.
WHOLE_DOCUMENT: Final = "(document)"

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


class Problem(BaseModel):
    """One finding: the field's path (``line_items[2].amount``) and what is wrong with it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    field: str
    message: str


class ValidationReport(BaseModel):
    """What validation found: the fields in their normal JSON form (decimals as strings, dates as
    ``YYYY-MM-DD``) when the schema accepts them, and every problem, schema problems first."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    fields: dict[str, Any] | None = None
    problems: list[Problem] = []

    @property
    def valid(self) -> bool:
        """True when the fields passed the schema and every rule."""
        return self.fields is not None and not self.problems


def field_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a path: ``("line_items", 2, "amount")`` is
    ``line_items[2].amount``. Names the model made up are cut short."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = printable(str(part), 64)
            path += f".{name}" if path else name
    return path or WHOLE_DOCUMENT


def schema_problems(model: type[M], value: Any) -> tuple[M | None, list[Problem]]:
    """``value`` as ``model``, or None and the schema's problems. Never quotes the value."""
    try:
        return model.model_validate(value), []
    except ValidationError as err:
        return None, [
            Problem(field=field_path(item["loc"]), message=printable(item["msg"], 200))
            for item in err.errors(include_url=False, include_input=False)[:MAX_PROBLEMS]
        ]


def validate(model: type[M], rules: Sequence[Rule[M]], value: Any) -> ValidationReport:
    """Check ``value`` against ``model``, then against each rule (only once the schema holds)."""
    fields, found = schema_problems(model, value)
    if fields is None:
        return ValidationReport(problems=found)
    with localcontext(prec=_PRECISION):
        found = [problem for rule in rules for problem in rule(fields)]
    return ValidationReport(fields=fields.model_dump(mode="json"), problems=found[:MAX_PROBLEMS])


# ------------------------------------------------------------------------------ invoice rules


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
