"""The document pipeline's state graph: extract the text, have the model extract the fields,
validate them, route them to a reviewer when validation finds problems (or the policy says
always), store them.

The model call, its retries, capacity, budget and batch waits, validation and the review form one
loop (a reviewer can ask for a re-analysis, or correct the fields, which are validated again),
so they share one progress figure: a run's progress never goes down.
"""

from __future__ import annotations

from enum import StrEnum

from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.engine.graph import (
    AWAIT_BATCH,
    AWAIT_BUDGET,
    AWAIT_CAPACITY,
    AWAIT_REVIEW,
    CANCELLED,
    COMPLETED,
    DEAD_LETTER,
    ESCALATE,
    FAILED,
    IDLE,
    TERMINAL_STATES,
    Event,
    Graph,
    StateInfo,
    Status,
    Transition,
    cancel_edges,
    review_edges,
    review_states,
)
from workflows.steps import CallStates, model_call_edges, model_call_states


class DocState(StrEnum):
    """Every state a document run can be in."""

    IDLE = IDLE
    EXTRACT_TEXT = "extract_text"
    ANALYZE = "analyze"
    RETRY_ANALYZE = "retry_analyze"
    AWAIT_CAPACITY = AWAIT_CAPACITY
    AWAIT_BUDGET = AWAIT_BUDGET
    AWAIT_BATCH = AWAIT_BATCH
    VALIDATE = "validate"
    AWAIT_REVIEW = AWAIT_REVIEW
    ESCALATE = ESCALATE
    STORE = "store"
    COMPLETED = COMPLETED
    FAILED = FAILED
    DEAD_LETTER = DEAD_LETTER
    CANCELLED = CANCELLED


class DocEvent(StrEnum):
    """This pipeline's own events (the shared ones are the engine's ``Event``)."""

    EXTRACTED = "extracted"
    ANALYZED = "analyzed"
    VALID = "valid"
    NEEDS_REVIEW = "needs_review"
    INVALID = "invalid"
    STORED = "stored"


_ANALYZING = 60
_CALL = CallStates(retry=DocState.RETRY_ANALYZE)

GRAPH = Graph.of(
    WORKFLOW_TYPE_DOCUMENT_PIPELINE,
    {
        DocState.EXTRACT_TEXT: StateInfo(
            Status.PROCESSING, 20, "loading the document and extracting its text"
        ),
        DocState.ANALYZE: StateInfo(Status.PROCESSING, _ANALYZING, "the model extracts the fields"),
        **model_call_states(_ANALYZING, _CALL),
        # Checked inside the workflow task that got the fields: nothing to show, no action.
        DocState.VALIDATE: StateInfo(
            Status.PROCESSING, _ANALYZING, "checking the fields and the business rules", shown=False
        ),
        **review_states(_ANALYZING, shown="waiting for a reviewer to check the fields"),
        DocState.STORE: StateInfo(
            Status.PROCESSING, 90, "storing the fields in the database", shown=False
        ),
    },
    (
        Transition(DocState.IDLE, Event.START, DocState.EXTRACT_TEXT),
        Transition(DocState.EXTRACT_TEXT, DocEvent.EXTRACTED, DocState.ANALYZE),
        Transition(DocState.EXTRACT_TEXT, Event.PERMANENT_ERROR, DocState.FAILED),
        Transition(DocState.EXTRACT_TEXT, Event.EXHAUSTED, DocState.DEAD_LETTER),
        Transition(DocState.ANALYZE, DocEvent.ANALYZED, DocState.VALIDATE),
        Transition(DocState.ANALYZE, Event.PERMANENT_ERROR, DocState.FAILED),
        Transition(DocState.VALIDATE, DocEvent.VALID, DocState.STORE),
        Transition(DocState.VALIDATE, DocEvent.NEEDS_REVIEW, DocState.AWAIT_REVIEW),
        Transition(DocState.VALIDATE, DocEvent.INVALID, DocState.FAILED),
    ),
    model_call_edges(DocState.ANALYZE, _CALL),
    review_edges(approve=DocState.STORE, reedit=DocState.ANALYZE, correct=DocState.VALIDATE),
    (
        Transition(DocState.STORE, DocEvent.STORED, DocState.COMPLETED),
        Transition(DocState.STORE, Event.PERMANENT_ERROR, DocState.FAILED),
        Transition(DocState.STORE, Event.EXHAUSTED, DocState.DEAD_LETTER),
    ),
    cancel_edges(state for state in DocState if state not in TERMINAL_STATES),
)
