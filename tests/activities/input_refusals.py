"""What the input loader's tests share: the worker's boto3 settings for S3, the size limit, and
how a refusal must look (permanent, quick, and the same whether the target is missing or
forbidden)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from botocore.config import Config as BotoConfig
from temporalio.exceptions import ApplicationError

from activities.input_loader import InputLoader, shown_reference
from aiorch_runtime import aws
from workflows import errors

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# What worker.py gives the loader (one boto3 attempt, so Temporal owns every retry), with
# shorter timeouts so an unreachable endpoint fails a test quickly.
WORKER_BOTO = aws.WORKER.merge(BotoConfig(connect_timeout=2, read_timeout=5))
LIMIT = 1024
# A refusal must come at once: nothing is opened, waited for or read.
QUICK_S = 2.0
ERRNO_WORDS = ("No such file", "Permission denied", "Errno", "directory", "FIFO", "denied")


async def refusal(loader: InputLoader, reference: str) -> ApplicationError:
    """The error ``loader`` raises for ``reference``, which must be a permanent refusal that
    arrives quickly."""
    started = time.monotonic()
    with pytest.raises(ApplicationError) as info:
        await asyncio.wait_for(loader.load(reference), timeout=10)
    assert time.monotonic() - started < QUICK_S
    assert info.value.type == errors.INPUT_UNAVAILABLE
    assert info.value.non_retryable
    return info.value


def template(error: ApplicationError, reference: str) -> str:
    """The error text with the (shortened) reference taken out: what it says about the target."""
    return error.message.replace(shown_reference(reference), "<ref>")


UNAVAILABLE = "input <ref> is not available (missing or not allowed)"


def s3_loader(client: S3Client | None, *prefixes: str) -> InputLoader:
    return InputLoader(s3=client, max_bytes=LIMIT, s3_prefixes=prefixes or ("docs/public",))
