"""The input loader against a real S3 endpoint (moto in server mode, its own process):
references resolve only inside the operator's bucket prefixes, reads are bounded whatever S3
claims, and a 403 reads the same as a 404."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from temporalio.exceptions import ApplicationError

from activities.prompt import InputLoader
from aiorch.devstack.processes import ManagedProcess, free_port
from aiorch.devstack.servers import start_sqs_server
from tests.activities.input_refusals import (
    LIMIT,
    UNAVAILABLE,
    WORKER_BOTO,
    refusal,
    s3_loader,
    template,
)
from workflows import errors

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.e2e


# -------------------------------------------------------------------------------------- S3


@dataclass
class S3Server:
    """A moto server process with its log, for checking which requests reached it."""

    url: str
    proc: ManagedProcess

    def client(self, key_id: str = "testing", secret: str = "testing") -> S3Client:
        return boto3.session.Session(
            aws_access_key_id=key_id, aws_secret_access_key=secret, region_name="us-east-1"
        ).client("s3", endpoint_url=self.url, config=WORKER_BOTO)

    def requested_paths(self) -> str:
        """Every request line logged so far, after a marker request proves the log is current."""
        marker = f"/marker-{time.monotonic_ns()}"
        with urllib.request.urlopen(f"{self.url}/moto-api/?m={marker}", timeout=5):
            pass
        deadline = time.monotonic() + 5
        while marker not in (text := self.proc.log_text()):
            assert time.monotonic() < deadline, "moto never logged the marker request"
            time.sleep(0.05)
        return text


def start_s3(log_dir: Path) -> S3Server:
    port = free_port()
    return S3Server(f"http://127.0.0.1:{port}", start_sqs_server(port=port, log_dir=log_dir))


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3(tmp_path_factory.mktemp("moto"))
    admin = server.client()
    admin.create_bucket(Bucket="docs")
    admin.create_bucket(Bucket="other")
    for key, body in (
        ("public/a.txt", b"public text"),
        ("public/empty.txt", b""),
        ("public/at-limit.txt", b"a" * LIMIT),
        ("public/over-limit.txt", b"a" * (LIMIT + 1)),
        ("public/big.txt", b"a" * (4 * 1024 * 1024)),
        ("public-internal/x.txt", b"internal"),
        ("private/other.txt", b"private"),
    ):
        admin.put_object(Bucket="docs", Key=key, Body=body)
    admin.put_object(Bucket="other", Key="x", Body=b"other")
    try:
        yield server
    finally:
        server.proc.stop()


async def test_s3_inside_an_allowed_prefix_is_read(s3: S3Server) -> None:
    """An object under an allowed bucket/prefix loads; an empty one loads as empty text."""
    loader = s3_loader(s3.client())
    assert await loader.load("s3://docs/public/a.txt") == "public text"
    assert await loader.load("s3://docs/public/empty.txt") == ""


async def test_s3_outside_the_prefixes_is_refused_without_a_call(s3: S3Server) -> None:
    """Another bucket, another prefix (also one that merely starts with the allowed folder's
    name), ``..`` segments and empty keys are refused before any request reaches S3."""
    loader = s3_loader(s3.client())
    refused = [
        "s3://other/x",
        "s3://docs/private/other.txt",
        "s3://docs/public-internal/x.txt",
        "s3://docs/public/../private/s.txt",
        "s3://docs/public/",
        "s3://docs/",
        "s3://docs",
        "s3://some-other-bucket/x",
    ]
    for reference in refused:
        assert template(await refusal(loader, reference), reference) == UNAVAILABLE
    log = s3.requested_paths()
    for path in ("/other/", "/docs/private", "/docs/public-internal", "/some-other-bucket"):
        assert f"GET {path}" not in log
    assert "GET /docs/public/ " not in log and "GET /docs " not in log


async def test_s3_size_bound(s3: S3Server) -> None:
    """An object of exactly the limit loads; one byte more, or megabytes more, is too large."""
    loader = s3_loader(s3.client())
    assert len(await loader.load("s3://docs/public/at-limit.txt")) == LIMIT
    for reference in ("s3://docs/public/over-limit.txt", "s3://docs/public/big.txt"):
        error = await refusal(loader, reference)
        assert template(error, reference) == (
            f"input <ref> is larger than the limit of {LIMIT} bytes (MAX_INPUT_BYTES)"
        )


async def test_s3_missing_key_and_bucket_read_as_refused(s3: S3Server) -> None:
    """NoSuchKey and NoSuchBucket (both 404) give the same text as a prefix refusal."""
    loader = s3_loader(s3.client(), "docs/public", "gone-bucket")
    for reference in ("s3://docs/public/missing.txt", "s3://gone-bucket/x.txt"):
        assert template(await refusal(loader, reference), reference) == UNAVAILABLE


@pytest.fixture(scope="module")
def locked_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, S3Client]]:
    """A moto server with IAM checks on, and a client whose key may read docs/public/* only."""
    server = start_s3(tmp_path_factory.mktemp("moto-auth"))
    try:
        admin = server.client()
        admin.create_bucket(Bucket="docs")
        admin.put_object(Bucket="docs", Key="public/a.txt", Body=b"public text")
        admin.put_object(Bucket="docs", Key="private/locked.txt", Body=b"private")
        iam = boto3.client(
            "iam",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        iam.create_user(UserName="worker")
        statement = {
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::docs/public/*",
        }
        iam.put_user_policy(
            UserName="worker",
            PolicyName="read-public",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
        )
        key = iam.create_access_key(UserName="worker")["AccessKey"]
        # From here on moto checks every request against IAM, as AWS does.
        request = urllib.request.Request(
            f"{server.url}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=5):
            pass
        yield server, server.client(key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        server.proc.stop()


async def test_s3_403_and_404_read_byte_identical(
    s3: S3Server, locked_s3: tuple[S3Server, S3Client]
) -> None:
    """One reference gives byte-identical errors whether S3 says 403 (the worker's role may not
    read the object, which exists) or 404 (no such object): the caller cannot tell which keys
    exist. Missing keys and buckets behind the IAM check read the same too."""
    _, worker_client = locked_s3
    locked = s3_loader(worker_client, "docs/public", "docs/private", "gone-bucket")
    assert await locked.load("s3://docs/public/a.txt") == "public text"
    reference = "s3://docs/private/locked.txt"
    denied = await refusal(locked, reference)  # exists here: AccessDenied (403)
    missing = await refusal(s3_loader(s3.client(), "docs/private"), reference)  # NoSuchKey
    assert denied.message == missing.message
    for other in ("s3://docs/private/none.txt", "s3://gone-bucket/x.txt"):
        assert template(await refusal(locked, other), other) == UNAVAILABLE


async def test_s3_reference_is_loaded_through_boto3(s3: S3Server) -> None:
    """An s3:// input in an allowed bucket is read from the S3 endpoint (moto over HTTP)."""
    client = s3.client()
    client.create_bucket(Bucket="inputs")
    client.put_object(Bucket="inputs", Key="q.txt", Body=b"From S3")
    loader = InputLoader(s3=client, s3_prefixes=["inputs"])
    assert await loader.load("s3://inputs/q.txt") == "From S3"
    with pytest.raises(ApplicationError) as info:
        await loader.load("s3://inputs/missing.txt")
    assert info.value.type == errors.INPUT_UNAVAILABLE
