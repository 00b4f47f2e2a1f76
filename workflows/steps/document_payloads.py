"""What the shared document steps (``extract_text``, ``store_document``) and their activities
pass each other, and the validation finding (``Problem``) a stored row keeps.

Recorded in history, so versioned like the rest of the contract: new fields get defaults, and
readers ignore fields they do not know (an older worker accepts a newer writer's payload). A
document's full text never travels here: ``extract_text`` returns its size, hash and a short
preview, and whatever reads the text again does so from the reference inside its own activity.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

# What the reviewer sees of a document before opening it: a few KiB of its text.
DEFAULT_PREVIEW_BYTES: Final = 4096
MAX_PREVIEW_BYTES: Final = 16 * 1024
# A value broken everywhere is reported, not listed in full (the list travels in history).
MAX_PROBLEMS: Final = 50
# Whose row an input recorded before other pipelines stored rows is: the document pipeline's
# (its workflow type, ``workflows.documents.contract.WORKFLOW_TYPE_DOCUMENT_PIPELINE``).
STORED_BY_DEFAULT: Final = "DocumentPipeline"

DocumentKind = Literal["text", "pdf"]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Problem(_Payload):
    """One finding: the field's path (``line_items[2].amount``) and what is wrong with it."""

    field: str
    message: str


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
    pipeline: str = STORED_BY_DEFAULT
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
