"""Names of the document pipeline that live histories and other tools rely on (the names of
the document steps it shares with other pipelines are ``workflows.steps.contract``'s).

Like ``workflows.contract``, these never change once released: an activity renamed under a
running workflow breaks it. They sit here, next to the pipeline, until the engine's contract
takes them in.
"""

from __future__ import annotations

from typing import Final

WORKFLOW_TYPE_DOCUMENT_PIPELINE: Final = "DocumentPipeline"
# Its short name (``--pipeline documents``, REVIEW_POLICIES keys).
PIPELINE_DOCUMENTS: Final = "documents"

ACTIVITY_PLAN_DOCUMENT: Final = "plan_document"
