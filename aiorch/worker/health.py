"""The worker's liveness and readiness over HTTP, on ``HEALTH_PORT`` next to the metrics
endpoint (``METRICS_PORT``, served by the SDK's runtime, which cannot serve other paths).

- ``GET /healthz`` (liveness): 200 while the process runs and its event loop answers, from
  start to exit, drain included. A probe that gets no answer means the process is wedged and
  should be restarted.
- ``GET /readyz`` (readiness): 200 once the worker is connected and polling its task queue and
  the frontend still answers (checked at most every ``check_every``); 503 before that
  (``starting``), when the frontend stops answering (``unreachable``) and from SIGTERM on
  (``draining``: it takes no new tasks, finishes the ones it holds, then exits 0). A rolling
  deploy waits for new workers to be ready before it stops old ones.

Both answer JSON ``{"status": ..., "detail": ...}``. They listen on ``HEALTH_HOST``
(loopback by default, like the metrics endpoint's ``METRICS_HOST``; ``0.0.0.0`` where an
orchestrator probes from outside, as in the Docker image); a port already taken (a second worker
on one host) is logged and the worker runs on without probes, as it does without metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from aiohttp import web
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.service import RPCError

log = logging.getLogger(__name__)

Phase = Literal["starting", "polling", "draining"]
CHECK_TIMEOUT = timedelta(seconds=2)


@dataclass
class WorkerHealth:
    """What the probes answer from: the worker's phase and its client.

    Args:
        client: the worker's client, asked whether the frontend still answers.
        check_every: how long one answer from the frontend counts (seconds).
    """

    client: Client | None = None
    check_every: float = 5.0
    phase: Phase = "starting"
    _checked_at: float = field(default=float("-inf"), repr=False)
    _reachable: str | None = field(default=None, repr=False)  # None = reachable, else why not
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def readiness(self) -> tuple[bool, str, str]:
        """(ready, status, detail) for ``/readyz``."""
        if self.phase == "starting":
            return False, "starting", "connecting and starting the pollers"
        if self.phase == "draining":
            return False, "draining", "finishing in-flight tasks before exit"
        problem = await self._frontend_problem()
        if problem is not None:
            return False, "unreachable", problem
        return True, "ready", "polling"

    async def _frontend_problem(self) -> str | None:
        if self.client is None:
            return None
        async with self._lock:  # a burst of probes makes one call
            if time.monotonic() - self._checked_at >= self.check_every:
                try:
                    await self.client.workflow_service.get_system_info(
                        GetSystemInfoRequest(), timeout=CHECK_TIMEOUT
                    )
                    self._reachable = None
                except RPCError as err:
                    self._reachable = f"Temporal does not answer: {err.status.name}"
                self._checked_at = time.monotonic()
            return self._reachable


def health_app(health: WorkerHealth) -> web.Application:
    """The two probe endpoints as an aiohttp application."""

    async def live(request: web.Request) -> web.Response:
        return web.json_response({"status": "live", "detail": health.phase})

    async def ready(request: web.Request) -> web.Response:
        ok, status, detail = await health.readiness()
        return web.json_response({"status": status, "detail": detail}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/healthz", live)
    app.router.add_get("/readyz", ready)
    return app


async def serve_health(health: WorkerHealth, port: int, host: str) -> web.AppRunner:
    """Serve the probes on ``host:port`` (0 = any free port); stop with ``runner.cleanup()``.

    Raises:
        OSError: the port cannot be bound.
    """
    runner = web.AppRunner(health_app(health), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


def bound_port(runner: web.AppRunner) -> int | None:
    """The port a started runner listens on (useful when it was asked for port 0)."""
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    return None


async def start_health(health: WorkerHealth, port: int, host: str) -> web.AppRunner | None:
    """`serve_health` on ``HEALTH_HOST:HEALTH_PORT``; None when the port is 0 or cannot be
    bound (logged, not fatal)."""
    if not port:
        return None
    try:
        runner = await serve_health(health, port, host)
    except OSError as err:
        log.warning(
            "health endpoints on port %d not started (%s); set HEALTH_PORT to a free port, or "
            "0 to turn them off",
            port,
            err.strerror or err,
        )
        return None
    shown = f"[{host}]" if ":" in host else host
    log.info("health endpoints on http://%s:%d/healthz and /readyz", shown, port)
    return runner
