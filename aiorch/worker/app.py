"""Run an ai-orchestrator worker: ``python worker.py`` (installed: ``aiorch-worker``).

Loads configuration (without reviewer keys it refuses to start unless ``REVIEW_AUTH=off``,
which it then warns about) and its registered pipelines (the shipped ones and
``PIPELINE_MODULES``'), serves its health endpoints, connects
(``aiorch_runtime.connection``: the envconfig profile, TLS and API key, the project's plugin),
registers the search attributes, opens the shared clients (``aiorch.worker.clients``), builds
every registered pipeline's activities from them (``aiorch.worker.registration``) and polls the
task queue until SIGTERM or SIGINT. Then it drains: readiness turns to ``draining``, polling
stops, the tasks it holds finish (activities get ``WORKER_SHUTDOWN_GRACE`` seconds before they
are cancelled), and it exits 0. Any number of workers may poll the same queue; what one leaves
behind (a crash included) the others pick up.

Every failure a user can fix (configuration, connection) ends in one line on stderr and exit
status 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TypeVar

from temporalio.client import Client
from temporalio.worker import Worker

from activities.callers import CallerCheck
from aiorch.ops.pipelines import load
from aiorch.worker.clients import open_clients
from aiorch.worker.health import WorkerHealth, start_health
from aiorch.worker.lab import lab_worker
from aiorch.worker.options import (
    check_review_policies,
    deployment_options,
    review_auth_warning,
    small_cache_warning,
    tuning_options,
)
from aiorch.worker.registration import WorkerPipelines, pipeline_folder, worker_activities
from aiorch.worker.tenant_boundaries import check_result_cache
from aiorch_runtime.config import ConfigError, Settings, load_settings
from aiorch_runtime.connection import connect, describe_target, ensure_search_attributes
from aiorch_runtime.errors import TemporalUnreachable, VectorStoreLocked
from aiorch_runtime.experiments import check_pipelines
from aiorch_runtime.pipeline_files import PipelineFolder
from aiorch_runtime.signals import stop_event
from aiorch_runtime.telemetry import tracing, worker_runtime
from workflows.batch.workflow import LlmBatch
from workflows.orchestrator import DATA_PIPELINES, PIPELINES, EngineWorkflow

log = logging.getLogger("ai-orchestrator.worker")
T = TypeVar("T")


@contextlib.asynccontextmanager
async def build_worker(
    client: Client, settings: Settings, folder: PipelineFolder | None = None
) -> AsyncIterator[list[Worker]]:
    """The workers of one process: the task queue's, running every registered pipeline, its
    activities wired to the shared clients (which it closes on exit), and the replay lab's
    queue's (``aiorch.worker.lab``) unless ``LAB_ENABLED=false``. ``folder``: the checked
    pipeline folder (default: ``PIPELINES_DIR``'s, checked here).

    Raises:
        ConfigError: as `load` (``PIPELINE_MODULES``) or `pipeline_folder`, or a pipeline's
            activity factory cannot be found, or the lab's task queue is the production one.
    """
    pipelines = load(settings.pipeline_modules)
    if folder is None:
        folder = pipeline_folder(settings, pipelines)
    # Before any run: workflow code finds the pipelines there (workflows.engine.registry).
    PIPELINES.install(pipelines)
    async with contextlib.AsyncExitStack() as stack:
        clients = await open_clients(
            stack, client, settings, folder, DATA_PIPELINES.catalog, pipelines
        )
        activities = worker_activities(pipelines, clients)
        types = WorkerPipelines(pipelines, folder)
        worker = Worker(
            client,
            task_queue=settings.temporal_task_queue,
            # The sandbox pass-through, failure types, converter and tracing come with the
            # client's AiOrchestratorPlugin.
            workflows=[EngineWorkflow, LlmBatch],
            # Only runs of this worker's pipelines (and batch groups) on its task queue may call
            # its activities.
            interceptors=[CallerCheck(client, settings.temporal_task_queue, types)],
            activities=activities,
            **tuning_options(settings),
            **deployment_options(settings),
        )
        lab = lab_worker(client, settings, types, activities)
        yield [worker] if lab is None else [worker, lab]


async def run_worker(settings: Settings, client: Client | None = None) -> None:
    """Poll until SIGTERM/SIGINT, then drain; tests may hand in a client.

    Raises:
        ConfigError: a ``PIPELINE_MODULES`` module cannot be registered (`load`), reviewer
            authentication is required and no reviewer key is configured
            (`review_auth_warning`), a pipeline file has a problem (`pipeline_folder`), or a
            review policy or an experiment names what no pipeline has
            (`check_review_policies`, `check_pipelines`), or the result
            cache is on while tenants are not authenticated (`check_result_cache`): before
            anything starts.
        TemporalUnreachable: no connection, or the server refused the worker (an unknown
            namespace, for example) before it could poll.
    """
    pipelines = load(settings.pipeline_modules)
    folder = pipeline_folder(settings, pipelines)
    if warning := review_auth_warning(settings):
        log.warning("%s", warning)
    check_review_policies(settings, pipelines)
    files = await folder.names() if folder is not None else []
    check_pipelines(settings.experiments, [pipeline.name for pipeline in pipelines], files)
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
        async with build_worker(client, settings, folder) as workers:
            await _poll_until_stopped(workers, settings, health, stop)
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
    workers: Sequence[Worker], settings: Settings, health: WorkerHealth, stop: asyncio.Event
) -> None:
    """Run ``workers`` until ``stop`` is set (then drain them all) or one fails."""
    running = [asyncio.create_task(worker.run()) for worker in workers]
    stopping = asyncio.create_task(stop.wait())
    try:
        # The SDK validates a worker against the server (namespace, credentials) before it
        # polls, and says so only through is_running: no event to wait on.
        while not all(w.is_running for w in workers) and not any(t.done() for t in running):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        for task in running:
            if task.done():
                await _worker_failed_to_start(task, settings)
        health.phase = "polling"
        queues = " and ".join(repr(worker.task_queue) for worker in workers)
        noun = "task queue" if len(workers) == 1 else "task queues"
        print(f"worker started: {noun} {queues} on {describe_target(settings)}", flush=True)
        await asyncio.wait({*running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not all(task.done() for task in running):
            health.phase = "draining"
            log.info(
                "draining: no new tasks; in-flight tasks finish (activities within %gs)",
                settings.worker_shutdown_grace,
            )
            await asyncio.gather(*(w.shutdown() for w in workers))
        await asyncio.gather(*running)  # a worker that failed on its own raises here
        log.info("worker stopped")
    finally:
        stopping.cancel()
        # One worker failed (to start, or later): the others stop too, not left polling.
        left = [(w, t) for w, t in zip(workers, running, strict=True) if not t.done()]
        await asyncio.gather(*(w.shutdown() for w, _ in left), return_exceptions=True)
        await asyncio.gather(*(t for _, t in left), return_exceptions=True)


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
