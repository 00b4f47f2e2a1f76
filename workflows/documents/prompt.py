"""The document pipeline's extraction prompt, built from the request alone (pure, so workflow
code builds it).

The prompt keeps what every run of a schema shares first (the instructions and the schema's
JSON), so providers that cache prompt prefixes can reuse it; the document and the request's
context come last. A client's text is data in the user message, never part of the
instructions.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

import json
from typing import Any

from workflows.documents.payloads import DocumentRequest
from workflows.documents.schemas import ExtractionSchema, schema_named
from workflows.engine.planning import context_suffix

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


def prompt(request: DocumentRequest) -> dict[str, Any]:
    """The run's prompt fields (``PromptSpec`` and the schema's name): a referenced document is
    put before the prompt by ``invoke_llm``; inline text is the start of the user message."""
    schema = schema_named(request.extraction_schema)
    document = "" if request.is_reference else request.document
    return {
        "system_prompt": extraction_prompt(schema),
        "user_prompt": f"{document}{context_suffix(request.metadata)}\n\n{ASK}",
        "input_ref": request.document if request.is_reference else None,
        "extraction_schema": schema.name,
    }
