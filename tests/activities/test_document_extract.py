"""Text extraction against real files and PDFs the tests write: plain text, a multi-page PDF,
and every kind of unreadable document as one permanent line; then ``extract_text`` in Temporal's
activity environment through the input loader's roots (a PDF's text extracted in a child
process), and the full text read again for the analysis."""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from activities.documents.extract import (
    PAGE_BREAK,
    DocumentLimits,
    DocumentTexts,
    ExtractActivities,
    extract,
    extract_in_child,
    preview,
    text_sha256,
)
from activities.documents.text_store import FolderTexts, text_key
from activities.heartbeat import HEARTBEAT_EVERY
from activities.input_loader import InputLoader
from tests.support.pdfs import encrypted, image_pdf, text_pdf
from workflows import errors
from workflows.steps.contract import DOCUMENT_CHANGED, DOCUMENT_TOO_LARGE, DOCUMENT_UNREADABLE
from workflows.steps.document_payloads import ExtractedText, ExtractTextInput

REQUEST_ID = "0123456789abcdef01234567"
# Text no error message may ever repeat: it stands for a document's content.
SECRET = "CONFIDENTIAL-4711 Jane Doe"
PAGES = [
    ["ACME Supplies Ltd", "Invoice INV-2026-0042", SECRET],
    ["Widgets 3 x 4.99 = 14.97"],
    ["Total due: 175.66 EUR"],
]


def unreadable(data: bytes) -> ApplicationError:
    """The error ``extract`` raises for ``data``: permanent, typed, one line, no content."""
    with pytest.raises(ApplicationError) as info:
        extract(data)
    error = info.value
    assert error.type == DOCUMENT_UNREADABLE
    assert error.non_retryable
    assert "\n" not in error.message
    assert SECRET not in error.message
    assert "CONFIDENTIAL" not in error.message
    return error


def test_utf8_text_is_taken_as_it_is() -> None:
    """A UTF-8 text document is its own text (a byte-order mark dropped), one page."""
    text = "Rechnung Nr. 7 - Müller GmbH\nTotal: 12.50 €\n"
    extraction = extract(b"\xef\xbb\xbf" + text.encode())
    assert extraction.text == text
    assert (extraction.kind, extraction.pages) == ("text", 1)
    assert extraction.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_a_multi_page_pdf_gives_every_page_in_order() -> None:
    """Each page's lines come out, pages in order, separated by a form feed."""
    extraction = extract(text_pdf(PAGES))
    assert (extraction.kind, extraction.pages) == ("pdf", 3)
    pages = extraction.text.split(PAGE_BREAK)
    assert len(pages) == 3
    for page, lines in zip(pages, PAGES, strict=True):
        assert page.splitlines() == lines


def test_a_pdf_with_only_an_owner_password_is_read() -> None:
    """Encryption that only restricts editing (an empty user password) does not stop reading."""
    extraction = extract(encrypted(text_pdf(PAGES), user_password=""))
    assert extraction.pages == 3
    assert "Total due: 175.66 EUR" in extraction.text


def test_an_encrypted_pdf_is_unreadable() -> None:
    """A PDF that needs a password fails with one line that says so."""
    error = unreadable(encrypted(text_pdf(PAGES), user_password="s3cret"))
    assert "encrypted" in error.message


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(text_pdf(PAGES)[:600], id="truncated"),
        pytest.param(text_pdf(PAGES)[:-200], id="no-trailer"),
        pytest.param(b"%PDF-1.7\n" + SECRET.encode() + bytes(range(256)) * 8, id="garbage"),
        pytest.param(b"%PDF-", id="signature-only"),
    ],
)
def test_a_broken_pdf_is_unreadable(data: bytes) -> None:
    """A damaged PDF fails with one line naming the kind of damage, never its content."""
    assert "damaged" in unreadable(data).message


def test_a_pdf_without_text_is_unreadable() -> None:
    """A PDF of images only (a scan) fails with one line that says OCR is needed."""
    error = unreadable(image_pdf(pages=2))
    assert "2 page(s) hold no text layer" in error.message


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00" + SECRET.encode(), "it is neither UTF-8 text nor a PDF"),
        ("Müller".encode("latin-1"), "it is neither UTF-8 text nor a PDF"),
        (b" \n\t\n", "it holds no text"),
        (b"", "it holds no text"),
    ],
)
def test_other_documents_without_text_are_unreadable(data: bytes, words: str) -> None:
    """Binary files, other encodings and blank files fail with one line saying why, the
    reason the run's failure shows."""
    assert unreadable(data).message == f"the document cannot be read: {words}"


def test_preview_never_cuts_a_character() -> None:
    """The preview holds at most the limit in UTF-8 bytes and never half a character."""
    text = "€" * 100  # 3 bytes each
    shown, cut = preview(text, 100)
    assert cut
    assert shown == "€" * 33
    assert preview("short", 100) == ("short", False)


def test_a_text_of_exactly_the_preview_size_is_shown_whole() -> None:
    """A text of exactly the limit in UTF-8 bytes is shown whole and not marked cut; one byte
    more is cut to the limit."""
    assert preview("x" * 100, 100) == ("x" * 100, False)
    assert preview("€" * 33 + "x", 100) == ("€" * 33 + "x", False)  # 100 bytes, 34 characters
    assert preview("x" * 101, 100) == ("x" * 100, True)


# ------------------------------------------------------------------------- the activity


@dataclass
class Inputs:
    """An input root with a PDF and a text file in it, and a PDF outside it."""

    root: Path
    pdf: Path
    text: Path
    outside: Path

    def texts(
        self, limits: DocumentLimits | None = None, heartbeat_every: timedelta = HEARTBEAT_EVERY
    ) -> DocumentTexts:
        loader = InputLoader(file_roots=[self.root])
        return DocumentTexts(loader, limits, heartbeat_every=heartbeat_every)

    def activities(
        self, limits: DocumentLimits | None = None, heartbeat_every: timedelta = HEARTBEAT_EVERY
    ) -> ExtractActivities:
        return ExtractActivities(self.texts(limits, heartbeat_every))


@pytest.fixture
def inputs(tmp_path: Path) -> Inputs:
    root = tmp_path / "inputs"
    root.mkdir()
    pdf = root / "invoice.pdf"
    pdf.write_bytes(text_pdf(PAGES))
    text = root / "invoice.txt"
    text.write_text("Invoice INV-1\nTotal 10.00 USD\n")
    outside = tmp_path / "outside.pdf"
    outside.write_bytes(text_pdf(PAGES))
    return Inputs(root, pdf, text, outside)


async def run(activities: ExtractActivities, **fields: Any) -> ExtractedText:
    return await ActivityEnvironment().run(
        activities.extract_text, ExtractTextInput(request_id=REQUEST_ID, **fields)
    )


async def test_extract_text_reports_a_pdf_without_its_text(inputs: Inputs) -> None:
    """A referenced PDF gives its kind, pages, length, the SHA-256 of its text and a bounded
    preview; the text itself is not in the result."""
    result = await run(inputs.activities(), reference=inputs.pdf.as_uri(), preview_bytes=40)
    full = extract(inputs.pdf.read_bytes()).text
    assert result.kind == "pdf"
    assert result.pages == 3
    assert result.characters == len(full)
    assert result.sha256 == hashlib.sha256(full.encode()).hexdigest()
    assert result.preview == full[:40]
    assert result.preview_truncated
    assert "Total due" not in result.model_dump_json()


async def test_extract_text_reads_text_files_and_inline_text(inputs: Inputs) -> None:
    """A text file and inline text are documents of kind text; a short one fits its preview."""
    from_file = await run(inputs.activities(), reference=inputs.text.as_uri())
    inline = await run(inputs.activities(), text="Invoice INV-1\nTotal 10.00 USD\n")
    assert from_file == inline
    assert (inline.kind, inline.pages, inline.preview_truncated) == ("text", 1, False)
    assert inline.preview == "Invoice INV-1\nTotal 10.00 USD\n"


async def test_inline_text_is_never_parsed_as_a_pdf(inputs: Inputs) -> None:
    """Inline text that starts like a PDF is still text."""
    result = await run(inputs.activities(), text="%PDF- is how a PDF starts")
    assert result.kind == "text"


async def test_a_file_outside_the_roots_is_refused(inputs: Inputs) -> None:
    """The loader's roots apply: a PDF outside them is the uniform permanent refusal."""
    with pytest.raises(ApplicationError) as info:
        await run(inputs.activities(), reference=inputs.outside.as_uri())
    assert info.value.type == errors.INPUT_UNAVAILABLE
    assert info.value.non_retryable
    assert "not available (missing or not allowed)" in info.value.message


async def test_an_unreadable_reference_fails_for_good(inputs: Inputs) -> None:
    """An encrypted PDF inside the roots ends in DocumentUnreadable, not a retry."""
    locked = inputs.root / "locked.pdf"
    locked.write_bytes(encrypted(text_pdf(PAGES), user_password="s3cret"))
    with pytest.raises(ApplicationError) as info:
        await run(inputs.activities(), reference=locked.as_uri())
    assert info.value.type == DOCUMENT_UNREADABLE
    assert info.value.non_retryable


@pytest.mark.parametrize("fields", [{}, {"reference": "file:///x.pdf", "text": "both"}])
async def test_exactly_one_source_is_required(inputs: Inputs, fields: dict[str, str]) -> None:
    """Neither a reference nor text, or both, is an invalid request (permanent)."""
    with pytest.raises(ApplicationError) as info:
        await run(inputs.activities(), **fields)
    assert info.value.type == errors.INVALID_REQUEST
    assert info.value.non_retryable


async def test_a_long_extraction_heartbeats(inputs: Inputs) -> None:
    """While a many-page PDF is extracted, the activity heartbeats (so a cancel reaches it)."""
    big = inputs.root / "big.pdf"
    big.write_bytes(text_pdf([[f"Page {n} of the report"] for n in range(400)]))
    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    activities = inputs.activities(heartbeat_every=timedelta(milliseconds=1))
    result = await env.run(
        activities.extract_text, ExtractTextInput(request_id=REQUEST_ID, reference=big.as_uri())
    )
    assert result.pages == 400
    assert beats
    assert beats[0] == ("extracting the document's text",)


async def test_document_text_gives_the_full_text_again(inputs: Inputs) -> None:
    """The analysis gets the whole text of the reference, checked against the hash
    ``extract_text`` reported."""
    result = await run(inputs.activities(), reference=inputs.pdf.as_uri())
    text = await inputs.texts().text(inputs.pdf.as_uri(), sha256=result.sha256)
    assert text.split(PAGE_BREAK)[2] == "Total due: 175.66 EUR"
    assert len(text) == result.characters


async def test_document_text_refuses_a_changed_document(inputs: Inputs) -> None:
    """A reference whose text changed since extraction fails with DocumentChanged (permanent)
    instead of analysing another document than the one checked."""
    result = await run(inputs.activities(), reference=inputs.text.as_uri())
    inputs.text.write_text("Invoice INV-1\nTotal 99.00 USD\n")
    with pytest.raises(ApplicationError) as info:
        await inputs.texts().text(inputs.text.as_uri(), sha256=result.sha256)
    assert info.value.type == DOCUMENT_CHANGED
    assert info.value.non_retryable
    assert info.value.message == (
        "the document changed after its text was extracted (its SHA-256 differs); "
        "start the run again to analyse the new version"
    )


async def test_reading_the_text_again_heartbeats(inputs: Inputs) -> None:
    """The model call's activity heartbeats while the text is extracted again, as
    ``extract_text`` does."""
    big = inputs.root / "big.pdf"
    big.write_bytes(text_pdf([[f"Page {n} of the report"] for n in range(400)]))
    sha256 = extract(big.read_bytes()).sha256
    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    texts = inputs.texts(heartbeat_every=timedelta(milliseconds=1))
    text = await env.run(texts.text, big.as_uri(), sha256=sha256)
    assert text.startswith("Page 0 of the report")
    assert beats and beats[0] == ("extracting the document's text",)


async def test_document_text_keeps_the_loader_checks(inputs: Inputs) -> None:
    """Reading again goes through the same roots: outside them is refused."""
    reading = inputs.texts().text(inputs.outside.as_uri(), sha256="0" * 64)
    with pytest.raises(ApplicationError) as info:
        await asyncio.wait_for(reading, timeout=10)
    assert info.value.type == errors.INPUT_UNAVAILABLE


@pytest.mark.parametrize(("characters", "used"), [(40, True), (41, False)])
async def test_a_kept_text_is_read_up_to_four_bytes_a_character_of_the_limit(
    inputs: Inputs, tmp_path: Path, characters: int, used: bool
) -> None:
    """The model call reads a kept text of at most four UTF-8 bytes for each character the
    reader's limit allows (here 10 characters: 40 bytes); a longer one is no text of this
    reader's, so the document is extracted again (and is too large for it)."""
    kept = "x" * characters
    store = FolderTexts(tmp_path / "texts")
    await store.put(text_key(inputs.pdf.read_bytes()), kept)
    loader = InputLoader(file_roots=[inputs.root])
    reader = DocumentTexts(loader, DocumentLimits(max_chars=10), store)
    reading = reader.text(inputs.pdf.as_uri(), sha256=text_sha256(kept))
    if used:
        assert await reading == kept
    else:
        with pytest.raises(ApplicationError) as info:
            await reading
        assert info.value.type == DOCUMENT_TOO_LARGE


async def test_a_text_document_is_held_to_the_readers_own_cap() -> None:
    """A UTF-8 document the worker reads (in this process: it is no PDF) is held to the
    reader's MAX_DOCUMENT_CHARS, not the default."""
    limits = DocumentLimits(max_chars=100)
    assert (await extract_in_child(b"x" * 100, limits)).text == "x" * 100
    with pytest.raises(ApplicationError) as info:
        await extract_in_child(b"x" * 101, limits)
    assert info.value.type == DOCUMENT_TOO_LARGE
    assert "MAX_DOCUMENT_CHARS (100 characters)" in info.value.message


def extracting_children() -> list[int]:
    """The PIDs of this process's children that extract a PDF's text."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        if parent == os.getpid() and b"activities.documents.pdf_text" in cmdline:
            found.append(int(entry.name))
    return found


async def test_a_cancel_stops_a_long_extraction(inputs: Inputs) -> None:
    """A cancel reaches an extraction in progress through its heartbeat and ends the activity
    promptly; the child process extracting the PDF is killed instead of finishing the
    document."""
    long = inputs.root / "long.pdf"
    lines = [f"Line {n} of the page: the quick brown fox" for n in range(40)]
    long.write_bytes(text_pdf([lines] * 3000))
    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    activities = inputs.activities(
        DocumentLimits(max_pages=5000), heartbeat_every=timedelta(milliseconds=5)
    )
    task = asyncio.ensure_future(
        env.run(
            activities.extract_text,
            ExtractTextInput(request_id=REQUEST_ID, reference=long.as_uri()),
        )
    )
    while len(beats) < 2 or not extracting_children():
        assert not task.done()
        await asyncio.sleep(0.005)
    [child] = extracting_children()
    started = asyncio.get_running_loop().time()
    env.cancel()
    with pytest.raises((CancelledError, asyncio.CancelledError)):
        await task
    assert asyncio.get_running_loop().time() - started < 2
    # Killed, not finishing its pages (seconds of CPU): gone within a second of the cancel,
    # however loaded the machine is when the kill lands.
    while child in extracting_children():
        assert asyncio.get_running_loop().time() - started < 3, "the child outlived the cancel"
        await asyncio.sleep(0.01)
