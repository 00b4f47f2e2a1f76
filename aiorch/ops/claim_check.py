"""Claim check: a document too large for workflow history is stored, and only its reference
(``s3://bucket/key`` or ``file:///path``) enters the run.

The starter stores documents given with ``--file`` and inline messages above
``CLAIM_CHECK_THRESHOLD_BYTES``: in S3 (``CLAIM_CHECK_BUCKET`` at ``S3_ENDPOINT_URL``, created if
missing; the local stack's moto endpoint serves S3), or under ``CLAIM_CHECK_DIR`` when that is
set (only for workers that share the filesystem). Keys are content addressed per request
(``inputs/<request_id>/<sha256>.txt``), so storing twice is harmless and a second start with the
same id can never replace the document of the run that holds it. The workers' ``fetch_prompt``
and ``invoke_llm`` load it again (``activities.input_loader.InputLoader``).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from aiorch_runtime import aws
from aiorch_runtime.config import Settings
from workflows.errors import OrchestratorError
from workflows.payloads import REFERENCE_SCHEMES, REQUEST_ID_PATTERN
from workflows.steps.contract import PDF_SIGNATURE

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class ClaimCheckError(OrchestratorError):
    """The document could not be stored; the message says where and why."""


def object_key(request_id: str, data: bytes) -> str:
    """Where a request's document lives: content addressed under the request id (``.pdf`` for
    a PDF, ``.txt`` for text)."""
    suffix = "pdf" if _is_pdf(data) else "txt"
    return f"inputs/{request_id}/{hashlib.sha256(data).hexdigest()}.{suffix}"


def content_type(data: bytes) -> str:
    """The media type a stored document is labelled with: a PDF's, or UTF-8 text."""
    return "application/pdf" if _is_pdf(data) else "text/plain; charset=utf-8"


def _is_pdf(data: bytes) -> bool:
    return data.startswith(PDF_SIGNATURE)


def store_document(
    settings: Settings, request_id: str, data: bytes, *, s3: S3Client | None = None
) -> str:
    """Store ``data`` for ``request_id``; return the reference to put in the request.

    Raises:
        ClaimCheckError: the store refused it or is unreachable.
    """
    key = object_key(request_id, data)
    if settings.claim_check_dir is not None:
        return _store_file(settings.claim_check_dir, key, data)
    return _store_s3(
        s3 or aws.s3_client(settings, aws.OPERATOR_UPLOAD),
        settings.claim_check_bucket,
        key,
        data,
        settings,
    )


def _store_file(directory: Path, key: str, data: bytes) -> str:
    path = (directory / key).resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as err:
        raise ClaimCheckError(f"cannot store the document in {path}: {err.strerror}") from None
    return path.as_uri()


def _store_s3(s3: S3Client, bucket: str, key: str, data: bytes, settings: Settings) -> str:
    where = f"s3://{bucket}"
    try:
        _ensure_bucket(s3, bucket, settings.aws_region)
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=data,
            ContentType=content_type(data),
            ServerSideEncryption="AES256",
        )
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "?")
        raise ClaimCheckError(
            f"cannot store the document in {where} ({code}); check CLAIM_CHECK_BUCKET and the "
            "AWS credentials, or set CLAIM_CHECK_DIR"
        ) from None
    except BotoCoreError as err:
        endpoint = settings.s3_endpoint_url or "AWS"
        raise ClaimCheckError(
            f"cannot store the document in {where} at {endpoint}: {err}; is S3_ENDPOINT_URL "
            "right (the local stack serves S3 on its SQS port)?"
        ) from None
    return f"{where}/{key}"


def _ensure_bucket(s3: S3Client, bucket: str, region: str) -> None:
    try:
        s3.head_bucket(Bucket=bucket)
        return
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    try:
        if region == "us-east-1":
            s3.create_bucket(Bucket=bucket)
        else:
            s3.create_bucket(
                Bucket=bucket,
                CreateBucketConfiguration={"LocationConstraint": region},  # type: ignore[typeddict-item]
            )
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass


def resolve_message(
    settings: Settings,
    request_id: str,
    message: str | None,
    file: Path | None,
    *,
    s3: S3Client | None = None,
    pdf: bool = False,
) -> tuple[str, str | None]:
    """The ``user_message`` to send (the text, or a reference), and a note when stored.

    ``file`` is always stored (UTF-8 text, or with ``pdf`` a PDF too); an inline message above
    ``CLAIM_CHECK_THRESHOLD_BYTES`` is stored too; one above ``MAX_INLINE_MESSAGE_BYTES`` is
    refused (pass it with ``--file``).

    Raises:
        ClaimCheckError: neither or both given, unreadable or oversized input, or the store
            failed; the message says what to do.
    """
    if (message is None) == (file is None):
        raise ClaimCheckError("give the message as an argument or --file PATH (one of them)")
    if not re.fullmatch(REQUEST_ID_PATTERN, request_id):
        raise ClaimCheckError(f"invalid request id {request_id!r}: 24 lowercase hex characters")
    if file is not None:
        data = _read_document(file, settings.max_input_bytes, pdf=pdf)
        reference = store_document(settings, request_id, data, s3=s3)
        return reference, f"stored {file} ({_size(len(data))}) as {reference}"
    assert message is not None
    if message.startswith(REFERENCE_SCHEMES):
        return message, None
    data = message.encode("utf-8")
    if len(data) > settings.max_inline_message_bytes:
        raise ClaimCheckError(
            f"the message is {_size(len(data))}; inline messages are limited to "
            f"{_size(settings.max_inline_message_bytes)}. Save it to a file and pass "
            "--file PATH instead: the document is stored in S3 (CLAIM_CHECK_BUCKET) and only "
            "its reference enters the run's history"
        )
    if len(data) > settings.claim_check_threshold_bytes:
        reference = store_document(settings, request_id, data, s3=s3)
        return reference, f"message of {_size(len(data))} stored as {reference} (claim check)"
    return message, None


def _read_document(path: Path, limit: int, *, pdf: bool = False) -> bytes:
    try:
        size = path.stat().st_size
        if size > limit:
            raise ClaimCheckError(
                f"{path} is {_size(size)}; documents are limited to {_size(limit)} "
                "(MAX_INPUT_BYTES)"
            )
        data = path.read_bytes()
    except OSError as err:
        raise ClaimCheckError(f"cannot read {path}: {err.strerror}") from None
    if pdf and _is_pdf(data):
        return data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        kinds = "UTF-8 text or a PDF" if pdf else "UTF-8 text"
        raise ClaimCheckError(f"{path} is not {kinds}") from None
    if not data.strip():
        raise ClaimCheckError(f"{path} is empty")
    return data


def _size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n} bytes"
