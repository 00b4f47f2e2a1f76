"""What the document pipeline's workflow and its activities pass each other.

Recorded in history, so versioned like the rest of the contract: new fields get defaults, and
readers ignore fields they do not know (an older worker accepts a newer writer's payload). A
document's full text never travels here: ``extract_text`` returns its size, hash and a short
preview, and the analysis reads the text again from the reference inside its own activity.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.documents.validation import Problem

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
    there (the validation problems a reviewer saw, and who approved or corrected them)."""

    request_id: str
    schema_name: str
    fields: dict[str, Any]
    content_sha256: str
    pipeline: str = WORKFLOW_TYPE_DOCUMENT_PIPELINE
    problems: list[Problem] = []
    reviewed_by: str | None = None
    corrected: bool = False


class StoreReceipt(_Payload):
    """What ``store_document`` wrote: the row's key, where, and when (the last write wins)."""

    request_id: str
    table: str
    dialect: str
    stored_at: datetime
