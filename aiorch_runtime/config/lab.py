"""The replay lab's forks: the task queue the workers run them on, and the tenant they spend
as (docs/lab.md)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc
from workflows.payloads import TENANT_PATTERN

DEFAULT_LAB_TENANT = "lab"
LAB_QUEUE_SUFFIX = "-lab"


class LabSettings(SettingsSection):
    """Where forks run and whose spend they count as (`Section.LAB`)."""

    SECTION: ClassVar[Section] = Section.LAB

    lab_enabled: Annotated[bool, SettingDoc(Section.LAB)] = Field(
        default=True,
        description="Whether the worker also polls the lab's task queue, running the replay "
        "lab's forks there (with its writing activities dry); `false`: `aiorch lab run` finds "
        "no worker for its forks.",
    )
    lab_task_queue: Annotated[
        str | None,
        SettingDoc(
            Section.LAB,
            default="`TEMPORAL_TASK_QUEUE` followed by `-lab`",
            example="ai-orchestrator-lab",
        ),
    ] = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="The task queue forks run on; never the production task queue.",
    )
    lab_tenant: Annotated[str, SettingDoc(Section.LAB)] = Field(
        default=DEFAULT_LAB_TENANT,
        pattern=TENANT_PATTERN,
        description="The tenant every fork's model calls spend as, so the lab's spend is "
        "counted apart (with tenant budgets on, give it one in `TENANT_BUDGETS_USD`).",
    )


def lab_queue(task_queue: str, lab_task_queue: str | None) -> str:
    """The lab's task queue: ``lab_task_queue``, else the production ``task_queue``'s name
    followed by ``-lab``."""
    return lab_task_queue or task_queue + LAB_QUEUE_SUFFIX
