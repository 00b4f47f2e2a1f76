"""The dead-letter queue (SQS) and the AWS region of the SQS and S3 clients."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc

DEFAULT_SQS_PORT = 8701


class DeadLetterSettings(SettingsSection):
    """Where runs that give up are sent (`Section.DEAD_LETTERS`)."""

    SECTION: ClassVar[Section] = Section.DEAD_LETTERS

    sqs_endpoint_url: Annotated[
        str | None,
        SettingDoc(Section.DEAD_LETTERS, default="unset (AWS)", example="http://127.0.0.1:8701"),
    ] = Field(default=None, description="The SQS endpoint of the dead-letter queue.")
    dlq_queue_name: Annotated[str, SettingDoc(Section.DEAD_LETTERS)] = Field(
        default="ai-orchestrator-dlq",
        min_length=1,
        max_length=80,
        description="The dead-letter queue.",
    )
    aws_region: Annotated[str, SettingDoc(Section.DEAD_LETTERS)] = Field(
        default="us-east-1", description="The region of the SQS and S3 clients."
    )
