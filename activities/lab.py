"""The activities of the lab's task queue: the worker's own, except that those that write are
dry there. A replay lab's fork (``workflows.engine.lab``) runs its pipeline's steps through the
end, and a step that would store a row, upsert or delete a vector, send a dead letter or tell
anyone (reviewers, a pipeline's webhook) gets what the run needs to go on, and nothing is
written, sent or called. The model calls and the rest run as they are: they are what a fork
is for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from temporalio import activity

from activities.dead_letter import DeadLetterActivities
from activities.documents.store import StoreActivities
from activities.notify import NotifyActivities
from activities.pipelines import PipelineActivities
from activities.vectors import VectorActivities
from workflows import contract
from workflows.data.contract import ACTIVITY_NOTIFY_PIPELINE
from workflows.data.payloads import PipelineNotice
from workflows.payloads import (
    DeadLetterInput,
    DeadLetterReceipt,
    EmbeddingInput,
    EmbeddingResult,
    ReviewNotice,
    vector_key,
)
from workflows.steps.contract import ACTIVITY_STORE_DOCUMENT
from workflows.steps.document_payloads import StoreDocumentInput, StoreReceipt

# What a dry step's receipt names instead of a table, a vector or a queue.
NOT_WRITTEN: Final = "lab (not written)"

# The worker's activities that write, each replaced on the lab's queue by its dry variant.
_WRITES: Final[frozenset[Callable[..., Any]]] = frozenset(
    {
        StoreActivities.store_document,
        VectorActivities.generate_embedding,
        VectorActivities.delete_embedding,
        DeadLetterActivities.send_dead_letter,
        NotifyActivities.notify_reviewers,
        PipelineActivities.notify_pipeline,
    }
)


@activity.defn(name=ACTIVITY_STORE_DOCUMENT)
async def store_document(store_input: StoreDocumentInput) -> StoreReceipt:
    """The receipt of a row that was not stored."""
    return StoreReceipt(
        request_id=store_input.request_id,
        table=NOT_WRITTEN,
        dialect="none",
        stored_at=datetime.now(UTC),
    )


@activity.defn(name=contract.ACTIVITY_GENERATE_EMBEDDING)
async def generate_embedding(embedding_input: EmbeddingInput) -> EmbeddingResult:
    """The id the vector would have had; nothing is embedded or upserted."""
    key = vector_key(embedding_input.workflow_id, embedding_input.chain_id)
    return EmbeddingResult(embedding_id=f"{NOT_WRITTEN}: {key}", dimensions=0)


@activity.defn(name=contract.ACTIVITY_DELETE_EMBEDDING)
async def delete_embedding(key: str) -> int:
    """No vector was written, so none is deleted."""
    return 0


@activity.defn(name=contract.ACTIVITY_SEND_DEAD_LETTER)
async def send_dead_letter(dead_letter: DeadLetterInput) -> DeadLetterReceipt:
    """The receipt of a message that was not sent."""
    return DeadLetterReceipt(message_id=NOT_WRITTEN, queue_url="")


@activity.defn(name=contract.ACTIVITY_NOTIFY_REVIEWERS)
async def notify_reviewers(notice: ReviewNotice) -> int:
    """No webhook is posted (a fork never waits for a reviewer anyway)."""
    return 0


@activity.defn(name=ACTIVITY_NOTIFY_PIPELINE)
async def notify_pipeline(notice: PipelineNotice) -> int:
    """No webhook is posted."""
    return 0


DRY: Final = (
    store_document,
    generate_embedding,
    delete_embedding,
    send_dead_letter,
    notify_reviewers,
    notify_pipeline,
)


def lab_activities(activities: Sequence[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """The worker's ``activities`` as the lab's queue runs them: each that writes replaced by
    its dry variant (`DRY`)."""
    kept = [a for a in activities if getattr(a, "__func__", a) not in _WRITES]
    return [*kept, *DRY]
