"""Where the worker and the tools find pipelines besides the shipped ones: the folder of
pipeline files, and modules of pipelines written in Python."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.config_sources import split_list


class PipelineSettings(SettingsSection):
    """Where pipeline files and pipeline modules are (`Section.PIPELINES`)."""

    SECTION: ClassVar[Section] = Section.PIPELINES

    pipelines_dir: Annotated[
        Path | None,
        SettingDoc(Section.PIPELINES, default="unset (no pipeline files)", example="pipelines"),
    ] = Field(
        default=None,
        description="The folder of pipeline files (`*.yaml`, top level) a worker runs and the "
        "operator's tools read; a worker with a file that has a problem does not start.",
    )

    pipeline_modules: Annotated[
        list[str], NoDecode, SettingDoc(Section.PIPELINES, example="acme.pipelines.translate")
    ] = Field(
        default_factory=list,
        description="Importable modules (comma-separated), each with a pipeline written in "
        "Python (its `PIPELINE`), that the worker runs and the operator's tools know besides "
        "the shipped ones (docs/extending.md).",
    )

    @field_validator("pipeline_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: Any) -> Any:
        return split_list(value) if isinstance(value, str) else value
