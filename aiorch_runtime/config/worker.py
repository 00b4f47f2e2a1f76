"""One worker process: slots, pollers, cache, probes and versions."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from aiorch_runtime.config.section import SettingsSection, listen_address
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.errors import ConfigError

DEFAULT_HEALTH_PORT = 9465


class WorkerSettings(SettingsSection):
    """How much one worker runs at once, its probes and its version (`Section.WORKER`)."""

    SECTION: ClassVar[Section] = Section.WORKER

    worker_max_concurrent_activities: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=200, ge=1, le=10000, description="Activities one worker runs at once."
    )
    worker_max_concurrent_workflow_tasks: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=100, ge=1, le=10000, description="Workflow tasks one worker runs at once."
    )
    # ~0.12 MiB per cached run (bench: 2,000 parked runs peak at ~450 MiB with 1000, ~565 with
    # 2000); a run evicted from the cache is replayed from history when it wakes.
    worker_max_cached_workflows: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=1000,
        ge=0,
        le=100000,
        description="Runs kept in the worker's cache (about 0.12 MiB each); an evicted run is "
        "replayed from history when it wakes. Below `WORKER_MAX_CONCURRENT_WORKFLOW_TASKS` (0 "
        "included) it is for debugging replays only, and the worker warns: every task then "
        "replays, and a run evicted during its local `fetch_prompt` waits out the 10 s "
        "workflow task timeout.",
    )
    worker_workflow_task_pollers: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=5,
        ge=2,
        le=1000,
        description="Concurrent long polls for workflow tasks (at least 2: the sticky and the "
        "normal queue).",
    )
    worker_activity_task_pollers: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=5, ge=1, le=1000, description="Concurrent long polls for activity tasks."
    )
    worker_shutdown_grace: Annotated[float, SettingDoc(Section.WORKER)] = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="On SIGTERM, the seconds activities in flight get to finish before they "
        "are cancelled (and retried elsewhere).",
    )
    health_host: Annotated[str, SettingDoc(Section.WORKER)] = Field(
        default="127.0.0.1",
        min_length=1,
        description="The address (an IP) where the worker serves `/healthz` (liveness) and "
        "`/readyz` (readiness): `0.0.0.0` for probes from another host (the Docker image sets "
        "it).",
    )
    health_port: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=DEFAULT_HEALTH_PORT,
        ge=0,
        le=65535,
        description="The port of the probes; `0` turns them off. A port in use is logged and "
        "the worker runs without them.",
    )
    # Rolling deploys (README "Rolling deploys").
    worker_build_id: Annotated[
        str | None,
        SettingDoc(Section.WORKER, example="2026-11-30.1"),
    ] = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="This build's id (the image tag, say): the worker reports its version as "
        "`WORKER_DEPLOYMENT_NAME.WORKER_BUILD_ID`, which the Web UI shows.",
    )
    worker_deployment_name: Annotated[str, SettingDoc(Section.WORKER)] = Field(
        default="ai-orchestrator",
        min_length=1,
        max_length=255,
        pattern=r"^[^.]+$",
        description="The deployment the worker's version belongs to (no `.`).",
    )
    worker_versioning: Annotated[bool, SettingDoc(Section.WORKER)] = Field(
        default=False,
        description="Worker Versioning: the server routes tasks by build (needs "
        "`WORKER_BUILD_ID`).",
    )
    worker_versioning_behavior: Annotated[
        Literal["auto_upgrade", "pinned"], SettingDoc(Section.WORKER)
    ] = Field(
        default="auto_upgrade",
        description="What open runs do under Worker Versioning: `auto_upgrade` moves them to "
        "the current build at their next workflow task; `pinned` keeps each on the build that "
        "started it.",
    )

    _health_host = field_validator("health_host")(listen_address)

    @model_validator(mode="after")
    def _versioning_needs_a_build_id(self) -> Self:
        if self.worker_versioning and self.worker_build_id is None:
            raise ConfigError("WORKER_VERSIONING=true needs WORKER_BUILD_ID (this build's id)")
        return self
