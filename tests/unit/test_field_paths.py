"""Fields by path (`aiorch.ops.field_paths`) and the corrections `review ID correct` builds
from them (`aiorch.cli.review_corrections`), and how the ``review`` group routes a command
line that names the run first."""

from __future__ import annotations

from typing import Any

import pytest

from aiorch.cli.output import UsageError
from aiorch.cli.review_corrections import changes, corrected_fields, parsed_sets
from aiorch.cli.review_group import routed
from aiorch.ops import field_paths
from aiorch.ops.field_paths import FieldPathError
from workflows.documents.validation import field_path

FIELDS: dict[str, Any] = {
    "vendor": "Globex",
    "due_date": None,
    "line_items": [{"amount": "1200.00", "quantity": 10}, {"amount": "340.50", "quantity": 1}],
    "paid": False,
    "total": "2100.00",
}


def test_a_path_parses_into_the_steps_validation_writes_it_with() -> None:
    """``line_items[1].amount`` is a name, an index and a name, and written back the way
    validation names a problem's field; what is no path is refused with an example."""
    for text in ("total", "line_items[1].amount", "a[0][2].b"):
        path = field_paths.parse(text)
        assert field_paths.shown(path) == field_path(path) == text
    assert field_paths.parse("line_items[1].amount") == ("line_items", 1, "amount")
    for bad in ("", "[1]", "a..b", "a.", "a[x]", "a[1", ".a"):
        with pytest.raises(FieldPathError, match="is not a field path"):
            field_paths.parse(bad)


def test_leaves_list_every_value_by_its_path_in_order() -> None:
    """Every value that holds no other, with its path, in the fields' order."""
    assert field_paths.leaves(FIELDS) == [
        ("vendor", "Globex"),
        ("due_date", None),
        ("line_items[0].amount", "1200.00"),
        ("line_items[0].quantity", 10),
        ("line_items[1].amount", "340.50"),
        ("line_items[1].quantity", 1),
        ("paid", False),
        ("total", "2100.00"),
    ]
    assert field_paths.leaves({"items": [], "note": {}}) == [("items", []), ("note", {})]


def test_a_set_changes_one_value_and_reads_it_as_its_field_s_type() -> None:
    """`--set` changes the one value its path names, in a copy: text stays text (a decimal
    too), a number is read as a number, a boolean as true/false, an empty field takes text."""
    sets = parsed_sets(
        [
            "line_items[1].amount=5",
            "line_items[0].quantity=12",
            "paid=true",
            "due_date=2026-12-20",
            "vendor=Globex = Ltd",
        ]
    )
    corrected = corrected_fields(FIELDS, None, sets)
    assert corrected["line_items"] == [
        {"amount": "1200.00", "quantity": 12},
        {"amount": "5", "quantity": 1},
    ]
    assert (corrected["paid"], corrected["due_date"]) == (True, "2026-12-20")
    assert corrected["vendor"] == "Globex = Ltd"
    assert FIELDS["line_items"][1]["amount"] == "340.50"  # the run's fields are left as they are
    assert changes(FIELDS, corrected) == [
        "vendor: Globex -> Globex = Ltd",
        "due_date: null -> 2026-12-20",
        "line_items[0].quantity: 10 -> 12",
        "line_items[1].amount: 340.50 -> 5",
        "paid: false -> true",
    ]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["totl=1"], "totl names no field of the run's fields (they are: vendor, due_date, "),
        (["line_items[2].amount=1"], "line_items has 2 item(s), from [0]"),
        (["line_items[0].price=1"], "line_items[0] has: amount, quantity"),
        (["total.cents=1"], "total holds one value"),
        (["line_items[0].quantity=ten"], "line_items[0].quantity holds a number; 'ten' is not"),
        (["paid=yes"], "paid holds a boolean (true or false); 'yes' is not one"),
        (["line_items={}"], "line_items holds a list (as JSON); '{}' is not one"),
    ],
)
def test_a_path_that_names_no_field_or_a_value_of_another_type_is_a_usage_error(
    sets: list[str], message: str
) -> None:
    """A path past what the fields hold, or a value not of its field's type, is a usage error
    (exit 2) that says what the fields hold there."""
    with pytest.raises(UsageError, match="nothing was sent") as refused:
        corrected_fields(FIELDS, None, parsed_sets(sets))
    assert refused.value.exit_code == 2 and message in str(refused.value)


def test_fields_from_a_file_replace_the_run_s_and_name_none_of_their_own() -> None:
    """`--fields` replaces the fields whole (each `--set` applies on top); a field the run's
    fields have not is a usage error naming it."""
    whole = {**FIELDS, "total": "2068.79"}
    assert corrected_fields(FIELDS, whole, parsed_sets(["vendor=Initech"])) == {
        **whole,
        "vendor": "Initech",
    }
    with pytest.raises(UsageError, match="po_number is no field of the run's fields"):
        corrected_fields(FIELDS, {"po_number": "7"}, [])
    with pytest.raises(UsageError, match="write PATH=VALUE"):
        parsed_sets(["total"])


def test_a_review_line_that_names_the_run_first_reaches_its_command() -> None:
    """``review ID approve`` is ``review decide ID approve``; ``review ID correct`` is
    ``review correct ID``; a line that names a command first, or asks for help, is as it is."""
    commands = ("show", "decide", "correct")
    assert routed(commands, ["r1", "approve", "--reviewer", "ann"]) == [
        "decide",
        "r1",
        "approve",
        "--reviewer",
        "ann",
    ]
    assert routed(commands, ["r1", "correct", "--set", "total=1"]) == [
        "correct",
        "r1",
        "--set",
        "total=1",
    ]
    assert routed(commands, ["r1", "decide"]) == ["decide", "r1", "decide"]
    for as_is in (["show", "r1"], ["decide", "show", "approve"], ["--help"], []):
        assert routed(commands, as_is) == as_is
