"""What the live-server layers (tests/e2e, tests/security, tests/deploy) share: the worker's test
environment, a local stack with its worker, a client of it, and the project's and Temporal's
command lines run as an operator or an attacker runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter

from aiorch.devstack.processes import temporal_cli_path
from aiorch.devstack.stack import LocalStack
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support import ROOT
from workflows import contract

# Short timings so retry paths play out in seconds; review timeouts are per-run options.
E2E_WORKER_ENV = {
    "LLM_BACKOFF_INITIAL_S": "0.2",
    "LLM_BACKOFF_MAX_S": "1",
    "LLM_TIMEOUT_S": "20",
    # Several workers run at once (and maybe `make dev`): no fixed metrics port; tests that
    # scrape metrics pick a free one.
    "METRICS_PORT": "0",
}

# The security issue's bar: every refused input closes its run within 10 s.
CLOSES_WITHIN_S = 10.0


def stack_with_worker(
    data_dir: Path, worker_env: Mapping[str, str] = E2E_WORKER_ENV, **options: Any
) -> Iterator[LocalStack]:
    """A local stack with a worker process, for a fixture to ``yield from``: the stack stops
    (every process by its PID) when the fixture is torn down."""
    with LocalStack(data_dir, with_worker=True, worker_env=worker_env, **options) as running:
        yield running


async def connect(stack: LocalStack, data_converter: DataConverter = DATA_CONVERTER) -> Client:
    return await Client.connect(stack.addresses.temporal_address, data_converter=data_converter)


def post_json(
    url: str, body: Mapping[str, Any], headers: Mapping[str, str]
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """POST ``body`` as JSON: the status, headers and JSON reply, for an error status too (whose
    empty body reads as ``{}``), since tests check what a refused caller is told."""
    http = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(http, timeout=10) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read() or b"{}")


def run_script(
    script: str, *args: str, env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python SCRIPT ARGS`` from the repository's root; the caller judges the exit code."""
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def starter(
    stack: LocalStack, *args: str, columns: int = 200, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python starter.py ARGS`` against the stack, as an operator runs it from a shell that
    also holds ``env``."""
    shell = {**os.environ, **stack.addresses.env(), **(env or {}), "COLUMNS": str(columns)}
    return run_script("starter.py", *args, env=shell)


def temporal_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``temporal ARGS``: the plain Temporal CLI (no codec, no validation of ours), which anyone
    with access to the namespace can use; the caller judges the exit code."""
    return subprocess.run(
        [str(temporal_cli_path()), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def temporal_workflow(
    stack: LocalStack, action: str, workflow_id: str, *options: str, inputs: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    """``temporal workflow ACTION`` on run ``workflow_id``, ``inputs`` sent as they are."""
    return temporal_cli(
        "workflow",
        action,
        "--address",
        stack.addresses.temporal_address,
        "--workflow-id",
        workflow_id,
        *options,
        *(part for raw_input in inputs for part in ("--input", raw_input)),
    )


def temporal_workflow_start(
    stack: LocalStack, workflow_id: str, *raw_inputs: str
) -> subprocess.CompletedProcess[str]:
    """Start the orchestrator through the Temporal CLI with ``raw_inputs`` sent as they are."""
    return temporal_workflow(
        stack,
        "start",
        workflow_id,
        "--type",
        contract.WORKFLOW_TYPE,
        "--task-queue",
        contract.DEFAULT_TASK_QUEUE,
        inputs=raw_inputs,
    )


def temporal_workflow_signal(
    stack: LocalStack, workflow_id: str, name: str, *raw_inputs: str
) -> subprocess.CompletedProcess[str]:
    """Signal a run through the Temporal CLI with ``raw_inputs`` sent as they are."""
    return temporal_workflow(stack, "signal", workflow_id, "--name", name, inputs=raw_inputs)
