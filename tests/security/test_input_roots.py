"""Host file and bucket reads, tried as an attacker who holds only a Temporal client.

A real dev server and a real worker process (the local stack, whose worker's only file root is
``<data_dir>/inputs`` and whose only S3 prefix is the claim-check bucket's ``inputs/``). Each
reference outside those ends the run ``failed`` within seconds with one error text, whether the
target exists or not, and nothing of it reaches the LLM; a document inside the root still runs
end to end, and the worker survives all of it.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch_runtime.config import DEFAULT_MAX_INPUT_BYTES
from tests.support.live_runs import request, start
from tests.support.live_stack import CLOSES_WITHIN_S
from tests.support.simulator import Simulator
from workflows.payloads import PipelineResult

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.e2e

CLAIM_CHECK_BUCKET = "ai-orchestrator-inputs"  # CLAIM_CHECK_BUCKET's default
REFUSED = "InputUnavailable: input {ref} is not available (missing or not allowed)"
TOO_LARGE = (
    "InputUnavailable: input {ref} is larger than the limit of "
    f"{DEFAULT_MAX_INPUT_BYTES} bytes (MAX_INPUT_BYTES)"
)


@dataclass
class Target:
    """The stack under attack, and what the attacker points at."""

    stack: LocalStack
    client: Client
    simulator: Simulator
    secret: Path
    s3: S3Client

    @property
    def root(self) -> Path:
        return self.stack.addresses.input_dir


@pytest.fixture(scope="module")
async def target(
    stack: LocalStack, client: Client, tmp_path_factory: pytest.TempPathFactory
) -> Target:
    outside = tmp_path_factory.mktemp("outside")
    secret = outside / "secret.txt"
    secret.write_text("TOP SECRET: the launch codes")
    root = stack.addresses.input_dir
    (root / "doc.txt").write_text("The quarterly report says revenue grew by 12 percent.")
    (root / "escape.txt").symlink_to(secret)
    (root / "environ").symlink_to("/proc/self/environ")
    s3 = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client("s3", endpoint_url=stack.addresses.sqs_endpoint_url)
    for bucket in (CLAIM_CHECK_BUCKET, "some-other-bucket"):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket="some-other-bucket", Key="x", Body=b"other team's data")
    s3.put_object(Bucket=CLAIM_CHECK_BUCKET, Key="private/x", Body=b"not an input")
    return Target(stack, client, Simulator(stack.addresses.openai_base_url), secret, s3)


def s3_requests(stack: LocalStack) -> str:
    """Every request line moto has logged, after a marker request proves the log is current."""
    marker = f"marker-{time.monotonic_ns()}"
    url = f"{stack.addresses.sqs_endpoint_url}/moto-api/?{marker}"
    with urllib.request.urlopen(url, timeout=5):
        pass
    proc = stack.processes["sqs"]
    deadline = time.monotonic() + 5
    while marker not in (text := proc.log_text()):
        assert time.monotonic() < deadline, "moto never logged the marker request"
        time.sleep(0.05)
    return text


async def run_to_end(client: Client, message: str) -> tuple[str, PipelineResult, float]:
    """Start a run as a plain client would; its id, result and seconds until it closed."""
    started = time.monotonic()
    handle = await start(client, request(message, review="never"))
    result = await asyncio.wait_for(finished(handle), timeout=60)
    return handle.id, result, time.monotonic() - started


async def test_references_outside_the_roots_fail_fast_with_one_text(target: Target) -> None:
    """Host files, a symlink out of the root, ``..``, a missing file and other buckets or
    prefixes each end the run failed within 10 s, with the same text but for the reference;
    the worker's key never appears, and no such run calls the LLM or reaches S3."""
    root = target.root
    attacks = [
        "file:///proc/self/environ",
        "file:///etc/passwd",
        "file:///dev/zero",
        (root / "escape.txt").as_uri(),
        (root / "environ").as_uri(),
        f"{root.as_uri()}/../../{target.secret.parent.name}/secret.txt",
        target.secret.as_uri(),
        (root / "missing.txt").as_uri(),
        "file:///etc/no-such-file",
        "s3://some-other-bucket/x",
        f"s3://{CLAIM_CHECK_BUCKET}/private/x",
        f"s3://{CLAIM_CHECK_BUCKET}/inputs/missing.txt",
    ]
    runs = await asyncio.gather(*(run_to_end(target.client, ref) for ref in attacks))
    for reference, (run_id, result, seconds) in zip(attacks, runs, strict=True):
        assert result.state == "failed", reference
        assert seconds < CLOSES_WITHIN_S, (reference, seconds)
        assert result.history[-1].detail == REFUSED.format(ref=reference)
        dumped = result.model_dump_json()
        assert "sim-local-key" not in dumped and "TOP SECRET" not in dumped
        assert target.simulator.requests(run_id) == []
    s3_log = s3_requests(target.stack)
    for path in ("/some-other-bucket/", f"/{CLAIM_CHECK_BUCKET}/private/"):
        assert f"GET {path}" not in s3_log and f"HEAD {path}" not in s3_log


async def test_missing_and_forbidden_are_byte_identical(target: Target) -> None:
    """The same reference fails with the very same text while the file exists outside the root
    and after it is gone: a caller cannot probe which files exist."""
    reference = target.secret.as_uri()
    _, forbidden, _ = await run_to_end(target.client, reference)
    target.secret.unlink()
    _, missing, _ = await run_to_end(target.client, reference)
    assert forbidden.state == missing.state == "failed"
    assert forbidden.history[-1].detail == missing.history[-1].detail


async def test_document_inside_the_root_still_runs(target: Target) -> None:
    """A document in the stack's input root runs end to end: its text reaches the LLM and the
    run completes."""
    run_id, result, _ = await run_to_end(target.client, (target.root / "doc.txt").as_uri())
    assert result.state == "completed"
    [chat] = target.simulator.chat_requests(run_id)
    assert "revenue grew by 12 percent" in str(chat["messages"])


async def test_worker_survives_the_attacks(target: Target) -> None:
    """Inputs that would hang or flood a careless reader, each sent three times at once: a FIFO
    and a link to /dev/zero inside the worker's input root, /dev/zero itself, a sparse 8 GiB
    file in the root and an S3 object one byte over MAX_INPUT_BYTES under the allowed prefix.
    Every run fails within 10 s with its one-line reason and calls no LLM, and the same worker
    process (same PID) is up afterwards and completes a plain run."""
    root = target.root
    os.mkfifo(root / "pipe")
    (root / "zero").symlink_to("/dev/zero")
    with (root / "huge.bin").open("wb") as sparse:
        sparse.truncate(8 * 1024**3)
    target.s3.put_object(
        Bucket=CLAIM_CHECK_BUCKET,
        Key="inputs/huge.bin",
        Body=b"x" * (DEFAULT_MAX_INPUT_BYTES + 1),
    )
    worker = target.stack.processes["worker"]
    pid = worker.pid
    attacks = {
        (root / "pipe").as_uri(): REFUSED,
        (root / "zero").as_uri(): REFUSED,
        "file:///dev/zero": REFUSED,
        (root / "huge.bin").as_uri(): TOO_LARGE,
        f"s3://{CLAIM_CHECK_BUCKET}/inputs/huge.bin": TOO_LARGE,
    }
    sent = [reference for reference in attacks for _ in range(3)]
    runs = await asyncio.gather(*(run_to_end(target.client, ref) for ref in sent))
    for reference, (run_id, result, seconds) in zip(sent, runs, strict=True):
        assert result.state == "failed", reference
        assert seconds < CLOSES_WITHIN_S, (reference, seconds)
        assert result.history[-1].detail == attacks[reference].format(ref=reference)
        assert target.simulator.requests(run_id) == []

    assert worker.is_running() and worker.pid == pid
    _, result, _ = await run_to_end(target.client, "Still there?")
    assert result.state == "completed"
