"""Run an ai-orchestrator worker: ``python worker.py`` (installed: ``aiorch-worker``).

Loads configuration (without reviewer keys it refuses to start unless ``REVIEW_AUTH=off``,
which it then warns about), serves its health endpoints, connects
(``aiorch_runtime.connection``: the envconfig profile, TLS and API key, the project's plugin),
registers the search attributes, builds the activity clients and polls the task queue until
SIGTERM or SIGINT. Then it drains: readiness turns to ``draining``, polling stops, the tasks it
holds finish (activities get ``WORKER_SHUTDOWN_GRACE`` seconds before they are cancelled), and
it exits 0. Any number of workers may poll the same queue; what one leaves behind (a crash
included) the others pick up.

Every failure a user can fix (configuration, connection) ends in one line on stderr and exit
status 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from typing import Any, TypeVar

import aiohttp
from openai import AsyncOpenAI, DefaultAioHttpClient
from portalocker.exceptions import LockException
from qdrant_client import AsyncQdrantClient
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker, WorkerDeploymentConfig

from activities.batch import BatchActivities, BatchLane, BatchSettings
from activities.callers import CallerCheck
from activities.capacity import CallGate
from activities.dead_letter import DeadLetterActivities
from activities.documents.extract import DocumentLimits, DocumentTexts, ExtractActivities
from activities.documents.plan import DocumentPlanActivities
from activities.documents.store import StoreActivities, create_store_engine
from activities.documents.text_store import texts_beside_claims
from activities.input_loader import InputLoader
from activities.lineage import LineageActivities
from activities.llm import LlmActivities
from activities.notify import NotifyActivities
from activities.pipelines import PipelineActivities
from activities.planning import BATCH_SUBMISSION_ALLOWANCE_S, PlanActivities, PlanDefaults
from activities.prompt import PromptActivities
from activities.vectors import VectorActivities, embedded_store
from aiorch.worker.health import WorkerHealth, start_health
from aiorch.worker.tenant_boundaries import check_result_cache
from aiorch_runtime import aws
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStore, CapacityStoreError
from aiorch_runtime.codec import keyring_from_settings
from aiorch_runtime.config import ConfigError, Settings, load_settings
from aiorch_runtime.connection import connect, describe_target, ensure_search_attributes
from aiorch_runtime.errors import TemporalUnreachable, VectorStoreLocked
from aiorch_runtime.genai import GenAiTelemetry, install_genai_metrics
from aiorch_runtime.pipeline_files import PipelineFolder, settings_folder
from aiorch_runtime.result_cache import ResultCache
from aiorch_runtime.review_policies import pipeline_of
from aiorch_runtime.signals import stop_event
from aiorch_runtime.telemetry import tracing, worker_runtime
from workflows import contract
from workflows.batch.workflow import LlmBatch
from workflows.engine.pipeline import ENGINE_FACTS
from workflows.orchestrator import DATA_PIPELINES, PIPELINES, AiOrchestrator

log = logging.getLogger("ai-orchestrator.worker")
T = TypeVar("T")


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


def review_auth_warning(settings: Settings) -> str | None:
    """What the worker logs at start when reviewer authentication is off, or None when on.

    Raises:
        ConfigError: ``REVIEW_AUTH=required`` (the default) without reviewer keys, or
            ``REVIEW_AUTH=off`` with keys (which of the two was meant cannot be guessed).
    """
    keys = settings.review_keys()
    if settings.review_auth == "required":
        if not keys:
            raise ConfigError(
                "reviewer authentication is required (REVIEW_AUTH=required, the default) and "
                "no reviewer key is configured: set REVIEW_PUBLIC_KEYS or "
                "REVIEW_PUBLIC_KEYS_FILE (`aiorch keys reviewer NAME`, `aiorch inbox new-key`), "
                "or REVIEW_AUTH=off to accept unsigned reviews in a sandbox"
            )
        return None
    if keys:
        raise ConfigError(
            "REVIEW_AUTH=off and REVIEW_PUBLIC_KEYS are both set: unset REVIEW_PUBLIC_KEYS to "
            "accept unsigned reviews, or REVIEW_AUTH to require signed ones"
        )
    return (
        "REVIEW_AUTH=off: reviews are not authenticated; anyone who can signal or update a run "
        "can approve it under any allowed reviewer name. Use this in a sandbox only."
    )


def check_review_policies(settings: Settings) -> None:
    """Every review policy names a pipeline this worker runs, and its auto-approve rules read
    only facts that pipeline's results have (a rule that reads another would never approve).

    Raises:
        ConfigError: one line naming the policy and what it names wrongly.
    """
    by_name = {pipeline.name: pipeline for pipeline in PIPELINES}
    for key, policy in settings.review_policies.items():
        pipeline = by_name.get(pipeline_of(key))
        if pipeline is None:
            raise ConfigError(
                f"REVIEW_POLICIES: {key!r} names no pipeline of this worker ({', '.join(by_name)})"
            )
        for rule in policy.auto_approve:
            for condition in rule.when:
                if not pipeline.knows_fact(condition.fact):
                    known = ", ".join((*ENGINE_FACTS, *pipeline.facts))
                    raise ConfigError(
                        f"REVIEW_POLICIES: {key}: rule {rule.name} reads {condition.fact!r}, "
                        f"which the {pipeline.name} pipeline does not give (it gives {known})"
                    )


def batch_settings(settings: Settings) -> BatchSettings:
    """How the batch lane groups, submits and polls calls (``LLM_BATCH_*``)."""
    return BatchSettings(
        size=settings.llm_batch_size,
        delay=timedelta(seconds=settings.llm_batch_delay_s),
        poll=timedelta(seconds=settings.llm_batch_poll_s),
        task_queue=settings.temporal_task_queue,
        base_url=settings.openai_base_url,
    )


def batch_item_ttl(settings: Settings) -> timedelta:
    """How long a batched call is kept: its wait for its submission and its answer, and a day
    for its run to take the answer up."""
    waits = settings.llm_batch_delay_s + BATCH_SUBMISSION_ALLOWANCE_S + settings.llm_batch_wait_s
    return timedelta(seconds=waits) + timedelta(days=1)


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


VERSIONING_BEHAVIORS = {
    "auto_upgrade": VersioningBehavior.AUTO_UPGRADE,
    "pinned": VersioningBehavior.PINNED,
}


def deployment_options(settings: Settings) -> dict[str, Any]:
    """Worker Versioning options: none without ``WORKER_BUILD_ID``.

    With a build id the worker reports its version (``WORKER_DEPLOYMENT_NAME.WORKER_BUILD_ID``)
    to the server; only with ``WORKER_VERSIONING=true`` does the server route tasks by version,
    so a new build gets work once it is made current (README "Rolling deploys").
    """
    if settings.worker_build_id is None:
        return {}
    version = WorkerDeploymentVersion(settings.worker_deployment_name, settings.worker_build_id)
    return {
        "deployment_config": WorkerDeploymentConfig(
            version=version,
            use_worker_versioning=settings.worker_versioning,
            default_versioning_behavior=(
                VERSIONING_BEHAVIORS[settings.worker_versioning_behavior]
                if settings.worker_versioning
                else VersioningBehavior.UNSPECIFIED
            ),
        )
    }


def code_pipeline_names() -> list[str]:
    """The names pipeline files may not take: the workflow types and short names of the
    pipelines written in Python."""
    return [name for p in PIPELINES for name in (p.workflow_type, p.name)]


def pipeline_folder(settings: Settings) -> PipelineFolder | None:
    """The worker's pipeline folder (``PIPELINES_DIR``), every file in it checked; None when
    unset.

    Raises:
        ConfigError: the folder is missing, or a file in it has a problem
            (``PipelineFilesInvalid``: the message names the file, line and rule).
    """
    folder = settings_folder(settings.pipelines_dir, DATA_PIPELINES.catalog, code_pipeline_names())
    if folder is not None:
        folder.check()
    return folder


class WorkerPipelines:
    """The workflow types the worker runs, for the activity caller check: its pipelines
    written in Python, the batch lane's group workflow, and the pipelines its folder has (or
    had, in this process)."""

    def __init__(self, folder: PipelineFolder | None) -> None:
        self._types = frozenset(
            [*(pipeline.workflow_type for pipeline in PIPELINES), contract.WORKFLOW_TYPE_LLM_BATCH]
        )
        self._folder = folder

    async def has(self, workflow_type: str) -> bool:
        """Whether runs of ``workflow_type`` may call the worker's activities.

        Raises:
            ConfigError: the folder could not be read just now (the activity is retried).
        """
        if workflow_type in self._types:
            return True
        return self._folder is not None and await self._folder.has(workflow_type)


@contextlib.asynccontextmanager
async def build_worker(
    client: Client, settings: Settings, folder: PipelineFolder | None = None
) -> AsyncIterator[Worker]:
    """A worker with every activity wired to real clients; closes them on exit. ``folder``:
    the checked pipeline folder (default: ``PIPELINES_DIR``'s, checked here).

    Raises:
        ConfigError: as `pipeline_folder`.
    """
    if folder is None:
        folder = pipeline_folder(settings)
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
    plan_defaults = PlanDefaults.of(settings)
    plans = PlanActivities(plan_defaults, {p.name: p.request for p in PIPELINES})
    prompts = PromptActivities(plan_defaults, loader)
    documents = DocumentPlanActivities(plan_defaults)
    texts = DocumentTexts(loader, DocumentLimits.of(settings), texts_beside_claims(settings, s3))
    extracts = ExtractActivities(texts)
    document_store = StoreActivities(
        create_store_engine(settings.document_store_url.get_secret_value())
    )
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
        tenant_budgets_on=settings.tenant_budgeted,
        max_output_tokens=settings.llm_max_output_tokens,
    )
    meters = install_genai_metrics(settings, "worker")
    genai = GenAiTelemetry(
        settings.openai_base_url,
        capture_content=settings.otel_capture_content,
        meter_provider=meters,
    )
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
    lane = (
        BatchLane(batches, client, batch_settings(settings), gate=gate)
        if batches is not None and settings.batch_enabled
        else None
    )
    llm_activities = LlmActivities(
        llm,
        loader,
        settings.llm_timeout_s,
        prices=settings.llm_price_table,
        gate=gate,
        telemetry=genai,
        budgeted_tenants=frozenset(settings.tenant_budgets_usd),
        results=results,
        batch=lane,
        cache_scope=settings.llm_prompt_cache_scope,
        documents=texts,
    )
    batch_activities = (
        BatchActivities(
            llm_activities,
            llm,
            client,
            batches,
            base_url=settings.openai_base_url,
            gate=gate,
            telemetry=genai,
            results=results,
            prices=settings.llm_price_table,
        )
        if batches is not None
        else None
    )
    vectors = VectorActivities(
        llm, store, settings.vector_collection, settings.embedding_model, telemetry=genai
    )
    dead_letters = DeadLetterActivities(
        sqs, settings.dlq_queue_name, content_free=keyring_from_settings(settings) is not None
    )
    lineage = LineageActivities(client, settings.temporal_task_queue)
    # Review notifications (REVIEW_WEBHOOK_URL); the session's own timeouts are per call.
    webhooks = aiohttp.ClientSession()
    notify = NotifyActivities(settings, webhooks)
    data_pipelines = PipelineActivities(
        settings,
        folder,
        DATA_PIPELINES.catalog,
        [pipeline.workflow_type for pipeline in PIPELINES],
        notify,
    )
    try:
        yield Worker(
            client,
            task_queue=settings.temporal_task_queue,
            # The sandbox pass-through, failure types, converter and tracing come with the
            # client's AiOrchestratorPlugin.
            workflows=[AiOrchestrator, LlmBatch],
            # Only runs of this worker's pipelines (and batch groups) on its task queue may call
            # its activities.
            interceptors=[
                CallerCheck(client, settings.temporal_task_queue, WorkerPipelines(folder))
            ],
            activities=[
                plans.plan_run,
                prompts.fetch_prompt,
                llm_activities.invoke_llm,
                vectors.generate_embedding,
                vectors.delete_embedding,
                dead_letters.send_dead_letter,
                lineage.verify_continuation,
                notify.notify_reviewers,
                documents.plan_document,
                extracts.extract_text,
                document_store.store_document,
                data_pipelines.plan_pipeline,
                data_pipelines.notify_pipeline,
                *(batch_activities.activities if batch_activities is not None else ()),
            ],
            **tuning_options(settings),
            **deployment_options(settings),
        )
    finally:
        await llm.close()
        await store.close()
        await webhooks.close()
        document_store.close()
        if capacity is not None:
            await capacity.close()
        if meters is not None:
            meters.shutdown()


async def run_worker(settings: Settings, client: Client | None = None) -> None:
    """Poll until SIGTERM/SIGINT, then drain; tests may hand in a client.

    Raises:
        ConfigError: reviewer authentication is required and no reviewer key is configured
            (`review_auth_warning`), a pipeline file has a problem (`pipeline_folder`), or a
            review policy names what no pipeline has (`check_review_policies`), or the result
            cache is on while tenants are not authenticated (`check_result_cache`): before
            anything starts.
        TemporalUnreachable: no connection, or the server refused the worker (an unknown
            namespace, for example) before it could poll.
    """
    folder = pipeline_folder(settings)
    if warning := review_auth_warning(settings):
        log.warning("%s", warning)
    check_review_policies(settings)
    check_result_cache(settings)
    health = WorkerHealth()
    probes = await start_health(health, settings.health_port, settings.health_host)
    # Before anything else, so a signal during start-up is not lost.
    stop = stop_event()
    try:
        if client is None:
            # A signal while connecting (an address that never answers) ends the worker at
            # once: there is nothing in flight to drain yet.
            connecting = connect(settings, runtime=worker_runtime(settings))
            client = await _unless_stopped(connecting, stop)
            if client is None:
                log.info("stopped before connecting")
                return
        health.client = client
        if warning := small_cache_warning(settings):
            log.warning("%s", warning)
        added = await ensure_search_attributes(client)
        if added:
            log.info("registered search attributes: %s", ", ".join(added))
        async with build_worker(client, settings, folder) as worker:
            await _poll_until_stopped(worker, settings, health, stop)
    finally:
        if probes is not None:
            await probes.cleanup()


async def _unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """``work``'s result, or None (``work`` cancelled) if ``stop`` is set first."""
    working = asyncio.ensure_future(work)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not working.done():
        working.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await working
        return None
    return working.result()


async def _poll_until_stopped(
    worker: Worker, settings: Settings, health: WorkerHealth, stop: asyncio.Event
) -> None:
    """Run ``worker`` until ``stop`` is set (then drain) or the worker fails."""
    running = asyncio.create_task(worker.run())
    stopping = asyncio.create_task(stop.wait())
    try:
        # The SDK validates the worker against the server (namespace, credentials) before it
        # polls, and says so only through is_running: no event to wait on.
        while not worker.is_running and not running.done():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if running.done():
            await _worker_failed_to_start(running, settings)
        health.phase = "polling"
        print(
            f"worker started: task queue {settings.temporal_task_queue!r} on "
            f"{describe_target(settings)}",
            flush=True,
        )
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not running.done():
            health.phase = "draining"
            log.info(
                "draining: no new tasks; in-flight tasks finish (activities within %gs)",
                settings.worker_shutdown_grace,
            )
            await worker.shutdown()
        await running  # a worker that failed on its own raises here
        log.info("worker stopped")
    finally:
        stopping.cancel()


async def _worker_failed_to_start(running: asyncio.Task[None], settings: Settings) -> None:
    try:
        await running
    except RuntimeError as err:  # the SDK's validation error: namespace unknown, refused, ...
        reason = " ".join(str(err).split())
        raise TemporalUnreachable(
            describe_target(settings), f"the server refused the worker: {reason}"
        ) from None


def main() -> None:
    """The ``aiorch-worker`` command (``python worker.py``): exit 0 after a drain, 1 with one
    line on stderr for a problem the user can fix."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    code = 0
    try:
        settings = load_settings()
        with tracing(settings, "worker"):
            asyncio.run(run_worker(settings))
    # Each a problem the user can fix: one line, no traceback.
    except (ConfigError, TemporalUnreachable, VectorStoreLocked) as err:
        print(f"worker: {err}", file=sys.stderr)
        code = 1
    # Skip interpreter teardown, as the CLI does: the Temporal runtime's native threads can
    # outlive it and abort a worker that has already stopped or failed cleanly (SIGABRT,
    # "PyGILState_Release ... finalizing"; temporalio/sdk-python#300, seen in the deploy tests).
    # Spans were flushed by `tracing`; flush the logs and the output.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
