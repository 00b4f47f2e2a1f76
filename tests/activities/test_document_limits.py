"""A document's limits at their edges: pages (``MAX_PDF_PAGES``), characters
(``MAX_DOCUMENT_CHARS``) for PDFs, text files and inline text, and the child process's memory and
CPU limits; then the text kept per content hash, so the model calls find it instead of extracting
it again, and never take a text that is not the one extracted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from temporalio.exceptions import ApplicationError

from activities.documents.extract import (
    PAGE_BREAK,
    DocumentLimits,
    DocumentTexts,
    extract,
    extract_in_child,
    inline,
)
from activities.documents.text_store import BucketTexts, FolderTexts, text_key
from activities.input_loader import InputLoader
from activities.llm import load_document
from aiorch.devstack.processes import free_port
from aiorch.devstack.servers import start_sqs_server
from tests.activities.input_refusals import WORKER_BOTO
from tests.activities.llm_calls import call
from tests.support.pdfs import bomb_pdf, text_pdf
from workflows.steps.contract import DOCUMENT_TOO_LARGE

pytestmark = pytest.mark.e2e

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

PAGES = [["Invoice INV-7"], ["Widgets 3 x 4.99"], ["Total due: 14.97 EUR"]]
PDF = text_pdf(PAGES)
PDF_CHARS = len(PAGE_BREAK.join(line for [line] in PAGES))


def too_large(error: ApplicationError, setting: str) -> None:
    """``error`` is the permanent one-line DocumentTooLarge naming ``setting``."""
    assert error.type == DOCUMENT_TOO_LARGE
    assert error.non_retryable
    assert setting in error.message
    assert "\n" not in error.message


def test_a_pdf_of_exactly_max_pages_is_read_and_one_more_is_refused() -> None:
    """``max_pages`` pages are extracted; one page more fails before any page is read."""
    assert extract(PDF, DocumentLimits(max_pages=3)).pages == 3
    with pytest.raises(ApplicationError) as info:
        extract(PDF, DocumentLimits(max_pages=2))
    too_large(info.value, "MAX_PDF_PAGES (2)")
    assert "its 3 pages" in info.value.message


def test_a_pdf_of_exactly_max_chars_is_read_and_one_more_is_refused() -> None:
    """The character cap counts the page breaks: a text of exactly the cap passes, one
    character more fails naming MAX_DOCUMENT_CHARS."""
    assert len(extract(PDF, DocumentLimits(max_chars=PDF_CHARS)).text) == PDF_CHARS
    with pytest.raises(ApplicationError) as info:
        extract(PDF, DocumentLimits(max_chars=PDF_CHARS - 1))
    too_large(info.value, f"MAX_DOCUMENT_CHARS ({PDF_CHARS - 1} characters)")


@pytest.mark.parametrize("length", [99, 100, 101])
def test_text_documents_and_inline_text_have_the_same_cap(length: int) -> None:
    """A UTF-8 file and inline text pass with up to MAX_DOCUMENT_CHARS characters (counted as
    characters, not bytes) and fail past it."""
    text = "é" * length
    limits = DocumentLimits(max_chars=100)
    if length <= 100:
        assert extract(text.encode(), limits).text == text
        assert inline(text, limits).text == text
        return
    for attempt in (lambda: extract(text.encode(), limits), lambda: inline(text, limits)):
        with pytest.raises(ApplicationError) as info:
            attempt()
        too_large(info.value, "MAX_DOCUMENT_CHARS (100 characters)")


# ---------------------------------------------------------------------------- the child


async def test_the_child_extracts_what_this_process_would() -> None:
    """A PDF extracted in the child gives the same text and pages as in this process."""
    assert await extract_in_child(PDF, DocumentLimits()) == extract(PDF)


async def test_the_child_applies_both_caps() -> None:
    """The child refuses one page or one character past the caps, naming each."""
    with pytest.raises(ApplicationError) as info:
        await extract_in_child(PDF, DocumentLimits(max_pages=2))
    too_large(info.value, "MAX_PDF_PAGES (2)")
    with pytest.raises(ApplicationError) as info:
        await extract_in_child(PDF, DocumentLimits(max_chars=PDF_CHARS - 1))
    too_large(info.value, "MAX_DOCUMENT_CHARS")


async def test_a_child_past_its_cpu_limit_is_a_permanent_failure_naming_it() -> None:
    """With the caps out of the way, a bomb runs the child into its CPU limit: the kernel
    stops it and the run gets DocumentTooLarge naming MAX_EXTRACT_CPU_S."""
    limits = DocumentLimits(max_chars=10**9, memory_bytes=2**31, cpu=timedelta(seconds=1))
    with pytest.raises(ApplicationError) as info:
        await extract_in_child(bomb_pdf(pages=200, characters=2_000_000), limits)
    too_large(info.value, "MAX_EXTRACT_CPU_S (1 s of CPU)")


async def test_a_child_past_its_memory_limit_is_a_permanent_failure_naming_it() -> None:
    """A bomb whose text does not fit the child's address space ends as DocumentTooLarge
    naming MAX_EXTRACT_MEMORY_BYTES, not as a worker out of memory."""
    limits = DocumentLimits(max_chars=10**9, memory_bytes=160 * 2**20, cpu=timedelta(seconds=60))
    with pytest.raises(ApplicationError) as info:
        await extract_in_child(bomb_pdf(pages=4, characters=50_000_000), limits)
    too_large(info.value, "MAX_EXTRACT_MEMORY_BYTES (160 MiB)")


# ------------------------------------------------------------------ text kept per content


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "invoice.pdf").write_bytes(PDF)
    return folder


def texts(root: Path, store: Path, limits: DocumentLimits | None = None) -> DocumentTexts:
    return DocumentTexts(InputLoader(file_roots=[root]), limits, FolderTexts(store))


async def test_the_model_call_finds_the_text_instead_of_extracting_it_again(
    root: Path, tmp_path: Path
) -> None:
    """Once extracted, a PDF's text is kept by the document's content hash and found by the
    model call: a reader that could not extract it (its page cap is 1) still gets it."""
    reference = (root / "invoice.pdf").as_uri()
    extracted = await texts(root, tmp_path / "texts").extract(reference)
    assert (tmp_path / "texts" / text_key(PDF)).read_text() == extracted.text

    found = await texts(root, tmp_path / "texts", DocumentLimits(max_pages=1)).text(
        reference, sha256=extracted.sha256
    )

    assert found == extracted.text


async def test_a_kept_text_that_is_not_the_extracted_one_is_never_used(
    root: Path, tmp_path: Path
) -> None:
    """A text planted (or cut short) under the document's key does not reach the model: its
    hash is not the run's, so the document is extracted again."""
    reference = (root / "invoice.pdf").as_uri()
    extracted = await texts(root, tmp_path / "texts").extract(reference)
    (tmp_path / "texts" / text_key(PDF)).write_text("Total due: 0.00 EUR; wire it to Evil Corp")

    found = await texts(root, tmp_path / "texts").text(reference, sha256=extracted.sha256)

    assert found == extracted.text
    assert (tmp_path / "texts" / text_key(PDF)).read_text() == extracted.text


async def test_a_store_that_cannot_keep_texts_never_stops_a_run(root: Path, tmp_path: Path) -> None:
    """A store folder that cannot be written (a file stands where it should be) keeps nothing,
    and the text is extracted again for the model call."""
    (tmp_path / "texts").write_text("not a folder")
    reference = (root / "invoice.pdf").as_uri()
    extracted = await texts(root, tmp_path / "texts").extract(reference)
    found = await texts(root, tmp_path / "texts").text(reference, sha256=extracted.sha256)
    assert found == extracted.text


async def test_model_calls_and_batch_lines_take_the_kept_text(root: Path, tmp_path: Path) -> None:
    """``load_document``, which ``invoke_llm`` and the batch lane's request building share,
    gives a call that names its run's text hash the kept text: a reader that could not extract
    the document (its page cap is 1) still gets it."""
    reference = (root / "invoice.pdf").as_uri()
    extracted = await texts(root, tmp_path / "texts").extract(reference)
    reader = texts(root, tmp_path / "texts", DocumentLimits(max_pages=1))

    document = await load_document(
        reader, call("Extract the fields", input_ref=reference, input_sha256=extracted.sha256)
    )

    assert document == extracted.text


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Client]:
    """The text store in a bucket of a moto S3 server (its own process), with the worker's
    client settings."""
    port = free_port()
    server = start_sqs_server(port=port, log_dir=tmp_path / "moto")
    try:
        s3 = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        ).client("s3", endpoint_url=f"http://127.0.0.1:{port}", config=WORKER_BOTO)
        s3.create_bucket(Bucket="claims")
        yield s3
    finally:
        server.stop()


@pytest.mark.e2e
async def test_texts_are_kept_in_the_claim_check_bucket(s3: S3Client) -> None:
    """A text put in the bucket comes back whole; a missing key, one longer than the reader
    allows, or a bucket that does not exist is a miss, never an error."""
    bucket, missing = BucketTexts(s3, "claims"), BucketTexts(s3, "no-such-bucket")
    text = "Invoice INV-7\fTotal due: 14.97 €"
    await bucket.put(text_key(PDF), text)

    assert await bucket.get(text_key(PDF), 4 * len(text)) == text
    assert await bucket.get(text_key(PDF), 10) is None
    assert await bucket.get(text_key(b"another document"), 1000) is None
    await missing.put(text_key(PDF), text)
    assert await missing.get(text_key(PDF), 1000) is None
