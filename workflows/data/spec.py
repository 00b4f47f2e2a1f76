"""A pipeline file as data: the models a file's YAML must fit, and what a run records of it.

A file names its pipeline (the workflow type of its runs), its version, a description, the JSON
Schema of the input a client sends, and its steps in order. Each step has an ``id`` (its
state's name), a ``type`` from the catalog (``workflows.data.catalog``), where its outcomes lead
(``next`` for its main outcome, ``on`` for the others) and its type's own settings, which the
step type's settings model checks (``StepSpec.settings``).

Settings models mark what the compiler checks in them (`Template`, `StepRef`, `DataPath`,
`JsonSchema`): a step type written in Python marks its own settings the same way and gets the
same checks.

Pure pydantic, no I/O: workflow code validates a recorded file's spec with these models.
"""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from workflows.data.contract import (
    EVENT_PATTERN,
    MAX_STEPS,
    NAME_PATTERN,
    STEP_ID_PATTERN,
    VERSION_PATTERN,
)


class Mark(Enum):
    """What a settings field holds, for the compiler's checks."""

    TEMPLATE = "template"  # a prompt template (``{{ input.ticket }}``), rendered sandboxed
    STEP = "step"  # a step's id, or an end state (completed, failed, dead_letter)
    PATH = "path"  # a field of the run's data: ``input.ticket``, ``steps.classify.category``
    SCHEMA = "schema"  # a JSON Schema


Template = Annotated[str, Mark.TEMPLATE, Field(max_length=32 * 1024)]
StepRef = Annotated[str, Mark.STEP, Field(max_length=64)]
DataPath = Annotated[str, Mark.PATH, Field(max_length=256)]
JsonSchema = Annotated[dict[str, Any], Mark.SCHEMA]
EventName = Annotated[str, Field(pattern=EVENT_PATTERN)]


class Settings(BaseModel):
    """Base of every step type's settings: unknown fields are errors (a typo is a problem)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class StateName(Settings):
    """A sub-state's name and description, where a file names them (to match a graph written
    in code); defaults otherwise."""

    name: Annotated[str, Field(pattern=STEP_ID_PATTERN)] | None = None
    description: str | None = Field(default=None, max_length=200)


VERSION_AS_NUMBER = "or YAML reads it as a number"


def _version(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a version such as 1, 2 or '1.2'")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        raise ValueError(f"write it as a string ('{value}'), {VERSION_AS_NUMBER}")
    return value


class StepSpec(BaseModel):
    """One step: its id, its type, where its outcomes lead, and its type's settings (the rest
    of its fields, checked by the type's settings model)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: Annotated[str, Field(pattern=STEP_ID_PATTERN)]
    type: Annotated[str, Field(min_length=1, max_length=64)]
    description: str | None = Field(default=None, max_length=200)
    next: str | None = Field(default=None, max_length=64)
    on: dict[str, Annotated[str, Field(max_length=64)]] = Field(default_factory=dict)
    events: dict[str, EventName] = Field(default_factory=dict)
    progress: int | None = Field(default=None, ge=1, le=99)
    shown: bool | None = None

    @property
    def settings(self) -> dict[str, Any]:
        """The type's own settings: every field not common to all steps."""
        return dict(self.model_extra or {})


class PipelineSpec(BaseModel):
    """A pipeline file's content."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    version: Annotated[str, BeforeValidator(_version), Field(pattern=VERSION_PATTERN)]
    description: str = Field(default="", max_length=2000)
    input: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"},
        description="The JSON Schema of the input object a client sends",
    )
    steps: list[StepSpec] = Field(min_length=1, max_length=MAX_STEPS)


class PipelineRecord(BaseModel):
    """What a run records of the pipeline it started with (in its plan, so in its history):
    the file's text and its SHA-256, and the spec read from it, which the workflow compiles.
    A replay or a continued run compiles this, never today's file."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    version: str
    sha256: str
    text: str
    spec: PipelineSpec

    @property
    def label(self) -> str:
        """``VERSION@SHA256-PREFIX``: what ``status``, ``list`` and ``AiPipelineVersion`` show."""
        return version_label(self.version, self.sha256)


def version_label(version: str, sha256: str) -> str:
    """A version as tools show it: the file's version, then the start of its hash (two edits
    that forget to change the version still differ)."""
    return f"{version}@{sha256[:12]}"


def file_digest(text: str) -> str:
    """The SHA-256 (hex) of a pipeline file's text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
