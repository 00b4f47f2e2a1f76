"""Bounded inputs: in the starter small messages go inline, large ones by reference, huge inline
ones are refused with what to do; the contract's own caps; the LLM reply limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.llm_reply import check_reply_size
from aiorch.ops.claim_check import ClaimCheckError, object_key, resolve_message
from aiorch_runtime.config import Settings
from workflows import errors
from workflows.payloads import MAX_INLINE_MESSAGE_BYTES, MAX_METADATA_BYTES, PipelineRequest

RUN = "0123456789abcdef01234567"


def settings(tmp_path: Path, **fields: object) -> Settings:
    return Settings(claim_check_dir=tmp_path / "claims", **fields)  # type: ignore[arg-type]


def test_small_message_stays_inline(tmp_path: Path) -> None:
    """Under CLAIM_CHECK_THRESHOLD_BYTES the text itself is sent and nothing is stored."""
    assert resolve_message(settings(tmp_path), RUN, "hello", None) == ("hello", None)
    assert not (tmp_path / "claims").exists()


def test_references_pass_through(tmp_path: Path) -> None:
    """A message that already is a reference is sent as it is."""
    ref = "s3://bucket/doc.txt"
    assert resolve_message(settings(tmp_path), RUN, ref, None) == (ref, None)


def test_message_over_the_threshold_is_stored_by_reference(tmp_path: Path) -> None:
    """Between the threshold and the inline limit the message is stored (content addressed
    under the request id) and only a file:// reference is sent."""
    text = "x" * 40_000
    reference, note = resolve_message(
        settings(tmp_path, claim_check_threshold_bytes=32_768), RUN, text, None
    )
    assert reference.startswith("file://") and reference.endswith(
        object_key(RUN, text.encode()).rsplit("/", 1)[-1]
    )
    assert Path(reference.removeprefix("file://")).read_text() == text
    assert note is not None and "claim check" in note


def test_five_mb_inline_message_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """A 5 MB inline message is refused before anything is stored or sent, and the message
    says to use --file and why."""
    with pytest.raises(ClaimCheckError) as info:
        resolve_message(settings(tmp_path), RUN, "x" * (5 * 1024 * 1024), None)
    message = str(info.value)
    assert "5.0 MiB" in message
    assert "--file PATH" in message
    assert "only its reference enters the run's history" in message
    assert not (tmp_path / "claims").exists()


def test_file_is_always_stored(tmp_path: Path) -> None:
    """--file stores the document whatever its size and sends the reference."""
    doc = tmp_path / "doc.txt"
    doc.write_text("short document")
    reference, note = resolve_message(settings(tmp_path), RUN, None, doc)
    assert reference.startswith("file://")
    assert note is not None and str(doc) in note


@pytest.mark.parametrize(
    ("message", "file_text", "problem"),
    [
        (None, None, "one of them"),
        ("both", "doc", "one of them"),
        (None, b"\xff\xfe binary", "not UTF-8"),
        (None, "   ", "is empty"),
    ],
)
def test_bad_input_is_one_clear_line(
    tmp_path: Path, message: str | None, file_text: str | bytes | None, problem: str
) -> None:
    """Neither or both inputs, binary or empty files: one line saying what is wrong."""
    file = None
    if file_text is not None:
        file = tmp_path / "doc"
        if isinstance(file_text, bytes):
            file.write_bytes(file_text)
        else:
            file.write_text(file_text)
    with pytest.raises(ClaimCheckError, match=problem):
        resolve_message(settings(tmp_path), RUN, message, file)


def test_document_over_max_input_bytes_is_refused(tmp_path: Path) -> None:
    """A document larger than MAX_INPUT_BYTES is refused before it is stored."""
    doc = tmp_path / "big.txt"
    doc.write_text("x" * 2000)
    with pytest.raises(ClaimCheckError, match="MAX_INPUT_BYTES"):
        resolve_message(settings(tmp_path, max_input_bytes=1000), RUN, None, doc)


def test_invalid_request_id_never_reaches_a_path(tmp_path: Path) -> None:
    """The request id is part of the storage key, so a malformed one is refused first."""
    with pytest.raises(ClaimCheckError, match="invalid request id"):
        resolve_message(settings(tmp_path), "../../etc", "x" * 100_000, None)


def test_contract_refuses_oversized_inline_message_and_metadata() -> None:
    """Whoever starts the run, the workflow input itself caps the inline message and the
    metadata, and the error says how to send a large document."""
    with pytest.raises(ValidationError, match="pass a reference instead"):
        PipelineRequest(request_id=RUN, user_message="x" * (MAX_INLINE_MESSAGE_BYTES + 1))
    with pytest.raises(ValidationError, match="metadata"):
        PipelineRequest(
            request_id=RUN, user_message="hi", metadata={"blob": "x" * MAX_METADATA_BYTES}
        )


def test_reply_over_the_limit_is_refused_permanently() -> None:
    """An LLM reply longer than the run's MAX_REPLY_CHARS never enters history: invoke_llm
    fails with the permanent LlmReplyTooLarge, naming both sizes; within it, nothing happens."""
    check_reply_size("x" * 100, 100)
    check_reply_size("x" * 10_000, None)
    with pytest.raises(ApplicationError) as info:
        check_reply_size("x" * 101, 100)
    assert info.value.type == errors.LLM_REPLY_TOO_LARGE
    assert info.value.non_retryable
    assert "101 characters; the limit is 100" in info.value.message


def test_a_pdf_is_stored_for_the_document_pipeline_only(tmp_path: Path) -> None:
    """A PDF given with --file is stored (as .pdf) for the document pipeline, whose extraction
    reads it; for the LLM pipeline, which takes text, it is refused in one line."""
    pdf = tmp_path / "invoice.pdf"
    pdf.write_bytes(b"%PDF-1.7\n\xe2\xe3\xcf\xd3 binary body")
    reference, note = resolve_message(settings(tmp_path), RUN, None, pdf, pdf=True)
    assert reference.startswith("file://") and reference.endswith(".pdf")
    assert Path(reference.removeprefix("file://")).read_bytes() == pdf.read_bytes()
    assert note is not None and "invoice.pdf" in note
    with pytest.raises(ClaimCheckError, match=r"is not UTF-8 text$"):
        resolve_message(settings(tmp_path), RUN, None, pdf)


def test_the_cli_builds_each_pipelines_request(tmp_path: Path) -> None:
    """`start --pipeline documents` maps the message onto the document and --schema onto its
    extraction schema, as the pipeline's request shape says; an unknown schema, or --schema
    for the LLM pipeline, is one line before anything starts."""
    from aiorch.cli.output import CliError
    from aiorch.cli.requests import Content, build_request, request_fields
    from aiorch.ops import pipelines
    from workflows.documents.payloads import DocumentRequest

    def built(pipeline: str, content: Content) -> object:
        fields, _ = request_fields(pipelines.named(pipeline), content, Settings(), RUN)
        return build_request(fields, RUN, "auto", None, {}, pipeline=pipeline)

    request = built("documents", Content("file:///docs/a.pdf", schema="invoice"))
    assert isinstance(request, DocumentRequest)
    assert (request.document, request.extraction_schema) == ("file:///docs/a.pdf", "invoice")
    with pytest.raises(CliError, match="no extraction schema 'passport'"):
        built("documents", Content("file:///a", schema="passport"))
    with pytest.raises(CliError, match="--schema is not for the llm pipeline"):
        built("llm", Content("hello", schema="invoice"))
    assert isinstance(built("llm", Content("hello")), PipelineRequest)
