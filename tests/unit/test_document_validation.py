"""Validation of extracted invoice fields: the schema's problems first, then each business rule
on its own, with the field named by path; within-a-cent boundaries; never an exception."""

from __future__ import annotations

import copy
from datetime import date, datetime
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError, field_validator

from workflows.documents.invoice import (
    ISO_4217_CURRENCIES,
    MAX_DESCRIPTION_CHARS,
    MAX_LINE_ITEMS,
    MAX_NAME_CHARS,
    _bounded,
)
from workflows.documents.schemas import INVOICE
from workflows.documents.validation import WHOLE_DOCUMENT, field_path, validate
from workflows.steps.document_payloads import MAX_PROBLEMS, Problem


def valid_invoice() -> dict[str, Any]:
    """Three lines (one with a fractional quantity and a sub-cent price), tax, and a total that
    adds up exactly."""
    return {
        "vendor": "ACME Supplies Ltd",
        "invoice_number": "INV-2026-0042",
        "issue_date": "2026-03-01",
        "due_date": "2026-03-31",
        "currency": "EUR",
        "line_items": [
            {"description": "Widgets", "quantity": "3", "unit_price": "4.99", "amount": "14.97"},
            {"description": "Consulting", "quantity": "1.5", "unit_price": "80", "amount": "120"},
            {"description": "Bolts", "quantity": "1000", "unit_price": "0.0125", "amount": "12.5"},
        ],
        "tax": "28.19",
        "total": "175.66",
    }


def fields_of(problems: list[Problem]) -> list[str]:
    return [problem.field for problem in problems]


def test_a_valid_invoice_has_no_problems_and_normal_fields() -> None:
    """A consistent invoice passes, and its fields come back in their JSON form: decimals as
    strings exactly as written, dates as YYYY-MM-DD."""
    report = INVOICE.check(valid_invoice())
    assert report.problems == []
    assert report.valid
    assert report.fields is not None
    assert report.fields["line_items"][2]["unit_price"] == "0.0125"
    assert report.fields["total"] == "175.66"
    assert report.fields["due_date"] == "2026-03-31"


def test_optional_fields_may_be_null_or_absent() -> None:
    """Without a due date (null or left out) and without tax, an invoice still passes; tax is
    then 0."""
    invoice = valid_invoice()
    invoice["due_date"] = None
    del invoice["tax"]
    invoice["total"] = "147.47"
    report = INVOICE.check(invoice)
    assert report.problems == []
    assert report.fields is not None
    assert report.fields["tax"] == "0"
    invoice.pop("due_date")
    assert INVOICE.check(invoice).valid


def test_json_numbers_are_taken_as_decimals() -> None:
    """A model that writes amounts as JSON numbers is understood too (no float error: 0.1 + 0.2
    makes 0.3 exactly)."""
    invoice = valid_invoice()
    invoice["line_items"] = [
        {"description": "a", "quantity": 1, "unit_price": 0.1, "amount": 0.1},
        {"description": "b", "quantity": 1, "unit_price": 0.2, "amount": 0.2},
    ]
    invoice["tax"] = 0
    invoice["total"] = 0.3
    assert INVOICE.check(invoice).problems == []


def _with(change: dict[str, Any], line: int | None = None) -> dict[str, Any]:
    invoice = valid_invoice()
    target = invoice if line is None else invoice["line_items"][line]
    target.update(change)
    return invoice


@pytest.mark.parametrize(
    ("invoice", "field", "words"),
    [
        pytest.param(
            _with({"amount": "15.97", "quantity": "3"}, line=0) | {"total": "176.66"},
            "line_items[0].amount",
            "quantity * unit_price is 14.97",
            id="line-amount",
        ),
        pytest.param(
            _with({"total": "175.00"}),
            "total",
            "plus tax (28.19) make 175.66",
            id="total",
        ),
        pytest.param(
            _with({"tax": "30.00"}),
            "total",
            "make 177.47",
            id="tax-not-in-total",
        ),
        pytest.param(
            _with({"due_date": "2026-02-28"}),
            "due_date",
            "2026-02-28 is before issue_date 2026-03-01",
            id="due-before-issue",
        ),
        pytest.param(
            _with({"currency": "XYZ"}),
            "currency",
            "XYZ is not an ISO 4217 code",
            id="currency-unknown",
        ),
        pytest.param(
            _with({"currency": "XAU"}),
            "currency",
            "not an ISO 4217 code of a currency in use",
            id="currency-gold",
        ),
    ],
)
def test_each_rule_broken_alone_is_reported_on_its_field(
    invoice: dict[str, Any], field: str, words: str
) -> None:
    """Breaking one business rule gives exactly one problem, on the right field, saying what
    was expected; the fields still come back (the schema held)."""
    report = INVOICE.check(invoice)
    assert fields_of(report.problems) == [field]
    assert words in report.problems[0].message
    assert report.fields is not None
    assert not report.valid


@pytest.mark.parametrize(
    ("invoice", "field"),
    [
        pytest.param(_with({"issue_date": "31/03/2026"}), "issue_date", id="date-format"),
        pytest.param(_with({"issue_date": "2026-02-30"}), "issue_date", id="no-such-day"),
        pytest.param(_with({"due_date": 1767225600}), "due_date", id="timestamp"),
        pytest.param(
            _with({"issue_date": "2026-03-01T10:00:00"}), "issue_date", id="datetime-not-date"
        ),
        pytest.param(_with({"currency": "eur"}), "currency", id="currency-lowercase"),
        pytest.param(_with({"total": "12,50"}), "total", id="decimal-comma"),
        pytest.param(_with({"total": "NaN"}), "total", id="not-a-number"),
        pytest.param(_with({"tax": "1e40"}), "tax", id="too-many-digits"),
        pytest.param(
            _with({"unit_price": "0.0000001"}, line=1),
            "line_items[1].unit_price",
            id="too-many-places",
        ),
        pytest.param(
            _with({"description": "  "}, line=2),
            "line_items[2].description",
            id="blank-description",
        ),
        pytest.param(_with({"line_items": []}), "line_items", id="no-lines"),
        pytest.param(_with({"vendor": None}), "vendor", id="vendor-null"),
        pytest.param(_with({"discount": "5"}), "discount", id="unknown-field"),
    ],
)
def test_schema_problems_name_the_field(invoice: dict[str, Any], field: str) -> None:
    """A value the schema refuses is one problem on its field path, with no fields returned."""
    report = INVOICE.check(invoice)
    assert fields_of(report.problems) == [field]
    assert report.fields is None


def test_dates_in_other_iso_8601_forms_parse() -> None:
    """ISO 8601's basic form (20260301) and surrounding spaces are dates too."""
    report = INVOICE.check(_with({"issue_date": "20260301", "due_date": " 2026-03-31 "}))
    assert report.problems == []
    assert report.fields is not None
    assert report.fields["issue_date"] == "2026-03-01"


def test_missing_fields_are_each_reported() -> None:
    """Every required field that is missing is its own problem ("Field required")."""
    invoice = valid_invoice()
    for name in ("vendor", "invoice_number", "issue_date", "currency", "line_items", "total"):
        del invoice[name]
    report = INVOICE.check(invoice)
    assert set(fields_of(report.problems)) == {
        "vendor",
        "invoice_number",
        "issue_date",
        "currency",
        "line_items",
        "total",
    }
    assert {problem.message for problem in report.problems} == {"Field required"}


def test_schema_problems_come_alone() -> None:
    """The rules need a well-formed invoice: with a schema problem, a wrong total is not
    reported yet (it will be once the schema holds)."""
    report = INVOICE.check(_with({"issue_date": "soon", "total": "1.00"}))
    assert fields_of(report.problems) == ["issue_date"]


def test_several_broken_rules_are_all_reported_in_order() -> None:
    """Rules run in order (lines, total, dates, currency) and each reports its problems."""
    invoice = _with({"due_date": "2026-01-01", "currency": "ABC", "total": "1"})
    invoice["line_items"][1]["amount"] = "121"
    report = INVOICE.check(invoice)
    assert fields_of(report.problems) == ["line_items[1].amount", "total", "due_date", "currency"]


@pytest.mark.parametrize(
    ("amount", "ok"),
    [("14.97", True), ("14.98", True), ("14.96", True), ("14.981", False), ("14.959", False)],
)
def test_a_line_amount_may_be_off_by_a_cent_at_most(amount: str, ok: bool) -> None:
    """3 x 4.99 = 14.97: an amount within 0.01 of it passes (rounding on the invoice), one
    further off is reported."""
    invoice = valid_invoice()
    invoice["line_items"][0]["amount"] = amount
    lines = sum(float(item["amount"]) for item in invoice["line_items"])
    invoice["total"] = f"{lines + 28.19:.3f}"
    found = fields_of(INVOICE.check(invoice).problems)
    assert ("line_items[0].amount" not in found) is ok
    assert "total" not in found


@pytest.mark.parametrize(
    ("total", "ok"),
    [("175.66", True), ("175.67", True), ("175.65", True), ("175.671", False), ("175.649", False)],
)
def test_the_total_may_be_off_by_a_cent_at_most(total: str, ok: bool) -> None:
    """Lines 147.47 plus tax 28.19 make 175.66: a total within 0.01 of it passes."""
    found = fields_of(INVOICE.check(_with({"total": total})).problems)
    assert (found == []) is ok
    assert found in ([], ["total"])


def test_due_date_on_the_issue_date_passes() -> None:
    """A due date equal to the issue date (payable at once) is not before it."""
    assert INVOICE.check(_with({"due_date": "2026-03-01"})).problems == []


def test_every_active_currency_passes_and_the_list_is_iso_shaped() -> None:
    """The currency list holds three-letter codes only, the common ones among them, none of the
    withdrawn or non-money codes."""
    assert all(len(code) == 3 and code.isupper() for code in ISO_4217_CURRENCIES)
    assert {"USD", "EUR", "GBP", "JPY", "CHF", "XCG", "ZWG"} <= ISO_4217_CURRENCIES
    assert not {"ANG", "HRK", "ZWL", "XAU", "XTS", "XXX"} & ISO_4217_CURRENCIES
    assert INVOICE.check(_with({"currency": "JPY"})).problems == []


def test_too_many_line_items_is_one_problem() -> None:
    """More than MAX_LINE_ITEMS lines is refused as one problem on line_items; exactly
    MAX_LINE_ITEMS lines are taken."""
    line = {"description": "x", "quantity": "1", "unit_price": "1", "amount": "1"}
    invoice = _with({"line_items": [line] * (MAX_LINE_ITEMS + 1)})
    assert fields_of(INVOICE.check(invoice).problems) == ["line_items"]
    total = str(MAX_LINE_ITEMS)
    full = _with({"line_items": [line] * MAX_LINE_ITEMS, "tax": "0", "total": total})
    assert INVOICE.check(full).problems == []


def test_problems_are_capped() -> None:
    """A value broken everywhere gives at most MAX_PROBLEMS problems (the list goes into
    history)."""
    broken = [{"description": "", "quantity": "x", "unit_price": "x", "amount": "x"}] * 100
    problems = INVOICE.check(_with({"line_items": broken})).problems
    assert len(problems) == MAX_PROBLEMS


def test_rule_problems_are_capped_too() -> None:
    """An invoice the schema accepts but whose every line amount is wrong gives MAX_PROBLEMS
    problems, the first lines' first, not one per line (the cap holds for the business rules
    as for the schema)."""
    wrong = {"description": "x", "quantity": "1", "unit_price": "1", "amount": "2"}
    report = INVOICE.check(_with({"line_items": [wrong] * (MAX_PROBLEMS * 2), "total": "0"}))
    assert report.fields is not None  # the schema held: these are the rules' problems
    assert len(report.problems) == MAX_PROBLEMS
    assert report.problems[0].field == "line_items[0].amount"


@pytest.mark.parametrize("value", [None, [], "an invoice", 42, [valid_invoice()]])
def test_a_value_that_is_not_an_object_is_one_problem(value: Any) -> None:
    """A reply that is not a JSON object is reported against the whole document."""
    assert fields_of(INVOICE.check(value).problems) == [WHOLE_DOCUMENT]


def test_problems_never_quote_the_value() -> None:
    """A wrong value's text (possibly personal data) is not repeated in schema problems."""
    secret = "Jane Doe, 1 Secret Lane"
    report = INVOICE.check(_with({"issue_date": secret, "currency": secret, "tax": secret}))
    assert len(report.problems) == 3
    assert all(secret not in problem.message for problem in report.problems)


def test_field_paths() -> None:
    """Locations become dotted paths with list indexes in brackets."""
    assert field_path(("line_items", 2, "amount")) == "line_items[2].amount"
    assert field_path(("total",)) == "total"
    assert field_path(()) == WHOLE_DOCUMENT


def test_checking_leaves_the_value_unchanged() -> None:
    """Validation reads the model's reply and never changes it."""
    invoice = valid_invoice()
    before = copy.deepcopy(invoice)
    INVOICE.check(invoice)
    assert invoice == before


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=6)
    ),
    max_leaves=30,
)
FIELD_VALUES = st.dictionaries(
    st.sampled_from(sorted(valid_invoice())),
    JSON | st.sampled_from(["2026-01-01", "USD", "1.00", "-3", "1e3"]),
)


@settings(max_examples=300, deadline=None)
@given(JSON | FIELD_VALUES.map(lambda changes: valid_invoice() | changes))
def test_validation_never_raises(value: Any) -> None:
    """Whatever JSON a model produces, validation returns a report (it runs in the workflow,
    where an exception would fail the workflow task) whose problems name fields."""
    report = INVOICE.check(value)
    assert report.valid == (report.fields is not None and not report.problems)
    assert all(problem.field for problem in report.problems)


@pytest.mark.parametrize(
    ("invoice", "problem"),
    [
        pytest.param(
            _with({"amount": "15.97"}, line=0) | {"total": "176.66"},
            ("line_items[0].amount", "is 15.97, but quantity * unit_price is 14.97"),
            id="line-amount",
        ),
        pytest.param(
            _with({"total": "175.00"}),
            ("total", "is 175.00, but the line amounts (147.47) plus tax (28.19) make 175.66"),
            id="total",
        ),
        pytest.param(
            _with({"due_date": "2026-02-28"}),
            ("due_date", "2026-02-28 is before issue_date 2026-03-01"),
            id="due-before-issue",
        ),
        pytest.param(
            _with({"currency": "XYZ"}),
            ("currency", "XYZ is not an ISO 4217 code of a currency in use"),
            id="currency",
        ),
        pytest.param(
            _with({"issue_date": "soon"}),
            ("issue_date", "must be an ISO 8601 date such as 2026-03-31"),
            id="date",
        ),
        pytest.param(_with({"vendor": " "}), ("vendor", "must not be empty"), id="blank-vendor"),
        pytest.param(
            _with({"invoice_number": "7" * (MAX_NAME_CHARS + 1)}),
            ("invoice_number", f"is longer than {MAX_NAME_CHARS} characters"),
            id="long-number",
        ),
        pytest.param(
            _with({"description": "d" * (MAX_DESCRIPTION_CHARS + 1)}, line=1),
            ("line_items[1].description", f"is longer than {MAX_DESCRIPTION_CHARS} characters"),
            id="long-description",
        ),
        pytest.param(
            _with({"line_items": [valid_invoice()["line_items"][0]] * (MAX_LINE_ITEMS + 1)}),
            ("line_items", f"has more than {MAX_LINE_ITEMS} line items"),
            id="too-many-lines",
        ),
    ],
)
def test_each_problem_reads_as_the_reviewer_sees_it(
    invoice: dict[str, Any], problem: tuple[str, str]
) -> None:
    """A problem's field and message are exactly what the review shows: what is wrong, with
    the values a rule compared (never the refused value itself)."""
    found = INVOICE.check(invoice).problems
    assert [(p.field, p.message) for p in found] == [problem]


def test_names_and_descriptions_may_be_as_long_as_their_limit() -> None:
    """A vendor, an invoice number and a line's description at exactly their limits pass."""
    invoice = _with({"vendor": "v" * MAX_NAME_CHARS, "invoice_number": "7" * MAX_NAME_CHARS})
    invoice["line_items"][0]["description"] = "d" * MAX_DESCRIPTION_CHARS
    assert INVOICE.check(invoice).problems == []


def test_a_line_amount_problem_shows_the_exact_product() -> None:
    """Quantity times unit price is computed without rounding, however many digits it takes
    (here 29), so the problem shows the exact product."""
    line = {
        "description": "Shares",
        "quantity": "123456789012.345678",
        "unit_price": "123456.654321",
        "amount": "1",
    }
    [problem] = INVOICE.check(_with({"line_items": [line], "tax": "0", "total": "1"})).problems
    assert problem.message == "is 1, but quantity * unit_price is 15241562124677791.370204374638"


def test_made_up_field_names_are_cut_short_in_paths() -> None:
    """A field name the model made up is shown whole up to 64 characters, cut beyond."""
    assert field_path(("k" * 64,)) == "k" * 64
    assert field_path(("line_items", 0, "k" * 65)) == "line_items[0]." + "k" * 58 + " [cut]"


class _Strict(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def _short(cls, name: str) -> str:
        raise ValueError("n" * len(name))


@pytest.mark.parametrize(("length", "shown"), [(187, "n" * 187), (188, "n" * 181 + " [cut]")])
def test_schema_messages_are_cut_at_200_characters(length: int, shown: str) -> None:
    """A schema's message (pydantic's "Value error, " and the validator's words) is shown
    whole up to 200 characters, cut beyond."""
    [problem] = validate(_Strict, (), {"name": "x" * length}).problems
    assert problem.message == "Value error, " + shown


@pytest.mark.parametrize(
    ("value", "message"),
    [("abc", None), ("abcd", "is longer than 3 characters"), (" \t", "must not be empty")],
)
def test_a_bounded_text_is_not_blank_and_at_most_its_limit(value: str, message: str | None) -> None:
    """A bounded text (a name, a description) is taken up to its limit in characters; a longer
    or a blank one is refused saying which."""
    bounded = TypeAdapter(Annotated[str, _bounded(3)])
    if message is None:
        assert bounded.validate_python(value) == value
    else:
        with pytest.raises(ValidationError) as info:
            bounded.validate_python(value)
        assert [error["msg"] for error in info.value.errors()] == [message]


def test_dates_given_as_dates_are_taken_and_times_are_not() -> None:
    """Fields given as Python values (not JSON) take a date as it is and refuse a date with a
    time of day, as they refuse its ISO text."""
    assert INVOICE.check(_with({"issue_date": date(2026, 3, 1)})).problems == []
    report = INVOICE.check(_with({"issue_date": datetime(2026, 3, 1, 10, 0)}))
    assert fields_of(report.problems) == ["issue_date"]
