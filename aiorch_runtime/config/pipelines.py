"""Pipelines defined as data: the folder of pipeline files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc


class PipelineSettings(SettingsSection):
    """Where the pipeline files are (`Section.PIPELINES`)."""

    SECTION: ClassVar[Section] = Section.PIPELINES

    pipelines_dir: Annotated[
        Path | None,
        SettingDoc(Section.PIPELINES, default="unset (no pipeline files)", example="pipelines"),
    ] = Field(
        default=None,
        description="The folder of pipeline files (`*.yaml`, top level) a worker runs and the "
        "operator's tools read; a worker with a file that has a problem does not start.",
    )
