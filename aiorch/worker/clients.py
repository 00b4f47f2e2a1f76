"""The worker's shared clients: each opened once, its close registered on the worker's exit
stack as soon as it exists (as svcs's registry does), so they close in reverse order however
the worker ends, and no activity opens a client of its own.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import aiohttp
from openai import AsyncOpenAI, DefaultAioHttpClient
from portalocker.exceptions import LockException
from qdrant_client import AsyncQdrantClient
from temporalio.client import Client

from activities.batch import BatchLane
from activities.capacity import CallGate
from activities.documents.extract import DocumentLimits, DocumentTexts
from activities.documents.store import create_store_engine
from activities.documents.text_store import texts_beside_claims
from activities.input_loader import InputLoader
from activities.planning import PlanDefaults
from activities.vectors import embedded_store
from activities.wiring import Clients
from aiorch.worker.options import batch_item_ttl, batch_settings
from aiorch_runtime import aws
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStore, CapacityStoreError
from aiorch_runtime.config import ConfigError, Settings
from aiorch_runtime.errors import VectorStoreLocked
from aiorch_runtime.genai import GenAiTelemetry, install_genai_metrics
from aiorch_runtime.pipeline_files import PipelineFolder
from aiorch_runtime.result_cache import ResultCache
from workflows.data import Catalog
from workflows.engine.pipeline import Pipeline

log = logging.getLogger("ai-orchestrator.worker")


async def open_clients(
    stack: contextlib.AsyncExitStack,
    temporal: Client,
    settings: Settings,
    folder: PipelineFolder | None,
    catalog: Catalog,
    pipelines: Sequence[Pipeline[Any, Any]],
) -> Clients:
    """Every shared client ``settings`` configure, each closed by ``stack``.

    Raises:
        ConfigError: as `vector_store`, or a document store URL no driver serves.
        VectorStoreLocked: as `vector_store`.
    """
    openai = openai_client(settings)
    stack.push_async_callback(openai.close)
    vectors = vector_store(settings)
    stack.push_async_callback(vectors.close)
    s3 = aws.s3_client(settings, aws.WORKER)
    loader = InputLoader(
        s3=s3,
        max_bytes=settings.max_input_bytes,
        file_roots=settings.allowed_file_roots,
        s3_prefixes=settings.allowed_s3_prefixes,
    )
    sql = create_store_engine(settings.document_store_url.get_secret_value())
    stack.callback(sql.dispose)
    # Shared capacity and budgets (CAPACITY_STORE_URL); GenAI spans and OTLP metrics.
    capacity = CapacityStore.from_settings(settings)
    if capacity is not None:
        stack.push_async_callback(capacity.close)
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
        tenant_budgets_on=settings.tenant_budgeted,
        tenant_weight=settings.tenant_weight,
        named_tenants=settings.named_tenants,
        max_output_tokens=settings.llm_max_output_tokens,
    )
    meters = install_genai_metrics(settings, "worker")
    if meters is not None:
        stack.callback(meters.shutdown)
    # Model cost (docs/cost.md): the result cache and the batch lane keep their state next to
    # the capacity store's.
    results = (
        ResultCache(capacity.redis, ttl=timedelta(seconds=settings.llm_result_cache_ttl_s))
        if capacity is not None and settings.result_cache_on
        else None
    )
    batches = (
        BatchStore(capacity.redis, item_ttl=batch_item_ttl(settings))
        if capacity is not None
        else None
    )
    # Review notifications (REVIEW_WEBHOOK_URL); the session's own timeouts are per call.
    webhooks = aiohttp.ClientSession()
    stack.push_async_callback(webhooks.close)
    return Clients(
        settings=settings,
        temporal=temporal,
        openai=openai,
        vectors=vectors,
        s3=s3,
        sqs=aws.sqs_client(settings, aws.WORKER),
        loader=loader,
        texts=DocumentTexts(loader, DocumentLimits.of(settings), texts_beside_claims(settings, s3)),
        gate=gate,
        genai=GenAiTelemetry(
            settings.openai_base_url,
            capture_content=settings.otel_capture_content,
            meter_provider=meters,
        ),
        capacity=capacity,
        results=results,
        batches=batches,
        lane=(
            BatchLane(batches, temporal, batch_settings(settings), gate=gate)
            if batches is not None and settings.batch_enabled
            else None
        ),
        webhooks=webhooks,
        sql=sql,
        folder=folder,
        catalog=catalog,
        pipelines=pipelines,
        plans=PlanDefaults.of(settings),
    )


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
    """A client for the Qdrant server at ``VECTOR_STORE_URL`` (with its API key and CA, if
    configured), else the embedded store.

    Raises:
        ConfigError: a server setting without a server, or a CA file that cannot be used.
        VectorStoreLocked: another process holds the embedded store's folder.
    """
    if settings.vector_store_url:
        return vector_server(settings.vector_store_url, settings)
    if settings.vector_store_api_key is not None or settings.vector_store_ca_cert_path is not None:
        raise ConfigError(
            "VECTOR_STORE_API_KEY and VECTOR_STORE_CA_CERT_PATH are for a Qdrant server: set "
            "VECTOR_STORE_URL (without it the store is embedded, at VECTOR_STORE_PATH)"
        )
    try:
        return embedded_store(settings.vector_store_path)
    except RuntimeError as err:
        # qdrant-client reports the folder's lock as a RuntimeError raised while handling
        # portalocker's LockException: that exception, not the message, says what happened.
        if isinstance(err.__context__, LockException):
            raise VectorStoreLocked(settings.vector_store_path) from None
        raise


def vector_server(url: str, settings: Settings) -> AsyncQdrantClient:
    """A client for the Qdrant server at ``url``: its API key on every request, its
    certificate checked against ``VECTOR_STORE_CA_CERT_PATH`` when set.

    Raises:
        ConfigError: a CA for a plain http:// URL, or a CA file that cannot be read.
    """
    secret = settings.vector_store_api_key
    options: dict[str, Any] = {
        "api_key": secret.get_secret_value() if secret else None,
        # The client's start-up version probe is a request of its own, in a thread, that
        # ignores the transport options below; the first real call meets the server anyway.
        "check_compatibility": False,
    }
    ca = settings.vector_store_ca_cert_path
    if ca is not None:
        if not url.lower().startswith("https://"):
            raise ConfigError("VECTOR_STORE_CA_CERT_PATH checks a TLS server: use an https:// URL")
        try:
            # Extra keywords reach the client's HTTP transport (httpx): its certificate check.
            options["verify"] = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise ConfigError(f"VECTOR_STORE_CA_CERT_PATH={str(ca)!r}: {reason}") from None
    return AsyncQdrantClient(url=url, **options)
