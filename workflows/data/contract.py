"""Names of pipelines defined as data that live histories, pipeline files and tools rely on.

Like ``workflows.contract``, these never change once released: an activity renamed under a
running workflow breaks it, and operators' scripts read the rule names ``aiorch pipeline check``
prints.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

# A pipeline's name is its runs' workflow type; a step's id is its state's name.
NAME_PATTERN: Final = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
STEP_ID_PATTERN: Final = r"^[a-z][a-z0-9_]{0,47}$"
VERSION_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"
# Event names a file may give its outcomes (``events:``) and route cases.
EVENT_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
# A pipeline file is operator configuration, read whole into a run's history: kept small.
MAX_FILE_BYTES: Final = 64 * 1024
MAX_STEPS: Final = 100

ACTIVITY_PLAN_PIPELINE: Final = "plan_pipeline"
ACTIVITY_NOTIFY_PIPELINE: Final = "notify_pipeline"


class Rule(StrEnum):
    """The rule a problem in a pipeline file breaks (what ``aiorch pipeline check`` names)."""

    YAML = "yaml"
    FILE_TOO_LARGE = "file-too-large"
    DUPLICATE_KEY = "duplicate-key"
    UNKNOWN_FIELD = "unknown-field"
    MISSING_FIELD = "missing-field"
    INVALID_VALUE = "invalid-value"
    UNKNOWN_STEP_TYPE = "unknown-step-type"
    DUPLICATE_STATE = "duplicate-state"
    MISSING_STEP = "missing-step"
    UNKNOWN_OUTCOME = "unknown-outcome"
    UNKNOWN_CASE = "unknown-case"
    DUPLICATE_EVENT = "duplicate-event"
    UNREACHABLE_STEP = "unreachable-step"
    DEAD_END = "dead-end"
    PROGRESS_GOES_DOWN = "progress-goes-down"
    INVALID_JSON_SCHEMA = "invalid-json-schema"
    UNKNOWN_TEMPLATE_FIELD = "unknown-template-field"
    TEMPLATE_SYNTAX = "template-syntax"
    TEMPLATE_UNSAFE = "template-unsafe"
    NAME_TAKEN = "name-taken"
    DUPLICATE_NAME = "duplicate-name"
