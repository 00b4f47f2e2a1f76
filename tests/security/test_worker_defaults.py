"""A worker as an operator starts it with the defaults, attacked from outside: with no reviewer
key configured (or a keys file of comments only) it does not start, so no one can approve runs
by typing a reviewer's name; turned off on purpose (``REVIEW_AUTH=off``) it says so at every
start, and then an unsigned approval from a plain Temporal client is accepted, which is exactly
why it is refused by default. Its metrics and probes answer on loopback only.

The stack here has no worker of its own: each test starts the worker it attacks, on a task
queue of its own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_worker
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support import ROOT
from tests.support.builders import new_request_id
from tests.support.live_runs import request, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, run_script, starter, temporal_cli
from workflows import contract

pytestmark = pytest.mark.e2e

# Straight to the address asked for, whatever proxy the environment names.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(tmp_path_factory.mktemp("worker-defaults"), with_worker=False) as running:
        yield running


def worker_env(stack: LocalStack, queue: str, **overrides: str) -> dict[str, str]:
    """The operator's worker: the stack's addresses, without the stack's reviewer keys (an
    operator who never set any), a task queue and vector store of its own, then
    ``overrides``."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("REVIEW_")}
    addresses = {k: v for k, v in stack.addresses.env().items() if k != "REVIEW_PUBLIC_KEYS"}
    return {
        **inherited,
        **addresses,
        **E2E_WORKER_ENV,
        "HEALTH_PORT": "0",
        "TEMPORAL_TASK_QUEUE": queue,
        "VECTOR_STORE_PATH": str(stack.data_dir / f"vectors-{queue}"),
        **overrides,
    }


def test_a_worker_without_reviewer_keys_does_not_start(stack: LocalStack, tmp_path: Path) -> None:
    """Left at its default, a worker with no REVIEW_PUBLIC_KEYS exits 1 with one line naming
    what to set; so does one whose keys file holds only a comment (keys revoked pending
    rotation), which used to mean "accept unsigned reviews"."""
    revoked = tmp_path / "review-public-keys"
    revoked.write_text("# keys revoked pending rotation\n")
    for overrides, line in (
        ({}, "worker: reviewer authentication is required (REVIEW_AUTH=required, the default)"),
        (
            {"REVIEW_PUBLIC_KEYS_FILE": str(revoked)},
            "worker: REVIEW_PUBLIC_KEYS_FILE holds no key (only comments or blank lines)",
        ),
    ):
        done = run_script("worker.py", env=worker_env(stack, f"q-{new_request_id()}", **overrides))
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith(line), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_turned_off_it_warns_and_then_accepts_anyones_approval(
    stack: LocalStack, tmp_path: Path
) -> None:
    """REVIEW_AUTH=off, set on purpose: the worker logs a warning saying what that allows at
    every start, and an unsigned approve naming any reviewer, sent by a plain Temporal client,
    completes the run. Every test fixture that wants unsigned reviews must say so this way."""
    queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    env = worker_env(stack, queue, REVIEW_AUTH="off")
    worker: ManagedProcess = start_worker(env=env, log_dir=tmp_path, cwd=ROOT)
    try:
        assert "REVIEW_AUTH=off: reviews are not authenticated" in worker.log_text()
        client = await connect(stack)
        payload = request("Wire the money", review="always")
        handle = await client.start_workflow(
            contract.WORKFLOW_TYPE, payload, id=payload["request_id"], task_queue=queue
        )
        await wait_for_state(handle, "await_review")
        await handle.signal(contract.SIGNAL_REVIEW, {"decision": "approve", "reviewer": "ceo"})
        result = await finished(handle)
        assert result.state == "completed"
        assert result.history[-2].reviewer == "ceo"
        worker.stop()
        again = start_worker(env=env, log_dir=tmp_path, cwd=ROOT)
        try:
            assert "REVIEW_AUTH=off: reviews are not authenticated" in again.log_text()
        finally:
            again.stop()
    finally:
        worker.stop()


async def test_a_plain_temporal_cli_reviews_only_with_a_signed_payload(
    stack: LocalStack, tmp_path: Path
) -> None:
    """What the README tells a plain client to send: the Temporal CLI's `workflow update
    execute --name submit_review` with a review it typed is refused as not signed; with the
    JSON `aiorch review ID approve --print` signs (REVIEWER_KEY_FILE), it completes the run."""
    queue = f"keyed-{uuid.uuid4().hex[:8]}"
    keys = stack.addresses.review_public_keys
    worker = start_worker(
        env=worker_env(stack, queue, REVIEW_PUBLIC_KEYS=keys), log_dir=tmp_path, cwd=ROOT
    )
    try:
        client = await connect(stack)
        payload = request("Publish the report", review="always")
        handle = await client.start_workflow(
            contract.WORKFLOW_TYPE, payload, id=payload["request_id"], task_queue=queue
        )
        await wait_for_state(handle, "await_review")

        def update(review: str) -> subprocess.CompletedProcess[str]:
            return temporal_cli(
                *("workflow", "update", "execute", "--name", contract.UPDATE_SUBMIT_REVIEW),
                *("--address", stack.addresses.temporal_address, "--workflow-id", handle.id),
                *("--input", review),
            )

        typed = update(json.dumps({"decision": "approve", "reviewer": "alice"}))
        assert typed.returncode != 0
        assert "review is not signed" in typed.stdout + typed.stderr
        printed = starter(stack, "review", handle.id, "approve", "--reviewer", "alice", "--print")
        assert printed.returncode == 0, printed.stderr
        sent = update(printed.stdout.strip())
        assert sent.returncode == 0, sent.stdout + sent.stderr
        result = await finished(handle)
        assert result.state == "completed" and result.history[-2].reviewer == "alice"
    finally:
        worker.stop()


def other_address() -> str:
    """An address of this machine that is not 127.0.0.1: the one it reaches other hosts from,
    else 127.0.0.2 (loopback too, but a socket bound to 127.0.0.1 does not answer there, and
    one bound to every interface does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.255", 9))  # no packet is sent: this only picks a route
            address = str(probe.getsockname()[0])
        except OSError:
            address = "127.0.0.1"
    return "127.0.0.2" if address == "127.0.0.1" else address


def http_status(url: str) -> int | str:
    """The status of ``GET url``, or why no answer came."""
    try:
        with DIRECT.open(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError as err:
        return type(err).__name__


async def test_metrics_and_probes_answer_on_loopback_only(
    stack: LocalStack, tmp_path: Path
) -> None:
    """A worker with the default METRICS_HOST and HEALTH_HOST serves /metrics (model names,
    costs, tenants, the task queue) and /readyz on 127.0.0.1, and nothing on another address
    of the same machine, where anyone on its network would reach them."""
    queue = f"probed-{uuid.uuid4().hex[:8]}"
    metrics, health = free_port(), free_port()
    env = worker_env(
        stack,
        queue,
        REVIEW_PUBLIC_KEYS=stack.addresses.review_public_keys,
        METRICS_PORT=str(metrics),
        HEALTH_PORT=str(health),
    )
    worker = start_worker(env=env, log_dir=tmp_path, cwd=ROOT)
    try:
        assert http_status(f"http://127.0.0.1:{metrics}/metrics") == 200
        assert http_status(f"http://127.0.0.1:{health}/readyz") == 200
        outside = other_address()
        for url in (f"http://{outside}:{metrics}/metrics", f"http://{outside}:{health}/readyz"):
            assert not isinstance(http_status(url), int), url
    finally:
        worker.stop()
