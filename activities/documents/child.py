"""A PDF's text from a child process the kernel limits (``activities.documents.pdf_text``),
never from a thread of the worker: a document that passes a cap, or the child's memory or CPU
limit, ends as the permanent ``DocumentTooLarge`` naming the limit, and the worker's own memory
holds no more than the capped text.

The child runs in a session of its own (a Ctrl-C at the worker's terminal is the worker's to
handle), with an empty environment (no secret of the worker's reaches it), and is killed when
the activity is cancelled or times out. Its stderr is dropped: a traceback could quote the
document.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio.exceptions import ApplicationError

import activities
from activities.documents import pdf_text
from aiorch_runtime.config import (
    DEFAULT_MAX_DOCUMENT_CHARS,
    DEFAULT_MAX_EXTRACT_CPU_S,
    DEFAULT_MAX_EXTRACT_MEMORY_BYTES,
    DEFAULT_MAX_PDF_PAGES,
    Settings,
)
from workflows.steps.contract import DOCUMENT_TOO_LARGE, DOCUMENT_UNREADABLE

# Where the child finds this project's packages: where the worker found them.
_PROJECT = str(Path(activities.__file__).resolve().parent.parent)
# The most a report line may take; the text after it is at most 4 UTF-8 bytes a character.
_REPORT_BYTES = 4096


@dataclass(frozen=True)
class DocumentLimits:
    """What a document may expand to (``MAX_PDF_PAGES``, ``MAX_DOCUMENT_CHARS``) and what its
    extraction may take (``MAX_EXTRACT_MEMORY_BYTES``, ``MAX_EXTRACT_CPU_S``)."""

    max_pages: int = DEFAULT_MAX_PDF_PAGES
    max_chars: int = DEFAULT_MAX_DOCUMENT_CHARS
    memory_bytes: int = DEFAULT_MAX_EXTRACT_MEMORY_BYTES
    cpu: timedelta = timedelta(seconds=DEFAULT_MAX_EXTRACT_CPU_S)

    @classmethod
    def of(cls, settings: Settings) -> DocumentLimits:
        """The operator's limits."""
        return cls(
            max_pages=settings.max_pdf_pages,
            max_chars=settings.max_document_chars,
            memory_bytes=settings.max_extract_memory_bytes,
            cpu=timedelta(seconds=settings.max_extract_cpu_s),
        )

    @property
    def cpu_s(self) -> int:
        return max(1, round(self.cpu.total_seconds()))


def too_large(reason: str) -> ApplicationError:
    """The permanent failure for a document past a limit; ``reason`` names the limit."""
    return ApplicationError(
        f"the document is too large: {reason}; split it, or raise the limit",
        type=DOCUMENT_TOO_LARGE,
        non_retryable=True,
    )


def unreadable(why: str) -> ApplicationError:
    """The permanent failure for a document without usable text; ``why`` is ours, never the
    document's text."""
    return ApplicationError(
        f"the document cannot be read: {why}", type=DOCUMENT_UNREADABLE, non_retryable=True
    )


async def pdf_in_child(data: bytes, limits: DocumentLimits) -> pdf_text.PdfText:
    """The text of the PDF ``data``, extracted in a limited child process (killed if this is
    cancelled).

    Raises:
        ApplicationError: ``DocumentUnreadable`` or ``DocumentTooLarge`` (both permanent).
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        pdf_text.__name__,
        f"--max-pages={limits.max_pages}",
        f"--max-chars={limits.max_chars}",
        f"--memory-bytes={limits.memory_bytes}",
        f"--cpu-s={limits.cpu_s}",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={"PYTHONPATH": _PROJECT},
        start_new_session=True,
    )
    try:
        feeding = asyncio.ensure_future(_feed(process, data))
        out = await _read(process, _REPORT_BYTES + 4 * limits.max_chars)
        await feeding
        status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return _outcome(out, status, limits)


async def _feed(process: asyncio.subprocess.Process, data: bytes) -> None:
    assert process.stdin is not None
    # A child stopped by a limit before reading everything closes the pipe.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(data)
        await process.stdin.drain()
        process.stdin.close()


async def _read(process: asyncio.subprocess.Process, limit: int) -> bytes:
    """The child's output, at most ``limit`` bytes (more is a broken child: killed)."""
    assert process.stdout is not None
    out = bytearray()
    while chunk := await process.stdout.read(1024 * 1024):
        out += chunk
        if len(out) > limit:
            process.kill()
            return b""
    return bytes(out)


def _outcome(out: bytes, status: int, limits: DocumentLimits) -> pdf_text.PdfText:
    line, _, text = out.partition(b"\n")
    if status == -signal.SIGXCPU:
        raise too_large(pdf_text.cpu_reason(limits.cpu_s))
    if status != 0 or not line:
        # Allocation failing where Python cannot raise MemoryError (inside C code) ends the
        # child by a signal or an abort; the memory limit is what it ran into.
        raise too_large(f"{pdf_text.memory_reason(limits.memory_bytes)} (exit status {status})")
    report = json.loads(line)
    if report["failure"] == "unreadable":
        raise unreadable(report["reason"])
    if report["failure"] == "too_large":
        raise too_large(report["reason"])
    return pdf_text.PdfText(text=text.decode("utf-8"), pages=int(report["pages"]))
