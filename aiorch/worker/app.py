"""Run an ai-orchestrator worker: ``python worker.py``.

Loads configuration, connects, registers the search attributes, builds the activity clients and
polls the task queue until SIGTERM or SIGINT, then finishes in-flight tasks and exits. Any number
of workers may poll the same queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp
from openai import AsyncOpenAI, DefaultAioHttpClient
from portalocker.exceptions import LockException
from qdrant_client import AsyncQdrantClient
from temporalio.client import Client
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker

from activities.capacity import CallGate
from activities.dead_letter import DeadLetterActivities
from activities.lineage import LineageActivities
from activities.llm import LlmActivities
from activities.notify import NotifyActivities
from activities.prompt import InputLoader, PromptActivities
from activities.vectors import VectorActivities
from aiorch.runtime import aws
from aiorch.runtime.capacity import CapacityStore, CapacityStoreError
from aiorch.runtime.codec import keyring_from_settings
from aiorch.runtime.config import ConfigError, Settings, load_settings
from aiorch.runtime.errors import TemporalUnreachable, VectorStoreLocked
from aiorch.runtime.genai import GenAiTelemetry, install_genai_metrics
from aiorch.runtime.sandbox import workflow_runner
from aiorch.runtime.signals import stop_event
from aiorch.runtime.telemetry import tracing, worker_runtime
from aiorch.runtime.temporal import connect, ensure_search_attributes
from workflows.orchestrator import AiOrchestrator

log = logging.getLogger("ai-orchestrator.worker")


def openai_client(settings: Settings) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key.get_secret_value(),
        max_retries=0,
        timeout=settings.llm_timeout_s,
        # The SDK's aiohttp transport costs less than half the CPU of its default httpx one
        # per call (measured: 2.1 vs 4.8 ms for a chat plus an embeddings call).
        http_client=DefaultAioHttpClient(),
    )


def vector_store(settings: Settings) -> AsyncQdrantClient:
    """A client for the Qdrant server at ``VECTOR_STORE_URL``, else the embedded store.

    Raises:
        VectorStoreLocked: another process holds the embedded store's folder.
    """
    if settings.vector_store_url:
        return AsyncQdrantClient(url=settings.vector_store_url)
    try:
        return AsyncQdrantClient(path=settings.vector_store_path)
    except RuntimeError as err:
        # qdrant-client reports the folder's lock as a RuntimeError raised while handling
        # portalocker's LockException: that exception, not the message, says what happened.
        if isinstance(err.__context__, LockException):
            raise VectorStoreLocked(settings.vector_store_path) from None
        raise


def small_cache_warning(settings: Settings) -> str | None:
    """Why a workflow cache smaller than the workflow task slots hurts, or None if it is not.

    Runs are then evicted between (or during) their workflow tasks and replayed from history;
    one evicted while its local ``fetch_prompt`` is in flight loses that task and waits out the
    workflow task timeout (10 s) before it is retried. Fine for debugging replays, not for load.
    """
    cache = settings.worker_max_cached_workflows
    slots = settings.worker_max_concurrent_workflow_tasks
    if cache >= slots:
        return None
    return (
        f"WORKER_MAX_CACHED_WORKFLOWS={cache} is below WORKER_MAX_CONCURRENT_WORKFLOW_TASKS="
        f"{slots}: runs are replayed from history on every task, and a run evicted while its "
        "local fetch_prompt is in flight waits out the workflow task timeout (10 s); use a "
        "cache this small for debugging only"
    )


def tuning_options(settings: Settings) -> dict[str, Any]:
    """The worker's slots, pollers and cache from settings (shared with the bench baseline)."""
    return {
        "max_concurrent_activities": settings.worker_max_concurrent_activities,
        "max_concurrent_workflow_tasks": settings.worker_max_concurrent_workflow_tasks,
        "max_cached_workflows": settings.worker_max_cached_workflows,
        "workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(
            settings.worker_workflow_task_pollers
        ),
        "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(
            settings.worker_activity_task_pollers
        ),
        "graceful_shutdown_timeout": timedelta(seconds=settings.worker_shutdown_grace),
    }


@contextlib.asynccontextmanager
async def build_worker(client: Client, settings: Settings) -> AsyncIterator[Worker]:
    """A worker with every activity wired to real clients; closes them on exit."""
    sqs = aws.sqs_client(settings, aws.WORKER)
    s3 = aws.s3_client(settings, aws.WORKER)
    llm = openai_client(settings)
    store = vector_store(settings)
    loader = InputLoader(
        s3=s3,
        max_bytes=settings.max_input_bytes,
        file_roots=settings.allowed_file_roots,
        s3_prefixes=settings.allowed_s3_prefixes,
    )
    prompts = PromptActivities(settings, loader)
    # Shared capacity and budgets (CAPACITY_STORE_URL); GenAI spans and OTLP metrics.
    capacity = CapacityStore.from_settings(settings)
    if capacity is not None:
        try:
            await capacity.ping()
        except CapacityStoreError as err:
            log.warning("%s: calls go ahead without shared limits until it answers", err)
    gate = CallGate(
        capacity,
        base_url=settings.openai_base_url,
        rate_limits=settings.llm_rate_limits,
        prices=settings.llm_price_table,
        tenant_budget=settings.tenant_budget,
        max_output_tokens=settings.llm_max_output_tokens,
    )
    meters = install_genai_metrics(settings, "worker")
    genai = GenAiTelemetry(
        settings.openai_base_url,
        capture_content=settings.otel_capture_content,
        meter_provider=meters,
    )
    llm_activities = LlmActivities(
        llm,
        loader,
        settings.llm_timeout_s,
        prices=settings.llm_price_table,
        gate=gate,
        telemetry=genai,
        budgeted_tenants=frozenset(settings.tenant_budgets_usd),
    )
    vectors = VectorActivities(
        llm, store, settings.vector_collection, settings.embedding_model, telemetry=genai
    )
    dead_letters = DeadLetterActivities(
        sqs, settings.dlq_queue_name, content_free=keyring_from_settings(settings) is not None
    )
    lineage = LineageActivities(client)
    # Review notifications (REVIEW_WEBHOOK_URL); the session's own timeouts are per call.
    webhooks = aiohttp.ClientSession()
    notify = NotifyActivities(settings, webhooks)
    try:
        yield Worker(
            client,
            task_queue=settings.temporal_task_queue,
            workflows=[AiOrchestrator],
            workflow_runner=workflow_runner(),
            activities=[
                prompts.fetch_prompt,
                llm_activities.invoke_llm,
                vectors.generate_embedding,
                vectors.delete_embedding,
                dead_letters.send_dead_letter,
                lineage.verify_continuation,
                notify.notify_reviewers,
            ],
            **tuning_options(settings),
        )
    finally:
        await llm.close()
        await store.close()
        await webhooks.close()
        if capacity is not None:
            await capacity.close()
        if meters is not None:
            meters.shutdown()


async def run_worker(settings: Settings, client: Client | None = None) -> None:
    """Poll until SIGTERM/SIGINT; tests may hand in a client."""
    client = client or await connect(settings, runtime=worker_runtime(settings))
    if warning := small_cache_warning(settings):
        log.warning("%s", warning)
    added = await ensure_search_attributes(client)
    if added:
        log.info("registered search attributes: %s", ", ".join(added))
    stop = stop_event()
    async with build_worker(client, settings) as worker, worker:
        print(
            f"worker started: task queue {settings.temporal_task_queue!r} on "
            f"{settings.temporal_address} (namespace {settings.temporal_namespace})",
            flush=True,
        )
        await stop.wait()
        log.info("shutting down: finishing in-flight tasks")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings()
        with tracing(settings, "worker"):
            asyncio.run(run_worker(settings))
    except (ConfigError, TemporalUnreachable, VectorStoreLocked) as err:
        sys.exit(f"worker: {err}")


if __name__ == "__main__":
    main()
