"""The boto3 clients (SQS, S3), built one way for everyone who talks to AWS.

Who calls decides how often a call is tried: the worker's activities try once (``WORKER``),
because Temporal retries the activity and each attempt should show in history; boto3's own
retries would multiply Temporal's attempts unseen. An operator's command (``OPERATOR``) is
not retried by anything else, so a few quick retries of throttling or a dropped connection are
welcome there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
from botocore.config import Config as BotoConfig

from aiorch_runtime.config import Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

# botocore's "max_attempts" counts retries after the first attempt; "total_max_attempts" counts
# every attempt.
WORKER = BotoConfig(
    retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=15
)
OPERATOR = BotoConfig(
    retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=15
)
# Storing a document (up to MAX_INPUT_BYTES) takes longer than a queue call.
OPERATOR_UPLOAD = OPERATOR.merge(BotoConfig(read_timeout=60))


def sqs_client(settings: Settings, config: BotoConfig) -> SQSClient:
    """An SQS client for ``SQS_ENDPOINT_URL`` (unset: AWS) in ``AWS_REGION``."""
    session = boto3.session.Session(region_name=settings.aws_region)
    return session.client("sqs", endpoint_url=settings.sqs_endpoint_url, config=config)


def s3_client(settings: Settings, config: BotoConfig) -> S3Client:
    """An S3 client for ``S3_ENDPOINT_URL`` (unset: AWS) in ``AWS_REGION``."""
    session = boto3.session.Session(region_name=settings.aws_region)
    return session.client("s3", endpoint_url=settings.s3_endpoint_url, config=config)
