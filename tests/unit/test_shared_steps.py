"""The shared document steps' payloads keep the wire shape the document pipeline recorded
before they were shared."""

from __future__ import annotations

from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.steps.document_payloads import STORED_BY_DEFAULT, Problem, StoreDocumentInput


def test_a_store_input_recorded_without_a_pipeline_is_the_document_pipelines() -> None:
    """An input recorded before other pipelines stored rows names no pipeline: it decodes as
    the document pipeline's, under its workflow type."""
    recorded = {
        "request_id": "a" * 24,
        "schema_name": "invoice",
        "fields": {"total": "1.00"},
        "content_sha256": "0" * 64,
        "problems": [{"field": "total", "message": "too small"}],
    }
    decoded = StoreDocumentInput.model_validate(recorded)
    assert STORED_BY_DEFAULT == WORKFLOW_TYPE_DOCUMENT_PIPELINE
    assert decoded.pipeline == WORKFLOW_TYPE_DOCUMENT_PIPELINE
    assert decoded.problems == [Problem(field="total", message="too small")]
    assert decoded.model_dump(mode="json", include={"pipeline", "problems"}) == {
        "pipeline": "DocumentPipeline",
        "problems": [{"field": "total", "message": "too small"}],
    }
