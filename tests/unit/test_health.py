"""The worker's probes (``aiorch.worker.health``) over real HTTP: liveness from start to exit,
readiness only while connected and polling."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from aiorch.devstack.processes import free_port
from aiorch.worker.health import WorkerHealth, bound_port, serve_health, start_health
from aiorch.worker.options import deployment_options
from aiorch_runtime.config import Settings


@pytest.fixture
async def served() -> AsyncIterator[tuple[WorkerHealth, str]]:
    health = WorkerHealth()
    runner = await serve_health(health, 0, host="127.0.0.1")
    try:
        yield health, f"http://127.0.0.1:{bound_port(runner)}"
    finally:
        await runner.cleanup()


async def _get(url: str) -> tuple[int, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


async def test_probes_follow_the_worker_from_start_through_drain(
    served: tuple[WorkerHealth, str],
) -> None:
    """Liveness answers 200 in every phase; readiness is 503 ``starting``, 200 once polling,
    503 ``draining`` after SIGTERM."""
    health, base = served
    assert await _get(f"{base}/healthz") == (200, {"status": "live", "detail": "starting"})
    status, body = await _get(f"{base}/readyz")
    assert (status, body["status"]) == (503, "starting")

    health.phase = "polling"
    assert await _get(f"{base}/readyz") == (200, {"status": "ready", "detail": "polling"})

    health.phase = "draining"
    status, body = await _get(f"{base}/readyz")
    assert (status, body["status"]) == (503, "draining")
    assert (await _get(f"{base}/healthz"))[0] == 200


async def test_a_taken_port_is_logged_and_the_worker_runs_without_probes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another process on HEALTH_PORT: no probes, a warning naming the setting, no crash;
    HEALTH_PORT=0 serves nothing."""
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        assert await start_health(WorkerHealth(), taken.getsockname()[1], "127.0.0.1") is None
    assert "HEALTH_PORT" in caplog.text
    assert await start_health(WorkerHealth(), 0, "127.0.0.1") is None
    runner = await start_health(WorkerHealth(), free_port(), "127.0.0.1")
    assert runner is not None
    await runner.cleanup()


def test_no_build_id_reports_no_version() -> None:
    """By default the worker passes no deployment options (unversioned, as before)."""
    assert deployment_options(Settings()) == {}


def test_a_build_id_reports_the_version_and_versioning_routes_by_it() -> None:
    """WORKER_BUILD_ID reports ``ai-orchestrator.<build>`` without routing by it; with
    WORKER_VERSIONING the server routes by it and open runs follow the chosen behaviour."""
    reported = deployment_options(Settings(worker_build_id="b1"))["deployment_config"]
    assert reported.version.to_canonical_string() == "ai-orchestrator.b1"
    assert not reported.use_worker_versioning

    pinned = deployment_options(
        Settings(worker_build_id="b2", worker_versioning=True, worker_versioning_behavior="pinned")
    )["deployment_config"]
    assert pinned.use_worker_versioning
    assert pinned.default_versioning_behavior.name == "PINNED"
