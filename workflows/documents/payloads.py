"""What the document pipeline's workflow and its activities pass each other (the payloads of
the document steps it shares are ``workflows.steps.document_payloads``).

Recorded in history, so versioned like the rest of the contract: new fields get defaults, and
readers ignore fields they do not know (an older worker accepts a newer writer's payload). A
document's full text never travels here: ``extract_text`` returns its size, hash and a short
preview, and the analysis reads the text again from the reference inside its own activity.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from workflows.documents.schemas import INVOICE, SCHEMAS
from workflows.payloads import (
    REFERENCE_SCHEMES,
    NonBlank,
    PromptPlan,
    RequestBase,
    RunCore,
    RunResult,
)
from workflows.payloads._base import _inline_size
from workflows.steps.document_payloads import ExtractedText, Problem, StoreReceipt


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


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
