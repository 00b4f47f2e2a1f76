"""The README's rolling deploy with Worker Versioning, against the real dev server: a worker of
a new build polls but gets no run until its build is made current with the Temporal CLI."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from aiorch.devstack.processes import temporal_cli_path
from aiorch.devstack.stack import LocalStack
from tests.deploy.processes import process_env, start_worker
from tests.support import ROOT

pytestmark = pytest.mark.e2e

DEPLOYMENT = "ai-orchestrator"


def _temporal(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(temporal_cli_path()), *args, "--address", stack.addresses.temporal_address],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_versioned_build_gets_runs_once_it_is_made_current(bare_stack: LocalStack) -> None:
    """With WORKER_VERSIONING on, a run started before any build is current waits (no worker
    of an unversioned build polls); `temporal worker deployment set-current-version` for the
    worker's build id hands it the run, which completes; the deployment shows that build as
    current."""
    build = f"b-{uuid.uuid4().hex[:8]}"
    env = process_env(
        bare_stack,
        {
            "TEMPORAL_ADDRESS": bare_stack.addresses.temporal_address,
            "WORKER_VERSIONING": "true",
            "WORKER_BUILD_ID": build,
        },
    )
    worker = start_worker(bare_stack, f"worker-{build}", env)
    try:
        waiting = subprocess.Popen(
            [sys.executable, "starter.py", "start", "versioned", "--review", "never", "--wait"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(3)  # long enough for an idle worker to finish the run, were it routed
            assert waiting.poll() is None, "the run completed before its build was current"

            deadline = time.monotonic() + 30
            while True:  # the version exists once the server has seen the worker poll
                made = _temporal(
                    bare_stack,
                    "worker", "deployment", "set-current-version",
                    "--deployment-name", DEPLOYMENT, "--build-id", build, "--yes",
                )  # fmt: skip
                if made.returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert made.returncode == 0, made.stderr
            out, err = waiting.communicate(timeout=60)
        finally:
            waiting.kill()
            waiting.wait()
        assert waiting.returncode == 0, err
        assert '"state": "completed"' in out
        described = _temporal(bare_stack, "worker", "deployment", "describe", "--name", DEPLOYMENT)
        assert build in described.stdout
    finally:
        worker.stop(timeout=60)
    assert worker.returncode == 0
