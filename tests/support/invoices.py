"""Invoices the document tests write themselves: fields chosen by a seed (vendors,
currencies, one to four lines, tax rates and dates vary), printed as the ``Label: value`` and
``Line: description | quantity | unit_price | amount`` lines the LLM simulator reads, as UTF-8
text or as a PDF (``tests.support.pdfs``)."""

from __future__ import annotations

import hashlib
import io
import random
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any, Literal

from pypdf import PdfReader

from tests.support.pdfs import text_pdf

BATCH = 20  # half text, half PDF
VENDORS = (
    "Acme Supplies Ltd",
    "Müller Büro GmbH",
    "Nordic Timber AB",
    "Café Lumière SARL",
    "Osaka Precision KK",
    "Bright Paper Co.",
    "Zürich Data AG",
    "Harbour Freight Pty",
)
CURRENCIES = ("EUR", "USD", "GBP", "SEK", "JPY", "CHF", "AUD")
ITEMS = (
    "Widgets",
    "Shipping",
    "Consulting hours",
    "Paper A4 (box of 5)",
    "Licence, 12 months",
    "Oak planks 2 m",
    "Café crème",
    "Support plan",
)
TAX_RATES = (Decimal(0), Decimal("0.07"), Decimal("0.2"), Decimal("0.25"))


def invoice_fields(seed: int) -> dict[str, Any]:
    """An invoice that adds up, its values chosen by ``seed``: the fields as the pipeline stores
    them (decimals as the document prints them, dates as YYYY-MM-DD, no due date on some)."""
    rng = random.Random(seed)
    currency = rng.choice(CURRENCIES)
    cent = Decimal(1) if currency == "JPY" else Decimal("0.01")
    lines = []
    for _ in range(rng.randint(1, 4)):
        quantity = rng.randint(1, 40)
        unit_price = (Decimal(rng.randint(50, 250_000)) / 100).quantize(cent)
        lines.append(
            {
                "description": rng.choice(ITEMS),
                "quantity": str(quantity),
                "unit_price": str(unit_price),
                "amount": str(quantity * unit_price),
            }
        )
    subtotal = sum((Decimal(line["amount"]) for line in lines), Decimal(0))
    tax = (subtotal * rng.choice(TAX_RATES)).quantize(cent)
    issued = date(2026, 1, 1) + timedelta(days=rng.randint(0, 330))
    due = None if seed % 4 == 0 else issued + timedelta(days=rng.choice((14, 30, 60)))
    return {
        "vendor": rng.choice(VENDORS),
        "invoice_number": f"INV-{seed:03d}-{rng.randint(1000, 9999)}",
        "issue_date": issued.isoformat(),
        "due_date": due.isoformat() if due else None,
        "currency": currency,
        "line_items": lines,
        "tax": str(tax),
        "total": str(subtotal + tax),
    }


def invoice_lines(fields: dict[str, Any], *extra: str) -> list[str]:
    """The invoice as printed: a heading, the labelled fields, its lines, a footer."""
    printed = [
        f"INVOICE {fields['invoice_number']}",
        f"Vendor: {fields['vendor']}",
        f"Invoice number: {fields['invoice_number']}",
        f"Issue date: {fields['issue_date']}",
    ]
    if fields["due_date"]:
        printed.append(f"Due date: {fields['due_date']}")
    printed.append(f"Currency: {fields['currency']}")
    printed += [
        f"Line: {line['description']} | {line['quantity']} | {line['unit_price']} | "
        f"{line['amount']}"
        for line in fields["line_items"]
    ]
    printed += [f"Tax: {fields['tax']}", f"Total: {fields['total']}", *extra]
    printed.append("Thank you for your business.")
    return printed


@dataclass(frozen=True)
class Document:
    """A document the test wrote, and the fields it says."""

    kind: Literal["text", "pdf"]
    data: bytes
    fields: dict[str, Any]

    @property
    def text_sha256(self) -> str:
        """The SHA-256 of the document's text (a PDF's pages joined with form feeds)."""
        if self.kind == "text":
            content = self.data.decode("utf-8")
        else:
            pages = PdfReader(io.BytesIO(self.data)).pages
            content = "\f".join(page.extract_text() for page in pages)
        return hashlib.sha256(content.encode("utf-8")).hexdigest()


def text_document(fields: dict[str, Any], *extra: str) -> Document:
    return Document("text", "\n".join(invoice_lines(fields, *extra)).encode("utf-8"), fields)


def pdf_document(fields: dict[str, Any]) -> Document:
    """The invoice as a PDF: one page, or two (the totals on the second) when it prints an even
    number of lines."""
    printed = invoice_lines(fields)
    pages = [printed] if len(printed) % 2 else [printed[:-3], printed[-3:]]
    return Document("pdf", text_pdf(pages), fields)


def batch(first_seed: int) -> list[Document]:
    """Ten text and ten PDF invoices, no two alike."""
    half = BATCH // 2
    texts = [text_document(invoice_fields(first_seed + n)) for n in range(half)]
    pdfs = [pdf_document(invoice_fields(first_seed + half + n)) for n in range(half)]
    return texts + pdfs
