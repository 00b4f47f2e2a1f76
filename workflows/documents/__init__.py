"""The document pipeline's deterministic parts: extraction schemas by name, the validation of
what a model extracted (schema, then business rules), the payloads of its activities and its
names. Importable by workflow code: no I/O here; the activities live in
``activities.documents``."""

from workflows.documents.contract import (
    ACTIVITY_EXTRACT_TEXT,
    ACTIVITY_STORE_DOCUMENT,
    DOCUMENT_CHANGED,
    DOCUMENT_STORE_CONFLICT,
    DOCUMENT_STORE_REJECTED,
    DOCUMENT_STORE_UNAVAILABLE,
    DOCUMENT_TOO_LARGE,
    DOCUMENT_UNREADABLE,
    WORKFLOW_TYPE_DOCUMENT_PIPELINE,
)
from workflows.documents.invoice import Invoice, LineItem
from workflows.documents.payloads import (
    ExtractedText,
    ExtractTextInput,
    StoreDocumentInput,
    StoreReceipt,
)
from workflows.documents.schemas import SCHEMAS, ExtractionSchema, schema_named
from workflows.documents.validation import Problem, ValidationReport

# A tuple: workflow modules hold no mutable module state.
__all__ = (
    "ACTIVITY_EXTRACT_TEXT",
    "ACTIVITY_STORE_DOCUMENT",
    "DOCUMENT_CHANGED",
    "DOCUMENT_STORE_CONFLICT",
    "DOCUMENT_STORE_REJECTED",
    "DOCUMENT_STORE_UNAVAILABLE",
    "DOCUMENT_TOO_LARGE",
    "DOCUMENT_UNREADABLE",
    "SCHEMAS",
    "WORKFLOW_TYPE_DOCUMENT_PIPELINE",
    "ExtractTextInput",
    "ExtractedText",
    "ExtractionSchema",
    "Invoice",
    "LineItem",
    "Problem",
    "StoreDocumentInput",
    "StoreReceipt",
    "ValidationReport",
    "schema_named",
)
