"""Inputs: where referenced documents may come from, the claim check, and the bounds on what a
document may be and expand to."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.config_sources import split_list

# The largest document a run may reference (MAX_INPUT_BYTES): the claim check and the workers'
# input loader both refuse a larger one.
DEFAULT_MAX_INPUT_BYTES = 20 * 1024 * 1024
# What a document may expand to, and what extracting its text may take: a few-kB PDF can show
# one compressed stream of millions of characters on each of its pages.
DEFAULT_MAX_PDF_PAGES = 500
# About a million tokens: more than any model's context window takes in one call.
DEFAULT_MAX_DOCUMENT_CHARS = 4_000_000
DEFAULT_MAX_EXTRACT_MEMORY_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_EXTRACT_CPU_S = 60


class InputSettings(SettingsSection):
    """Where inputs come from and how large they may be (`Section.INPUTS`)."""

    SECTION: ClassVar[Section] = Section.INPUTS

    input_file_roots: Annotated[
        list[Path], NoDecode, SettingDoc(Section.INPUTS, example="/srv/inputs,/data/docs")
    ] = Field(
        default_factory=list,
        description="Directories `file://` inputs may come from (comma-separated), besides "
        "`CLAIM_CHECK_DIR`.",
    )
    input_s3_prefixes: Annotated[
        list[str], NoDecode, SettingDoc(Section.INPUTS, example="my-bucket/documents/")
    ] = Field(
        default_factory=list,
        description="`bucket/prefix` entries `s3://` inputs may come from (comma-separated), "
        "besides the `inputs/` prefix of `CLAIM_CHECK_BUCKET`.",
    )
    claim_check_bucket: Annotated[str, SettingDoc(Section.INPUTS)] = Field(
        default="ai-orchestrator-inputs",
        min_length=3,
        description="The S3 bucket the CLI stores documents in (under `inputs/`), unless "
        "`CLAIM_CHECK_DIR` is set; the workers keep PDFs' extracted texts under `texts/`.",
    )
    claim_check_dir: Annotated[
        Path | None, SettingDoc(Section.INPUTS, example="/shared/claims")
    ] = Field(
        default=None,
        description="A directory the CLI and the workers share, where the CLI stores documents "
        "instead of S3 (and the workers PDFs' extracted texts, under `texts/`).",
    )
    claim_check_threshold_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=32 * 1024,
        ge=1,
        description="An inline message larger than this is stored, and the run gets its reference.",
    )
    max_inline_message_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=256 * 1024,
        ge=1,
        le=256 * 1024,
        description="An inline message larger than this is refused (pass it as a file).",
    )
    max_input_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_INPUT_BYTES,
        ge=1,
        description="The largest document a run may reference: the CLI refuses to store a "
        "larger one and the workers to load it.",
    )
    s3_endpoint_url: Annotated[
        str | None,
        SettingDoc(Section.INPUTS, default="unset (AWS)", example="http://127.0.0.1:8701"),
    ] = Field(default=None, description="The S3 endpoint of `s3://` inputs and the claim check.")
    max_pdf_pages: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_PDF_PAGES,
        ge=1,
        description="A PDF with more pages fails its run (`DocumentTooLarge`) before any page "
        "is read.",
    )
    max_document_chars: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_DOCUMENT_CHARS,
        ge=1,
        description="A document whose text passes this many characters fails its run "
        "(`DocumentTooLarge`); a PDF's extraction stops as soon as it does.",
    )
    max_extract_memory_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_EXTRACT_MEMORY_BYTES,
        ge=128 * 1024 * 1024,
        description="The address space of the child process that extracts a PDF's text; a PDF "
        "that needs more fails its run (`DocumentTooLarge`).",
    )
    max_extract_cpu_s: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_EXTRACT_CPU_S,
        ge=1,
        description="The CPU seconds that child may use; a PDF that needs more fails its run "
        "(`DocumentTooLarge`).",
    )

    @field_validator("input_file_roots", "input_s3_prefixes", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        return split_list(value) if isinstance(value, str) else value

    @field_validator("input_s3_prefixes")
    @classmethod
    def _bucket_prefixes(cls, value: list[str]) -> list[str]:
        for entry in value:
            bucket, _, _ = entry.partition("/")
            if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
                raise ValueError(f"{entry!r} is not bucket/prefix (an S3 bucket name first)")
        return value

    @property
    def allowed_file_roots(self) -> list[Path]:
        """Directories ``file://`` inputs may come from: INPUT_FILE_ROOTS and CLAIM_CHECK_DIR."""
        extra = [self.claim_check_dir] if self.claim_check_dir is not None else []
        return [*self.input_file_roots, *extra]

    @property
    def allowed_s3_prefixes(self) -> list[str]:
        """``bucket/prefix`` entries ``s3://`` inputs may come from: INPUT_S3_PREFIXES and the
        claim-check bucket's ``inputs/`` prefix (where the starter stores documents)."""
        return [*self.input_s3_prefixes, f"{self.claim_check_bucket}/inputs/"]
