"""A PDF's text within a page and a character cap, and the child process that extracts it.

pypdf caps each decompressed stream but not the sum: the pages of a few-kB file may all show one
compressed stream of millions of characters. So the page count is checked before any page is
read, the characters are counted as pypdf hands them out (a page is stopped inside its text, not
after it), and the whole extraction runs in a child process (``python -m
activities.documents.pdf_text``) whose address space and CPU time the kernel limits: what the
caps cannot see (a content stream that draws no text but costs much to parse) ends there, never
in the worker.

This module imports only the standard library and pypdf, so the child starts in a fraction of a
second; the parent side is ``activities.documents.child``.

The child reads its limits from its arguments and the PDF from stdin; it writes one JSON line
(`report`: the page count, or the failure and its reason) and then the text in UTF-8. Plain JSON,
not a pydantic model: the child imports nothing it does not need.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from pypdf import PasswordType, PdfReader

# Pages of a PDF are joined with a form feed, as pdftotext does: a page break the model can see.
PAGE_BREAK: Final = "\f"
# The names an operator sets, quoted in the one line a failed run shows.
MAX_PDF_PAGES: Final = "MAX_PDF_PAGES"
MAX_DOCUMENT_CHARS: Final = "MAX_DOCUMENT_CHARS"
MAX_EXTRACT_MEMORY_BYTES: Final = "MAX_EXTRACT_MEMORY_BYTES"
MAX_EXTRACT_CPU_S: Final = "MAX_EXTRACT_CPU_S"

Failure = Literal["unreadable", "too_large"]


class Unreadable(Exception):
    """The document holds no text to get; the message is ours, never the document's."""


class TooLarge(Exception):
    """The document passes one of the operator's caps; the message names it."""


def too_many_pages(pages: int, limit: int) -> TooLarge:
    return TooLarge(f"its {pages} pages pass {MAX_PDF_PAGES} ({limit})")


def too_many_chars(limit: int) -> TooLarge:
    return TooLarge(f"its text passes {MAX_DOCUMENT_CHARS} ({limit} characters)")


def well_formed(text: str) -> str:
    """``text`` with lone surrogates (a broken font map can produce them) replaced by U+FFFD:
    no UTF-8 encoder, hash or payload converter accepts them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class _Budget:
    """The characters a document may still yield, counted as pypdf hands them out."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, characters: int) -> None:
        self.used += characters
        if self.used > self.limit:
            raise too_many_chars(self.limit)

    def visitor(self) -> Callable[..., None]:
        """A ``visitor_text`` for one page: pypdf hands out each text operator's string while
        it reads the page, so a page is stopped inside its text, not after it."""
        on_page = 0

        def seen(text: str, *_: Any) -> None:
            nonlocal on_page
            on_page += len(text)
            if self.used + on_page > self.limit:
                raise too_many_chars(self.limit)

        return seen


@dataclass(frozen=True)
class PdfText:
    """A PDF's text (pages joined by `PAGE_BREAK`) and its page count."""

    text: str
    pages: int


def pdf_text(data: bytes, *, max_pages: int, max_chars: int) -> PdfText:
    """The text of the PDF ``data``, stopped as soon as it passes ``max_pages`` pages or
    ``max_chars`` characters (page breaks included).

    Raises:
        Unreadable: encrypted, damaged, or no text layer.
        TooLarge: a cap was passed.
    """
    try:
        reader = PdfReader(io.BytesIO(data))
        # An owner password alone restricts editing, not reading: such a PDF opens with "".
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise Unreadable("the PDF is encrypted (it needs a password to open)")
        pages = len(reader.pages)
        if pages > max_pages:
            raise too_many_pages(pages, max_pages)
        texts: list[str] = []
        budget = _Budget(max_chars)
        for page in reader.pages:
            budget.take(len(PAGE_BREAK) if texts else 0)
            text = page.extract_text(visitor_text=budget.visitor())
            budget.take(len(text))
            texts.append(text)
    except (Unreadable, TooLarge, MemoryError):
        raise
    except Exception as err:  # a damaged file makes pypdf raise anything, from KeyError up
        raise Unreadable(f"the PDF is damaged ({type(err).__name__})") from None
    text = well_formed(PAGE_BREAK.join(texts))
    if not text.strip():
        raise Unreadable(
            f"the PDF's {len(texts)} page(s) hold no text layer (scanned images need OCR first)"
        )
    return PdfText(text=text, pages=len(texts))


# ----------------------------------------------------------------------------- the child


def limit_self(memory_bytes: int, cpu_s: int) -> None:
    """Limit this process: its address space, its CPU seconds (SIGXCPU at ``cpu_s``, SIGKILL a
    second later), and no core file or other file written."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def report(pages: int = 0, failure: Failure | None = None, reason: str = "") -> bytes:
    """The child's first line: the page count, or the failure and its one-line reason."""
    return json.dumps({"pages": pages, "failure": failure, "reason": reason}).encode() + b"\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m activities.documents.pdf_text")
    for flag in ("--max-pages", "--max-chars", "--memory-bytes", "--cpu-s"):
        parser.add_argument(flag, type=int, required=True)
    args = parser.parse_args(argv)
    limit_self(args.memory_bytes, args.cpu_s)
    out = sys.stdout.buffer
    try:
        data = sys.stdin.buffer.read()
        found = pdf_text(data, max_pages=args.max_pages, max_chars=args.max_chars)
    except Unreadable as err:
        out.write(report(failure="unreadable", reason=str(err)))
    except TooLarge as err:
        out.write(report(failure="too_large", reason=str(err)))
    except MemoryError:
        out.write(report(failure="too_large", reason=memory_reason(args.memory_bytes)))
    else:
        out.write(report(pages=found.pages))
        out.write(found.text.encode("utf-8"))
    out.flush()


def memory_reason(memory_bytes: int) -> str:
    return (
        f"extracting its text passed {MAX_EXTRACT_MEMORY_BYTES} "
        f"({memory_bytes // (1024 * 1024)} MiB)"
    )


def cpu_reason(cpu_s: int) -> str:
    return f"extracting its text passed {MAX_EXTRACT_CPU_S} ({cpu_s} s of CPU)"


if __name__ == "__main__":
    main()
