"""The document pipeline's deterministic parts: extraction schemas by name, the validation of
what a model extracted (schema, then business rules), the payloads of its activities and its
names. Importable by workflow code: no I/O here; the activities live in
``activities.documents``. The document steps it shares with other pipelines (extraction, the
store) are ``workflows.steps``'."""

from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.documents.invoice import Invoice, LineItem
from workflows.documents.schemas import SCHEMAS, ExtractionSchema, schema_named
from workflows.documents.validation import ValidationReport

# A tuple: workflow modules hold no mutable module state.
__all__ = (
    "SCHEMAS",
    "WORKFLOW_TYPE_DOCUMENT_PIPELINE",
    "ExtractionSchema",
    "Invoice",
    "LineItem",
    "ValidationReport",
    "schema_named",
)
