"""Embeddings and the vector store: the Embeddings API plus an idempotent Qdrant upsert.

The point id is derived from the workflow id, so an activity retried after a crash overwrites
its own point instead of adding a second one, and cancellation knows exactly what to delete.
The activity heartbeats while the embeddings call is in flight, so a cancel reaches it; once the
upsert has begun it is finished before the activity reports the cancel, so the compensation
that follows (``delete_embedding``) always sees the vector it has to delete.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import openai
from openai import AsyncOpenAI
from qdrant_client import AsyncQdrantClient, models
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import HEARTBEAT_EVERY, heartbeat_while
from activities.llm_errors import classify
from aiorch_runtime.genai import OPERATION_EMBEDDINGS, GenAiTelemetry
from workflows import contract, errors
from workflows.payloads import EmbeddingInput, EmbeddingResult, vector_key

# A fixed namespace: the same workflow id maps to the same point id on every worker.
POINT_NAMESPACE = uuid.UUID("5b0c7d0e-4a55-4f7e-9a57-2f0f3b1c6a11")


def embedded_store(path: str | Path) -> AsyncQdrantClient:
    """Qdrant's embedded mode on the folder ``path``; ``close()`` closes every SQLite connection
    it opened.

    SQLite's same-thread check is turned off because qdrant-client's probe for it opens a
    connection it never closes (Python 3.13 reports it as a ResourceWarning). The check guards
    nothing here: the async client does its storage work on the event loop's thread, one call
    at a time, and where SQLite lets threads share a connection (``THREADSAFE=1``, the usual
    Linux build) qdrant-client turns the check off itself.
    """
    return AsyncQdrantClient(path=str(path), force_disable_check_same_thread=True)


def point_id(key: str) -> str:
    """The vector store id for a run's ``vector_key``."""
    return str(uuid.uuid5(POINT_NAMESPACE, key))


class VectorActivities:
    """``generate_embedding`` and its compensation ``delete_embedding``."""

    def __init__(
        self,
        client: AsyncOpenAI,
        store: AsyncQdrantClient,
        collection: str,
        model: str,
        *,
        heartbeat_every: timedelta = HEARTBEAT_EVERY,
        telemetry: GenAiTelemetry | None = None,
    ) -> None:
        self._client = client
        self._telemetry = telemetry or GenAiTelemetry(str(client.base_url))
        self._store = store
        self._collection = collection
        self._model = model
        self._collection_ready = False
        self._collection_lock = asyncio.Lock()
        self._heartbeat_every = heartbeat_every

    @activity.defn(name=contract.ACTIVITY_GENERATE_EMBEDDING)
    async def generate_embedding(self, embedding_input: EmbeddingInput) -> EmbeddingResult:
        """Embed the output and upsert it under the run's point id."""
        model = embedding_input.model or self._model
        call = self._client.embeddings.create(
            model=model,
            input=embedding_input.content,
            extra_headers={"X-Run-Id": embedding_input.workflow_id},
        )
        with self._telemetry.call(OPERATION_EMBEDDINGS, model) as record:
            try:
                response = await heartbeat_while(
                    call, "waiting for the embeddings call", self._heartbeat_every
                )
            except openai.OpenAIError as err:
                if isinstance(err, openai.APIStatusError):
                    record.error_type = str(err.status_code)
                failure = classify(err)
                raise ApplicationError(
                    failure.message,
                    type=errors.EMBEDDING_FAILED if failure.non_retryable else failure.type,
                    non_retryable=failure.non_retryable,
                ) from None
            record.response_model = response.model or model
            if response.usage is not None:
                record.input_tokens = response.usage.prompt_tokens
        vector = response.data[0].embedding
        pid = point_id(vector_key(embedding_input.workflow_id, embedding_input.chain_id))
        write = asyncio.ensure_future(self._write(pid, vector, embedding_input, model))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await write  # finish the write, so the compensation deletes a vector that exists
            raise
        return EmbeddingResult(embedding_id=pid, dimensions=len(vector))

    async def _write(
        self, pid: str, vector: list[float], embedding_input: EmbeddingInput, model: str
    ) -> None:
        await self._ensure_collection(len(vector))
        await self._store.upsert(
            collection_name=self._collection,
            points=[
                models.PointStruct(
                    id=pid,
                    vector=vector,
                    payload={
                        "workflow_id": embedding_input.workflow_id,
                        "request_id": embedding_input.request_id,
                        "model": model,
                        "content": embedding_input.content,
                    },
                )
            ],
        )

    @activity.defn(name=contract.ACTIVITY_DELETE_EMBEDDING)
    async def delete_embedding(self, key: str) -> int:
        """Delete the vector of the run ``key`` names (its ``vector_key``) if it exists; returns
        how many were deleted (0 or 1)."""
        if not await self._store.collection_exists(self._collection):
            return 0
        pid = point_id(key)
        found = await self._store.retrieve(self._collection, ids=[pid])
        if not found:
            return 0
        await self._store.delete(
            collection_name=self._collection,
            points_selector=models.PointIdsList(points=[pid]),
        )
        return 1

    async def _ensure_collection(self, dimensions: int) -> None:
        if self._collection_ready:
            return
        async with self._collection_lock:
            if not await self._store.collection_exists(self._collection):
                await self._store.create_collection(
                    self._collection,
                    vectors_config=models.VectorParams(
                        size=dimensions, distance=models.Distance.COSINE
                    ),
                )
            self._collection_ready = True
