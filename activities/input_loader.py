"""The input loader: reads a request's referenced input (``file://`` or ``s3://``).

References are resolved here, in activities, so a large document never enters workflow history:
``fetch_prompt`` checks the reference and records it; ``invoke_llm`` and ``extract_text`` load
it again when they need it. A reference is caller-chosen, so it resolves only inside what the
operator allows (``Settings.allowed_file_roots`` and ``Settings.allowed_s3_prefixes``), and every
refusal reads the same whether the target is missing or forbidden.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from botocore.exceptions import BotoCoreError, ClientError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from aiorch_runtime.config import DEFAULT_MAX_INPUT_BYTES
from workflows import errors

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Error text quotes at most this much of a reference (references are caller-chosen).
MAX_SHOWN_REFERENCE = 120
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the check opens at once instead of waiting for a writer.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# The worker's own trouble, not the file's: worth another attempt.
_TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
_TRANSIENT_S3_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)
_READ_CHUNK = 1024 * 1024


def input_unavailable(reason: str) -> ApplicationError:
    return ApplicationError(reason, type=errors.INPUT_UNAVAILABLE, non_retryable=True)


def shown_reference(reference: str) -> str:
    """The reference as error text shows it: printable characters only, shortened."""
    printable = "".join(c if c.isprintable() else "?" for c in reference[: MAX_SHOWN_REFERENCE + 1])
    if len(printable) > MAX_SHOWN_REFERENCE:
        return printable[: MAX_SHOWN_REFERENCE - 3] + "..."
    return printable


def not_available(reference: str) -> ApplicationError:
    """The one error for a reference that is missing, outside the roots, not a regular file or
    not readable: the same text for each, so an error never tells whether something exists."""
    return input_unavailable(
        f"input {shown_reference(reference)} is not available (missing or not allowed)"
    )


def s3_prefix_allows(entry: str, bucket: str, key: str) -> bool:
    """Whether the ``bucket/prefix`` entry covers ``key`` in ``bucket``.

    A prefix is a folder: ``docs/public`` covers ``docs/public/a.txt``, never
    ``docs/public-internal/a.txt``; a bare ``bucket`` (or ``bucket/``) covers the whole bucket.
    """
    entry_bucket, _, prefix = entry.partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket == entry_bucket and key.startswith(prefix)


class InputLoader:
    """Reads referenced inputs, only from the roots the operator allows, with a size limit.

    ``file://`` paths must resolve (symlinks and ``..`` followed) inside one of ``file_roots``
    and name a regular file; ``s3://`` objects must lie under one of ``s3_prefixes``
    (``bucket/prefix``). With no roots and no prefixes, every reference is refused. Reads stop
    after ``max_bytes + 1`` bytes whatever ``stat`` or ``Content-Length`` claim, because
    ``/proc`` files and devices report a size of 0.
    """

    def __init__(
        self,
        s3: S3Client | None = None,
        max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        *,
        file_roots: Sequence[Path] = (),
        s3_prefixes: Sequence[str] = (),
    ) -> None:
        self._s3 = s3
        self._max_bytes = max_bytes
        self._file_roots = [os.path.realpath(root) for root in file_roots]
        self._s3_prefixes = list(s3_prefixes)
        self._pseudo_devices = pseudo_file_systems()

    async def load(self, reference: str) -> str:
        """The referenced document as text.

        Raises:
            ApplicationError: as `load_bytes`, and ``InputUnavailable`` when it is not UTF-8
                text.
        """
        data = await self.load_bytes(reference)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise input_unavailable(
                f"input {shown_reference(reference)} is not UTF-8 text"
            ) from None

    async def load_bytes(self, reference: str) -> bytes:
        """The referenced document's bytes, whatever they hold (a PDF, text in any encoding).

        Raises:
            ApplicationError: ``InputUnavailable`` (permanent) when it is missing, not allowed
                or too large; ``InputFetchFailed`` (retryable) when S3 failed for a passing
                reason (throttling, 5xx, timeouts).
        """
        if reference.startswith("file://"):
            return await asyncio.to_thread(self._read_file, reference)
        if reference.startswith("s3://"):
            return await asyncio.to_thread(self._read_s3, reference)
        raise not_available(reference)

    # ------------------------------------------------------------------------------- files

    def _read_file(self, reference: str) -> bytes:
        parsed = urlparse(reference)
        path = unquote(parsed.path)
        if (
            parsed.netloc not in ("", "localhost")
            or parsed.params
            or parsed.query
            or parsed.fragment
            or not path.startswith("/")
            or "\0" in path
            or ".." in path.split("/")
        ):
            raise _refused(reference, "not a plain absolute file:// path")
        try:
            target = os.path.realpath(path)
            for root in self._file_roots:
                inside = os.path.relpath(target, root)
                if inside != os.curdir and inside.split(os.sep)[0] != os.pardir:
                    return self._read_under(reference, root, inside.split(os.sep))
        except (OSError, ValueError):  # ValueError: not encodable as a file name
            raise _refused(reference, "cannot resolve the path") from None
        raise _refused(reference, "outside INPUT_FILE_ROOTS/CLAIM_CHECK_DIR")

    def _read_under(self, reference: str, root: str, parts: list[str]) -> bytes:
        """Open ``root/parts...`` one component at a time, following no symlink, so a path
        changed after ``realpath`` (a directory swapped for a link) cannot lead out of the root;
        the checked file is the read one (``fstat`` of the opened descriptor)."""
        try:
            directory = os.open(root, _DIRECTORY_FLAGS)
            try:
                for part in parts[:-1]:
                    inner = os.open(part, _DIRECTORY_FLAGS, dir_fd=directory)
                    os.close(directory)
                    directory = inner
                # Refused before opening: opening a device or FIFO may block or act.
                self._check_regular(
                    reference, os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
                )
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=directory)
            finally:
                os.close(directory)
        except OSError as err:
            if err.errno in _TRANSIENT_ERRNOS:
                raise _fetch_failed(reference, "the worker is short of resources") from None
            raise _refused(reference, "cannot open it") from None
        try:
            self._check_regular(reference, os.fstat(fd))
            return self._bounded(reference, _read_fd(fd, self._max_bytes + 1))
        except OSError:
            raise _fetch_failed(reference, "reading it failed") from None
        finally:
            os.close(fd)

    def _check_regular(self, reference: str, status: os.stat_result) -> None:
        # /proc and /sys files claim to be regular files; their file system gives them away.
        if not stat.S_ISREG(status.st_mode) or status.st_dev in self._pseudo_devices:
            raise _refused(reference, "not a regular file")

    # ---------------------------------------------------------------------------------- S3

    def _read_s3(self, reference: str) -> bytes:
        # No URL decoding: a key is taken literally, so %2e%2e stays harmless text.
        bucket, _, key = reference.removeprefix("s3://").partition("/")
        # A key ending in "/" is a folder marker, never a document.
        if not key or key.endswith("/") or ".." in key.split("/"):
            raise _refused(reference, "not s3://bucket/key")
        if not any(s3_prefix_allows(entry, bucket, key) for entry in self._s3_prefixes):
            raise _refused(reference, "outside INPUT_S3_PREFIXES and the claim-check prefix")
        if self._s3 is None:
            raise input_unavailable("s3:// references need S3 configured (S3_ENDPOINT_URL/AWS)")
        try:
            # The range asks for one byte more than the limit, so "too large" needs no HEAD and
            # never trusts Content-Length; read() is bounded too, for stores that ignore Range.
            response = self._s3.get_object(
                Bucket=bucket, Key=key, Range=f"bytes=0-{self._max_bytes}"
            )
            body = response["Body"]
            try:
                data = body.read(self._max_bytes + 1)
            finally:
                body.close()
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            if code == "InvalidRange":  # an empty object has no byte 0
                return b""
            if status >= 500 or status in (408, 429) or code in _TRANSIENT_S3_CODES:
                raise _fetch_failed(reference, f"S3 answered {code or status}") from None
            # 403 and 404 alike, and every other refusal: the caller learns nothing.
            raise _refused(reference, f"S3 answered {code or status}") from None
        except BotoCoreError as err:
            raise _fetch_failed(reference, type(err).__name__) from None
        return self._bounded(reference, data)

    def _bounded(self, reference: str, data: bytes) -> bytes:
        if len(data) > self._max_bytes:
            raise input_unavailable(
                f"input {shown_reference(reference)} is larger than the limit of "
                f"{self._max_bytes} bytes (MAX_INPUT_BYTES)"
            )
        return data


def pseudo_file_systems() -> frozenset[int]:
    """The devices of ``/proc``, ``/sys`` and ``/dev``, where a "regular file" is the kernel's
    state (``/proc/self/environ``) rather than a document; each counts only when it is a mount
    of its own, so a system without them refuses nothing else."""
    try:
        system = os.stat("/").st_dev
    except OSError:
        return frozenset()
    devices: set[int] = set()
    for mount in ("/proc", "/sys", "/dev"):
        try:
            device = os.stat(mount).st_dev
        except OSError:
            continue
        if device != system:
            devices.add(device)
    return frozenset(devices)


def _read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd``, reading until EOF or the limit."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _refused(reference: str, why: str) -> ApplicationError:
    # The reason goes to the worker's log for the operator (no caller text in it); the caller
    # gets the one uniform message.
    _log().info("input refused: %s", why)
    return not_available(reference)


def _fetch_failed(reference: str, why: str) -> ApplicationError:
    return ApplicationError(
        f"input {shown_reference(reference)} could not be fetched ({why}); it will be retried",
        type=errors.INPUT_FETCH_FAILED,
    )


def _log() -> logging.LoggerAdapter[logging.Logger] | logging.Logger:
    # The activity logger adds the workflow and activity ids, when there is an activity.
    return activity.logger if activity.in_activity() else logging.getLogger(__name__)
