"""The README's rolling deploy with Worker Versioning, against the real dev server: a worker of
a new build polls but gets no run until its build is made current with the Temporal CLI."""

from __future__ import annotations

import json
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
STARTER = (sys.executable, "starter.py", "start", "versioned")


def _temporal(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(temporal_cli_path()), *args, "--address", stack.addresses.temporal_address],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _event_types(stack: LocalStack, workflow_id: str) -> list[str]:
    """The run's history as event types (``EVENT_TYPE_WORKFLOW_TASK_STARTED`` once a worker
    took a task); empty while the run does not exist yet."""
    shown = _temporal(stack, "workflow", "show", "--workflow-id", workflow_id, "--output", "json")
    if shown.returncode != 0:
        return []
    return [str(event["eventType"]) for event in json.loads(shown.stdout)["events"]]


def test_a_versioned_build_gets_runs_once_it_is_made_current(bare_stack: LocalStack) -> None:
    """With WORKER_VERSIONING on, a run started before any build is current waits: once the
    server lists the worker's build in the deployment (it has seen the worker poll) and the
    run's first workflow task is scheduled, no worker has started that task, though the
    worker polls. `temporal worker deployment set-current-version` for the build hands it the
    run, which completes; the deployment shows that build as current."""
    build = f"b-{uuid.uuid4().hex[:8]}"
    workflow_id = uuid.uuid4().hex[:24]
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
            [*STARTER, "--id", workflow_id, "--review", "never", "--wait"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while True:  # the build is listed once the server has seen the worker poll
                listed = _temporal(
                    bare_stack, "worker", "deployment", "describe", "--name", DEPLOYMENT
                )
                history = _event_types(bare_stack, workflow_id)
                if build in listed.stdout and "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED" in history:
                    break
                assert time.monotonic() < deadline, (listed.stdout, listed.stderr, history)
                time.sleep(0.5)
            # A poller that may take the task gets it as it is scheduled: none has.
            assert "EVENT_TYPE_WORKFLOW_TASK_STARTED" not in _event_types(bare_stack, workflow_id)
            assert waiting.poll() is None, "the run completed before its build was current"

            made = _temporal(
                bare_stack,
                "worker", "deployment", "set-current-version",
                "--deployment-name", DEPLOYMENT, "--build-id", build, "--yes",
            )  # fmt: skip
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
