"""Extracted texts kept beside the documents of the claim check, by the SHA-256 of the document's
bytes: ``texts/<sha256>.txt`` under ``CLAIM_CHECK_DIR``, else in ``CLAIM_CHECK_BUCKET``.

``extract_text`` extracts a document once per run and keeps its text here; the model call and
the batch lane read the document's bytes again (cheap, bounded by ``MAX_INPUT_BYTES``) only to
find its text, instead of extracting it again. The key needs the document's bytes, so a text is
found only by whoever can read its document; and a text is used only when its SHA-256 is the one
the run recorded at extraction, so a text planted or cut short is a miss. A store that cannot be
reached is a miss (the text is extracted again, within the same limits) and a text that cannot
be kept is not kept: the store never stops a run.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from aiorch_runtime.config import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)
PREFIX = "texts/"


def text_key(data: bytes) -> str:
    """Where the text of the document ``data`` is kept: its content hash."""
    return f"{PREFIX}{hashlib.sha256(data).hexdigest()}.txt"


class TextStore(Protocol):
    """Texts by key (`text_key`); ``get`` and ``put`` never raise."""

    async def get(self, key: str, max_bytes: int) -> str | None: ...

    async def put(self, key: str, text: str) -> None: ...


class FolderTexts:
    """Texts as files under a folder the workers share (``CLAIM_CHECK_DIR``)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    async def get(self, key: str, max_bytes: int) -> str | None:
        return await asyncio.to_thread(self._get, key, max_bytes)

    async def put(self, key: str, text: str) -> None:
        await asyncio.to_thread(self._put, key, text)

    def _get(self, key: str, max_bytes: int) -> str | None:
        try:
            with (self._folder / key).open("rb") as file:
                data = file.read(max_bytes + 1)
        except OSError:
            return None
        return _decoded(data, max_bytes)

    def _put(self, key: str, text: str) -> None:
        path = self._folder / key
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Written aside, then renamed: a reader never sees half a text.
            fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
            with os.fdopen(fd, "wb") as file:
                file.write(text.encode("utf-8"))
            os.replace(temporary, path)
        except OSError as err:
            log.warning("extracted text not kept in %s: %s", path.parent, err.strerror)


class BucketTexts:
    """Texts as objects in the claim check's S3 bucket (``CLAIM_CHECK_BUCKET``)."""

    def __init__(self, s3: S3Client, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    async def get(self, key: str, max_bytes: int) -> str | None:
        return await asyncio.to_thread(self._get, key, max_bytes)

    async def put(self, key: str, text: str) -> None:
        await asyncio.to_thread(self._put, key, text)

    def _get(self, key: str, max_bytes: int) -> str | None:
        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"]
            try:
                data = body.read(max_bytes + 1)
            finally:
                body.close()
        except (ClientError, BotoCoreError):
            return None
        return _decoded(data, max_bytes)

    def _put(self, key: str, text: str) -> None:
        try:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=key,
                Body=text.encode("utf-8"),
                ContentType="text/plain; charset=utf-8",
                ServerSideEncryption="AES256",
            )
        except (ClientError, BotoCoreError) as err:
            log.warning("extracted text not kept in s3://%s: %s", self._bucket, type(err).__name__)


def texts_beside_claims(settings: Settings, s3: S3Client) -> TextStore:
    """Where extracted texts are kept: beside the claim check's documents."""
    if settings.claim_check_dir is not None:
        return FolderTexts(settings.claim_check_dir)
    return BucketTexts(s3, settings.claim_check_bucket)


def _decoded(data: bytes, max_bytes: int) -> str | None:
    if len(data) > max_bytes:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
