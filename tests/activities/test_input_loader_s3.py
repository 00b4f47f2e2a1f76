"""The input loader against real S3 endpoints: references resolve only inside the operator's
bucket prefixes, reads are bounded whatever S3 claims, and a 403 reads the same as a 404 (moto
in server mode, its own process); S3's passing trouble (5xx, 408, 429, throttling) is retried
and every other answer refused (a scripted S3 endpoint in the test, ``tests.support.s3_stub``)."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from temporalio.exceptions import ApplicationError

from activities.input_loader import InputLoader
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
from tests.support.s3_stub import (
    ErrorAnswer,
    HeldObject,
    StoredObject,
    StubS3,
    running_s3_stub,
    s3_error,
)
from workflows import errors

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.e2e


def s3_client(url: str, key_id: str = "testing", secret: str = "testing") -> S3Client:
    """A client for the S3 endpoint at ``url``, configured as the worker configures its own."""
    return boto3.session.Session(
        aws_access_key_id=key_id, aws_secret_access_key=secret, region_name="us-east-1"
    ).client("s3", endpoint_url=url, config=WORKER_BOTO)


# -------------------------------------------------------------------------------------- S3


@dataclass
class S3Server:
    """A moto server process with its log, for checking which requests reached it."""

    url: str
    proc: ManagedProcess

    def client(self, key_id: str = "testing", secret: str = "testing") -> S3Client:
        return s3_client(self.url, key_id, secret)

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


# ------------------------------------------------------------- S3 as only a real one answers


@pytest.fixture(scope="module")
def stub_server() -> Iterator[StubS3]:
    with running_s3_stub() as running:
        yield running


@pytest.fixture(scope="module")
def stub_loader(stub_server: StubS3) -> InputLoader:
    """The loader as the worker builds it, reading from the stub (built once: a client takes
    a moment to build)."""
    return s3_loader(s3_client(stub_server.url))


@pytest.fixture
def stub(stub_server: StubS3) -> Iterator[StubS3]:
    """The stub, with no answers scripted and no requests recorded yet."""
    stub_server.reset()
    yield stub_server
    stub_server.reset()


DOCUMENT = "s3://docs/public/a.txt"
DOCUMENT_PATH = "/docs/public/a.txt"


async def test_s3_is_asked_for_one_byte_more_than_the_limit(
    stub: StubS3, stub_loader: InputLoader
) -> None:
    """Each read asks S3 for the bytes 0 to the limit (one more than may load) in a ``Range``,
    so a large object costs no more than that; an object of exactly the limit loads, a larger
    one is too large, an empty one (no byte 0: 416 InvalidRange) loads as empty text."""
    stub.answers = {
        DOCUMENT_PATH: StoredObject(b"public text"),
        "/docs/public/at-limit.txt": StoredObject(b"a" * LIMIT),
        "/docs/public/big.txt": StoredObject(b"a" * (64 * LIMIT)),
        "/docs/public/empty.txt": StoredObject(b""),
    }
    assert await stub_loader.load(DOCUMENT) == "public text"
    assert await stub_loader.load("s3://docs/public/at-limit.txt") == "a" * LIMIT
    assert await stub_loader.load("s3://docs/public/empty.txt") == ""
    error = await refusal(stub_loader, "s3://docs/public/big.txt")
    assert template(error, "s3://docs/public/big.txt") == (
        f"input <ref> is larger than the limit of {LIMIT} bytes (MAX_INPUT_BYTES)"
    )
    assert [(request.method, request.headers.get("Range")) for request in stub.requests] == [
        ("GET", f"bytes=0-{LIMIT}")
    ] * 4


async def test_a_store_that_ignores_the_range_is_read_no_further_than_the_limit(
    stub: StubS3, stub_loader: InputLoader
) -> None:
    """A store that ignores ``Range`` and streams a large object is read for one byte more than
    the limit, then left: the refusal comes at once, without waiting for the rest (which this
    store holds back). A small object from such a store loads whole."""
    stub.answers = {
        "/docs/public/endless.txt": HeldObject(b"a" * (LIMIT + 1), declared_length=1024 * LIMIT),
        DOCUMENT_PATH: StoredObject(b"public text", honours_range=False),
    }
    error = await refusal(stub_loader, "s3://docs/public/endless.txt")
    assert template(error, "s3://docs/public/endless.txt") == (
        f"input <ref> is larger than the limit of {LIMIT} bytes (MAX_INPUT_BYTES)"
    )
    assert await stub_loader.load(DOCUMENT) == "public text"


PASSING_TROUBLE = {
    "503-slow-down": (s3_error(503, "SlowDown", "Please reduce your request rate."), "SlowDown"),
    "503-service-unavailable": (s3_error(503, "ServiceUnavailable"), "ServiceUnavailable"),
    "500-internal-error": (s3_error(500, "InternalError"), "InternalError"),
    "500-other-code": (s3_error(500, "InternalFailure"), "InternalFailure"),
    "503-no-code": (s3_error(503, None, "busy"), "503"),
    "503-no-body": (ErrorAnswer(503), "503"),
    "502-proxy-page": (
        ErrorAnswer(502, b"<html><body>Bad Gateway</body></html>", "text/html"),
        "502",
    ),
    "429-proxy": (ErrorAnswer(429, b"", "text/plain"), "429"),
    "408-proxy": (ErrorAnswer(408, b"", "text/plain"), "408"),
    "400-request-timeout": (s3_error(400, "RequestTimeout"), "RequestTimeout"),
    "400-throttling": (s3_error(400, "Throttling"), "Throttling"),
    "400-throttling-exception": (s3_error(400, "ThrottlingException"), "ThrottlingException"),
    "400-request-limit": (s3_error(400, "RequestLimitExceeded"), "RequestLimitExceeded"),
}


@pytest.mark.parametrize(("answer", "shown"), PASSING_TROUBLE.values(), ids=list(PASSING_TROUBLE))
async def test_s3_passing_trouble_is_retried_by_the_activity(
    stub: StubS3, stub_loader: InputLoader, answer: ErrorAnswer, shown: str
) -> None:
    """A 5xx (whatever its code, or with no S3 error document at all), a 408 or 429 from a proxy,
    and a throttling or timeout code (whatever its status) are passing trouble: a retryable
    InputFetchFailed naming S3's code (its status when there is none). The worker's client
    tries once (the activity's retry policy owns every retry), so S3 saw one request."""
    stub.answers = {DOCUMENT_PATH: answer}
    with pytest.raises(ApplicationError) as info:
        await stub_loader.load(DOCUMENT)
    assert info.value.type == errors.INPUT_FETCH_FAILED
    assert not info.value.non_retryable
    assert info.value.message == (
        f"input {DOCUMENT} could not be fetched (S3 answered {shown}); it will be retried"
    )
    assert len(stub.requests_for(DOCUMENT_PATH)) == 1


REFUSALS = {
    "403-access-denied": (s3_error(403, "AccessDenied", "Access Denied"), "AccessDenied"),
    "403-archived": (s3_error(403, "InvalidObjectState"), "InvalidObjectState"),
    "403-no-code": (s3_error(403, None, "denied"), "403"),
    "404-no-such-key": (s3_error(404, "NoSuchKey"), "NoSuchKey"),
    "404-no-body": (ErrorAnswer(404), "404"),
    "400-invalid-argument": (s3_error(400, "InvalidArgument"), "InvalidArgument"),
    "409-conflict": (s3_error(409, "OperationAborted"), "OperationAborted"),
}


@pytest.mark.parametrize(("answer", "logged"), REFUSALS.values(), ids=list(REFUSALS))
async def test_s3_refusals_read_the_same_and_log_what_s3_answered(
    stub: StubS3,
    stub_loader: InputLoader,
    caplog: pytest.LogCaptureFixture,
    answer: ErrorAnswer,
    logged: str,
) -> None:
    """Every other answer (403, 404, 400, 409, with or without a code) is the one permanent
    refusal, the same text whatever S3 said; the worker's log names S3's code (its status when
    there is none) for the operator."""
    stub.answers = {DOCUMENT_PATH: answer}
    with caplog.at_level(logging.INFO, logger="activities.input_loader"):
        error = await refusal(stub_loader, DOCUMENT)
    assert template(error, DOCUMENT) == UNAVAILABLE
    assert [record.getMessage() for record in caplog.records] == [
        f"input refused: S3 answered {logged}"
    ]
