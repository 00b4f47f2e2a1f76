"""What the document pipeline's workflow and its activities pass each other.

Recorded in history, so versioned like the rest of the contract: new fields get defaults, and
readers ignore fields they do not know (an older worker accepts a newer writer's payload). A
document's full text never travels here: ``extract_text`` returns its size, hash and a short
preview, and the analysis reads the text again from the reference inside its own activity.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.documents.schemas import INVOICE, SCHEMAS
from workflows.documents.validation import Problem
from workflows.payloads import (
    REFERENCE_SCHEMES,
    NonBlank,
    PromptPlan,
    RequestBase,
    RunCore,
    RunResult,
)
from workflows.payloads._base import _inline_size

# What the reviewer sees of a document before opening it: a few KiB of its text.
DEFAULT_PREVIEW_BYTES: Final = 4096
MAX_PREVIEW_BYTES: Final = 16 * 1024

DocumentKind = Literal["text", "pdf"]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ExtractTextInput(_Payload):
    """Input of ``extract_text``: the document by reference (``file://``, ``s3://``, the
    claim-check store) or inline text; exactly one of the two."""

    request_id: str
    reference: str | None = None
    text: str | None = None
    preview_bytes: int = Field(default=DEFAULT_PREVIEW_BYTES, ge=0, le=MAX_PREVIEW_BYTES)


class ExtractedText(_Payload):
    """What ``extract_text`` found: enough to route and review the document, not the text.

    ``sha256`` is the hash of the text's UTF-8 bytes; the analysis checks the text it reads
    again against it, and the store keeps it with the fields.
    """

    kind: DocumentKind
    characters: int
    pages: int = 1
    sha256: str
    preview: str = ""
    preview_truncated: bool = False


class StoreDocumentInput(_Payload):
    """Input of ``store_document``: the fields of one completed document, and how they got
    there (the validation problems a reviewer saw, and who approved or corrected them).

    The run chain that writes them (``workflow_id`` and ``chain_id``, the chain's first run
    id) owns the row: only that chain may write it again. ``tenant`` and ``requested_by`` are
    the plan's (authenticated with ``REQUESTER_PUBLIC_KEYS``). Inputs recorded before rows had
    owners carry none of the four; the activity then takes the run that scheduled it as owner.
    """

    request_id: str
    schema_name: str
    fields: dict[str, Any]
    content_sha256: str
    pipeline: str = WORKFLOW_TYPE_DOCUMENT_PIPELINE
    problems: list[Problem] = []
    reviewed_by: str | None = None
    corrected: bool = False
    workflow_id: str | None = None
    chain_id: str | None = None
    tenant: str | None = None
    requested_by: str | None = None


class StoreReceipt(_Payload):
    """What ``store_document`` wrote: the row's key, where, and when (the last write wins)."""

    request_id: str
    table: str
    dialect: str
    stored_at: datetime


class DocumentRequest(RequestBase):
    """The document pipeline's input: a document by reference (``file://`` within
    ``INPUT_FILE_ROOTS``, ``s3://`` within ``INPUT_S3_PREFIXES``, or the claim-check store) or
    inline text, and the name of the extraction schema its fields follow."""

    document: Annotated[NonBlank, AfterValidator(_inline_size)] = Field(
        description="The document's text, or a reference to it: file:///path or s3://bucket/key"
    )
    extraction_schema: str = Field(
        default=INVOICE.name,
        max_length=64,
        description="The fields to extract: the name of a registered extraction schema",
    )

    @field_validator("extraction_schema")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in SCHEMAS:
            raise ValueError(f"no extraction schema {name!r}; known: {', '.join(sorted(SCHEMAS))}")
        return name

    @property
    def is_reference(self) -> bool:
        """True when ``document`` names a document (loaded by activities), not the text."""
        return self.document.startswith(REFERENCE_SCHEMES)

    def describe(self) -> str:
        """The request id, the schema and the start of the document (or its reference)."""
        return f"request {self.request_id}: {self.extraction_schema} from {self.document[:200]}"


class DocumentPlan(PromptPlan):
    """What ``plan_document`` settles once: the extraction prompt and every setting the run
    will use (the document's text hash joins it once extracted)."""

    extraction_schema: str = INVOICE.name


class PlanDocumentInput(_Payload):
    """Input of ``plan_document``: the run's request."""

    request: DocumentRequest


class DocumentState(RunCore[DocumentPlan]):
    """A document run: the engine's state, what extraction found, the fields the model
    extracted (or a reviewer corrected) with what validation found, and where they were
    stored."""

    extracted: ExtractedText | None = None
    analysis: dict[str, Any] | None = None
    fields: dict[str, Any] | None = None
    problems: list[Problem] = []
    reviewed_by: str | None = None
    was_corrected: bool = False
    stored: StoreReceipt | None = None


class DocumentResult(RunResult):
    """The document pipeline's result: the schema, the fields as stored, the problems a
    reviewer saw, who reviewed or corrected them, and when the row was written."""

    extraction_schema: str
    fields: dict[str, Any] | None = None
    problems: list[Problem] = []
    reviewed_by: str | None = None
    corrected: bool = False
    stored_at: datetime | None = None
