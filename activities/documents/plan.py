"""The document pipeline's plan: ``plan_document`` builds the extraction prompt from the
request's schema and resolves every setting the run will use, as ``fetch_prompt`` does for the
LLM pipeline (``activities.prompt.planned``). No I/O: it runs as a local activity.

The prompt keeps what every run of a schema shares first (the instructions and the schema's
JSON), so providers that cache prompt prefixes can reuse it; the document and the request's
context come last. A client's text is data in the user message, never part of the
instructions.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import activity

from activities.prompt import REVIEW_LEVELS, context_suffix, planned
from aiorch_runtime.config import Settings
from workflows.documents.contract import ACTIVITY_PLAN_DOCUMENT, PIPELINE_DOCUMENTS
from workflows.documents.payloads import DocumentPlan, PlanDocumentInput
from workflows.documents.schemas import ExtractionSchema, schema_named

EXTRACTION_INSTRUCTIONS = (
    "You extract structured fields from a document inside an automated pipeline. {description} "
    "Reply with ONLY one JSON object that follows this JSON Schema, and nothing else: no "
    "Markdown, no code fences, no commentary.\nJSON Schema: {schema}"
)
ASK = "Extract the fields from the document above."


def extraction_prompt(schema: ExtractionSchema[Any]) -> str:
    """The system prompt for ``schema``: the instructions, then its JSON Schema."""
    return EXTRACTION_INSTRUCTIONS.format(
        description=schema.description,
        schema=json.dumps(schema.json_schema(), separators=(",", ":")),
    )


class DocumentPlanActivities:
    """The ``plan_document`` activity, with the worker's settings injected."""

    def __init__(self, settings: Settings) -> None:
        # A document's fields are model output, which the document itself steers: its runs
        # get at least DOCUMENT_REVIEW_MIN.
        floor = max(settings.review_min, settings.document_review_min, key=REVIEW_LEVELS.index)
        self._settings = settings.model_copy(update={"review_min": floor})
        self._review_keys = settings.review_keys()

    @activity.defn(name=ACTIVITY_PLAN_DOCUMENT)
    async def plan_document(self, plan_input: PlanDocumentInput) -> DocumentPlan:
        """The run's plan: the extraction prompt for its schema and the worker's settings."""
        request = plan_input.request
        schema = schema_named(request.extraction_schema)
        # A referenced document is put before the prompt by invoke_llm; inline text is the
        # start of the user message.
        document = "" if request.is_reference else request.document
        return planned(
            DocumentPlan,
            self._settings,
            request,
            self._review_keys,
            pipeline_name=PIPELINE_DOCUMENTS,
            system_prompt=extraction_prompt(schema),
            user_prompt=f"{document}{context_suffix(request.metadata)}\n\n{ASK}",
            input_ref=request.document if request.is_reference else None,
            extraction_schema=schema.name,
        )
