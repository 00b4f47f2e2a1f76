"""Text out of a document: UTF-8 text as it is, a PDF (known by its ``%PDF-`` signature) through
pypdf.

A document that yields no text fails the run at once with ``DocumentUnreadable`` (permanent:
retrying cannot change a file) and one line saying why (encrypted, damaged, no text layer, not
UTF-8) that quotes nothing of the document. Extraction is CPU work, so it runs in a thread while
the activity heartbeats: a long PDF does not look like a dead worker, a cancel reaches the
activity, and the page loop stops at the next page once it is cancelled.

The text itself never enters history: ``extract_text`` returns its size, pages, SHA-256 and a
preview of a few KiB for the reviewer, and the analysis gets the text again with
`document_text`, inside its own activity (as ``invoke_llm`` reloads a prompt's reference), which
also checks that the reference still holds the text that was extracted.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import threading
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from pypdf import PasswordType, PdfReader
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import HEARTBEAT_EVERY, heartbeat_while
from activities.prompt import InputLoader
from workflows import errors
from workflows.documents.contract import (
    ACTIVITY_EXTRACT_TEXT,
    DOCUMENT_CHANGED,
    DOCUMENT_UNREADABLE,
    PDF_SIGNATURE,
)
from workflows.documents.payloads import DocumentKind, ExtractedText, ExtractTextInput

# Pages of a PDF are joined with a form feed, as pdftotext does: a page break the model can see.
PAGE_BREAK = "\f"
T = TypeVar("T")


@dataclass(frozen=True)
class Extraction:
    """A document's text, what it was, and how many pages it had (1 for plain text)."""

    text: str
    kind: DocumentKind
    pages: int

    @property
    def sha256(self) -> str:
        return text_sha256(self.text)


class _Stopped(Exception):
    """The activity was cancelled; the extracting thread gives up at the next page."""


def unreadable(why: str) -> ApplicationError:
    """The permanent failure for a document without usable text; ``why`` is ours, never the
    document's text."""
    return ApplicationError(
        f"the document cannot be read: {why}", type=DOCUMENT_UNREADABLE, non_retryable=True
    )


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def extract(data: bytes, stop: threading.Event | None = None) -> Extraction:
    """The text of ``data``: a PDF when it starts with ``%PDF-``, else UTF-8 text (a leading
    byte-order mark dropped). Setting ``stop`` ends a PDF's page loop at the next page.

    Raises:
        ApplicationError: ``DocumentUnreadable`` (non-retryable) when there is no text to get.
    """
    if data.startswith(PDF_SIGNATURE):
        return _pdf(data, stop or threading.Event())
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise unreadable("it is neither UTF-8 text nor a PDF") from None
    return inline(text)


def inline(text: str) -> Extraction:
    """A document given as text: taken as it is (never parsed as a PDF).

    Raises:
        ApplicationError: ``DocumentUnreadable`` (non-retryable) when it is blank.
    """
    if not text.strip():
        raise unreadable("it holds no text")
    return Extraction(text=_well_formed(text), kind="text", pages=1)


def _pdf(data: bytes, stop: threading.Event) -> Extraction:
    try:
        reader = PdfReader(io.BytesIO(data))
        # An owner password alone restricts editing, not reading: such a PDF opens with "".
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise unreadable("the PDF is encrypted (it needs a password to open)")
        texts = []
        for page in reader.pages:
            if stop.is_set():
                raise _Stopped
            texts.append(page.extract_text())
    except (ApplicationError, _Stopped, MemoryError):
        raise
    except Exception as err:  # a damaged file makes pypdf raise anything, from KeyError up
        raise unreadable(f"the PDF is damaged ({type(err).__name__})") from None
    text = _well_formed(PAGE_BREAK.join(texts))
    if not text.strip():
        raise unreadable(
            f"the PDF's {len(texts)} page(s) hold no text layer (scanned images need OCR first)"
        )
    return Extraction(text=text, kind="pdf", pages=len(texts))


def _well_formed(text: str) -> str:
    """``text`` with lone surrogates (a broken font map can produce them) replaced by U+FFFD:
    no UTF-8 encoder, hash or payload converter accepts them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def preview(text: str, limit_bytes: int) -> tuple[str, bool]:
    """The start of ``text``, at most ``limit_bytes`` of UTF-8 (never half a character), and
    whether it was cut."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit_bytes:
        return text, False
    return encoded[:limit_bytes].decode("utf-8", "ignore"), True


async def extract_in_thread(
    data: bytes, *, heartbeat_every: timedelta = HEARTBEAT_EVERY
) -> Extraction:
    """`extract` in a worker thread, heartbeating while it runs when inside an activity; a
    cancel stops the thread's page loop."""
    stop = threading.Event()
    try:
        return await _beating(asyncio.to_thread(extract, data, stop), heartbeat_every)
    finally:
        stop.set()


async def document_text(
    loader: InputLoader,
    reference: str,
    *,
    sha256: str | None = None,
    heartbeat_every: timedelta = HEARTBEAT_EVERY,
) -> str:
    """The full text of a referenced document, read and extracted again, for the activity that
    sends it to the model. With ``sha256`` (from ``extract_text``), the text must be the one
    extracted before.

    Raises:
        ApplicationError: ``DocumentChanged`` (non-retryable) when the text is not the one
            extracted before; otherwise as ``InputLoader.load_bytes`` and `extract`.
    """
    data = await _beating(loader.load_bytes(reference), heartbeat_every)
    extraction = await extract_in_thread(data, heartbeat_every=heartbeat_every)
    if sha256 is not None and extraction.sha256 != sha256:
        raise ApplicationError(
            "the document changed after its text was extracted (its SHA-256 differs); start "
            "the run again to analyse the new version",
            type=DOCUMENT_CHANGED,
            non_retryable=True,
        )
    return extraction.text


async def _beating(work: Awaitable[T], every: timedelta) -> T:
    if activity.in_activity():
        return await heartbeat_while(work, "extracting the document's text", every)
    return await work


class ExtractActivities:
    """The ``extract_text`` activity, with the worker's input loader injected."""

    def __init__(
        self, loader: InputLoader, *, heartbeat_every: timedelta = HEARTBEAT_EVERY
    ) -> None:
        self._loader = loader
        self._heartbeat_every = heartbeat_every

    @activity.defn(name=ACTIVITY_EXTRACT_TEXT)
    async def extract_text(self, extract_input: ExtractTextInput) -> ExtractedText:
        """Extract the document's text; return its size, pages, hash and a preview (not the
        text: large blobs stay out of history)."""
        if (extract_input.reference is None) == (extract_input.text is None):
            raise ApplicationError(
                "give the document as a reference or as inline text (exactly one of the two)",
                type=errors.INVALID_REQUEST,
                non_retryable=True,
            )
        if extract_input.text is not None:
            extraction = inline(extract_input.text)
        else:
            assert extract_input.reference is not None
            data = await _beating(
                self._loader.load_bytes(extract_input.reference), self._heartbeat_every
            )
            extraction = await extract_in_thread(data, heartbeat_every=self._heartbeat_every)
        shown, cut = preview(extraction.text, extract_input.preview_bytes)
        return ExtractedText(
            kind=extraction.kind,
            characters=len(extraction.text),
            pages=extraction.pages,
            sha256=extraction.sha256,
            preview=shown,
            preview_truncated=cut,
        )
