"""Worker and starter processes run the way a deployment runs them, configured only through their
environment, which is built from scratch (this process's, less any ``TEMPORAL_*`` variable), so
a developer's own Temporal settings cannot leak into a test; and the probes of their health
endpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping

from aiorch.devstack.processes import READY_TIMEOUT_S, ManagedProcess
from aiorch.devstack.servers import WORKER_READY_LINE
from aiorch.devstack.stack import LocalStack
from tests.support import ROOT
from tests.support.live_stack import E2E_WORKER_ENV

# Several workers share one host: no fixed health port either.
WORKER_ENV = {**E2E_WORKER_ENV, "HEALTH_PORT": "0"}
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def process_env(stack: LocalStack, overrides: Mapping[str, str]) -> dict[str, str]:
    """A worker's or starter's full environment: the stack's addresses, the test settings and
    ``overrides``; no inherited ``TEMPORAL_*`` variable, and ``TEMPORAL_ADDRESS`` only if the
    overrides set it (a profile file may name the address instead)."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TEMPORAL_") and k != "XDG_CONFIG_HOME"
    }
    addresses = {k: v for k, v in stack.addresses.env().items() if k != "TEMPORAL_ADDRESS"}
    # The CLI's default profile file stays out of reach: HOME is a fresh directory.
    return {
        **inherited,
        "PYTHONUNBUFFERED": "1",
        "HOME": str(stack.data_dir / "home"),
        **addresses,
        **WORKER_ENV,
        **overrides,
    }


def start_worker(stack: LocalStack, name: str, env: Mapping[str, str]) -> ManagedProcess:
    """``python worker.py`` with exactly ``env``, waited for until it polls."""
    proc = ManagedProcess(
        name, [sys.executable, "worker.py"], log_dir=stack.log_dir, env=env, cwd=ROOT
    )
    try:
        proc.wait_for_log_line(WORKER_READY_LINE, READY_TIMEOUT_S)
    except BaseException:
        proc.stop()
        raise
    return proc


def run_command(
    args: list[str], env: Mapping[str, str], timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``python <args>`` in the project root with exactly ``env``; capture its output."""
    return subprocess.run(
        [sys.executable, *args],
        env=dict(env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The non-empty lines a failed command wrote to stderr."""
    return [line for line in done.stderr.splitlines() if line.strip()]


def probe(port: int, path: str) -> tuple[int, dict[str, str]]:
    """``GET http://127.0.0.1:port/path``: (status, JSON body)."""
    try:
        with _DIRECT.open(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)
