"""The sample documents under ``examples/`` are what the README's quick start says: one invoice,
as UTF-8 text and as a PDF, whose fields the simulator reads off either and which pass the
invoice schema and its rules (so the quick start's run completes instead of waiting for
review)."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.documents.extract import extract
from aiorch.devstack.llm_simulator import extraction
from workflows.documents.schemas import INVOICE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def fields_in(name: str) -> dict[str, object]:
    """What the simulator extracts from ``examples/NAME``, validated against the invoice."""
    text = extract((EXAMPLES / name).read_bytes()).text
    report = INVOICE.check(extraction.extract(INVOICE.json_schema(), text, []))
    assert report.valid, report.problems
    assert report.fields is not None
    return report.fields


@pytest.mark.parametrize("name", ["invoice.txt", "invoice.pdf"])
def test_the_example_invoice_is_valid(name: str) -> None:
    """Each example is a valid invoice: the README's currency, two lines, tax and total."""
    fields = fields_in(name)

    assert (fields["currency"], fields["tax"], fields["total"]) == ("GBP", "3.70", "22.20")
    assert isinstance(fields["line_items"], list) and len(fields["line_items"]) == 2


def test_the_pdf_is_the_text_invoice() -> None:
    """The PDF says what the text says, field for field."""
    assert fields_in("invoice.pdf") == fields_in("invoice.txt")
