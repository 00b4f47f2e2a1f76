"""Text out of a document: UTF-8 text as it is, a PDF (known by its ``%PDF-`` signature) through
pypdf, in a child process the kernel limits (``activities.documents.child``).

A document that yields no text fails the run at once with ``DocumentUnreadable``, one that
passes a limit (``MAX_PDF_PAGES``, ``MAX_DOCUMENT_CHARS``, the child's memory or CPU) with
``DocumentTooLarge``; both are permanent (retrying cannot change a file) and one line saying why
that quotes nothing of the document. The activity heartbeats while the child works, so a long
PDF does not look like a dead worker, and a cancel reaches the activity and kills the child.

The text itself never enters history: ``extract_text`` returns its size, pages, SHA-256 and a
preview of a few KiB for the reviewer, and keeps a PDF's text in the text store
(``activities.documents.text_store``) by the document's content hash. The model call gets the
text with `DocumentTexts.text`, inside its own activity (as ``invoke_llm`` reloads a prompt's
reference): from the store when it holds the text extracted before, else extracted again, and
checked against the SHA-256 extraction recorded either way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.documents.child import DocumentLimits, pdf_in_child, too_large, unreadable
from activities.documents.pdf_text import (
    PAGE_BREAK,
    TooLarge,
    Unreadable,
    pdf_text,
    too_many_chars,
    well_formed,
)
from activities.documents.text_store import TextStore, text_key
from activities.heartbeat import HEARTBEAT_EVERY, heartbeat_while
from activities.input_loader import InputLoader
from workflows import errors
from workflows.steps.contract import ACTIVITY_EXTRACT_TEXT, DOCUMENT_CHANGED, PDF_SIGNATURE
from workflows.steps.document_payloads import DocumentKind, ExtractedText, ExtractTextInput

__all__ = [
    "PAGE_BREAK",
    "DocumentLimits",
    "DocumentTexts",
    "ExtractActivities",
    "Extraction",
    "extract",
    "extract_in_child",
    "inline",
    "preview",
    "text_sha256",
]
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


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def extract(data: bytes, limits: DocumentLimits | None = None) -> Extraction:
    """The text of ``data``, in this process (the worker extracts a PDF in a child: see
    `extract_in_child`): a PDF when it starts with ``%PDF-``, else UTF-8 text (a leading
    byte-order mark dropped).

    Raises:
        ApplicationError: ``DocumentUnreadable`` when there is no text to get,
            ``DocumentTooLarge`` when it passes ``limits`` (both non-retryable).
    """
    limits = limits or DocumentLimits()
    if not data.startswith(PDF_SIGNATURE):
        return _text(data, limits)
    try:
        found = pdf_text(data, max_pages=limits.max_pages, max_chars=limits.max_chars)
    except Unreadable as err:
        raise unreadable(str(err)) from None
    except TooLarge as err:
        raise too_large(str(err)) from None
    return Extraction(text=found.text, kind="pdf", pages=found.pages)


async def extract_in_child(data: bytes, limits: DocumentLimits) -> Extraction:
    """As `extract`, a PDF's text extracted in a limited child process."""
    if not data.startswith(PDF_SIGNATURE):
        return _text(data, limits)
    found = await pdf_in_child(data, limits)
    return Extraction(text=found.text, kind="pdf", pages=found.pages)


def _text(data: bytes, limits: DocumentLimits) -> Extraction:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise unreadable("it is neither UTF-8 text nor a PDF") from None
    return inline(text, limits)


def inline(text: str, limits: DocumentLimits | None = None) -> Extraction:
    """A document given as text: taken as it is (never parsed as a PDF).

    Raises:
        ApplicationError: ``DocumentUnreadable`` when it is blank, ``DocumentTooLarge`` when it
            passes ``MAX_DOCUMENT_CHARS`` (both non-retryable).
    """
    limits = limits or DocumentLimits()
    if not text.strip():
        raise unreadable("it holds no text")
    if len(text) > limits.max_chars:
        raise too_large(str(too_many_chars(limits.max_chars)))
    return Extraction(text=well_formed(text), kind="text", pages=1)


def preview(text: str, limit_bytes: int) -> tuple[str, bool]:
    """The start of ``text``, at most ``limit_bytes`` of UTF-8 (never half a character), and
    whether it was cut."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit_bytes:
        return text, False
    return encoded[:limit_bytes].decode("utf-8", "ignore"), True


class DocumentTexts:
    """A referenced document's text: extracted within ``limits``, kept in ``store`` (a PDF's)
    by the document's content hash, and found there again for the model calls."""

    def __init__(
        self,
        loader: InputLoader,
        limits: DocumentLimits | None = None,
        store: TextStore | None = None,
        *,
        heartbeat_every: timedelta = HEARTBEAT_EVERY,
    ) -> None:
        self._loader = loader
        self.limits = limits or DocumentLimits()
        self._store = store
        self._heartbeat_every = heartbeat_every

    async def extract(self, reference: str) -> Extraction:
        """The referenced document's text, extracted (a PDF's in a limited child) and kept.

        Raises:
            ApplicationError: as ``InputLoader.load_bytes`` and `extract`.
        """
        return await _beating(self._extract(reference), self._heartbeat_every)

    async def text(self, reference: str, *, sha256: str) -> str:
        """The full text of a referenced document, for the activity that sends it to the model:
        the one kept when it was extracted, else extracted again; either way the text whose
        SHA-256 is ``sha256`` (from ``extract_text``).

        Raises:
            ApplicationError: ``DocumentChanged`` (non-retryable) when the text is not the one
                extracted before; otherwise as `extract`.
        """
        return await _beating(self._text(reference, sha256), self._heartbeat_every)

    async def plain(self, reference: str) -> str:
        """A referenced UTF-8 text taken as it is (a prompt's input, not a document)."""
        return await self._loader.load(reference)

    async def _extract(self, reference: str) -> Extraction:
        data = await self._loader.load_bytes(reference)
        extraction = await extract_in_child(data, self.limits)
        if self._store is not None and extraction.kind == "pdf":
            await self._store.put(text_key(data), extraction.text)
        return extraction

    async def _text(self, reference: str, sha256: str) -> str:
        data = await self._loader.load_bytes(reference)
        if self._store is not None and data.startswith(PDF_SIGNATURE):
            kept = await self._store.get(text_key(data), 4 * self.limits.max_chars)
            if kept is not None and text_sha256(kept) == sha256:
                return kept
        extraction = await extract_in_child(data, self.limits)
        if extraction.sha256 != sha256:
            raise ApplicationError(
                "the document changed after its text was extracted (its SHA-256 differs); "
                "start the run again to analyse the new version",
                type=DOCUMENT_CHANGED,
                non_retryable=True,
            )
        if self._store is not None and extraction.kind == "pdf":
            await self._store.put(text_key(data), extraction.text)
        return extraction.text


async def _beating(work: Awaitable[T], every: timedelta) -> T:
    if activity.in_activity():
        return await heartbeat_while(work, "extracting the document's text", every)
    return await work


class ExtractActivities:
    """The ``extract_text`` activity, with the worker's `DocumentTexts` injected."""

    def __init__(self, documents: DocumentTexts) -> None:
        self._documents = documents

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
            extraction = inline(extract_input.text, self._documents.limits)
        else:
            assert extract_input.reference is not None
            extraction = await self._documents.extract(extract_input.reference)
        shown, cut = preview(extraction.text, extract_input.preview_bytes)
        return ExtractedText(
            kind=extraction.kind,
            characters=len(extraction.text),
            pages=extraction.pages,
            sha256=extraction.sha256,
            preview=shown,
            preview_truncated=cut,
        )
