"""The connection to Temporal, and the task queue every process works on.

Read the way the Temporal CLI and SDKs read it (``temporalio.envconfig``): the profile
``TEMPORAL_PROFILE`` of the TOML file ``TEMPORAL_CONFIG_FILE``, overridden by the standard
``TEMPORAL_*`` variables (those no field holds are listed in ``config_docs.OUTSIDE_VARIABLES``).
``Settings`` resolves the profile once into these fields (certificates read, secrets masked), so
every process connects alike (``aiorch_runtime.connection.connect``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field, SecretStr
from pydantic_settings import NoDecode

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.temporal_profile import TemporalTls

DEFAULT_TEMPORAL_ADDRESS = "localhost:7233"
DEFAULT_TEMPORAL_NAMESPACE = "default"


class TemporalSettings(SettingsSection):
    """Where Temporal is and how to reach it (`Section.TEMPORAL`)."""

    SECTION: ClassVar[Section] = Section.TEMPORAL

    # Address, namespace and API key: a variable of that name wins over the profile, the
    # profile over the default (config_sources.temporal_from_profile).
    temporal_address: Annotated[
        str, SettingDoc(Section.TEMPORAL, default="the profile's, else `localhost:7233`")
    ] = Field(
        default=DEFAULT_TEMPORAL_ADDRESS,
        min_length=3,
        description="The Temporal frontend, `host:port`.",
    )
    temporal_namespace: Annotated[
        str, SettingDoc(Section.TEMPORAL, default="the profile's, else `default`")
    ] = Field(
        default=DEFAULT_TEMPORAL_NAMESPACE,
        min_length=1,
        description="The namespace every process works in; the codec server encodes for it.",
    )
    temporal_profile: Annotated[
        str | None, SettingDoc(Section.TEMPORAL, default="`default`", example="cloud")
    ] = Field(
        default=None,
        description="The profile to read from the profile file; a profile the file lacks is "
        "an error.",
    )
    temporal_config_file: Annotated[
        Path | None,
        SettingDoc(
            Section.TEMPORAL,
            default="`~/.config/temporalio/temporal.toml`, if it exists",
            example="/etc/temporal/temporal.toml",
        ),
    ] = Field(
        default=None,
        description="The Temporal CLI's connection profile file (TOML, what `temporal config "
        "set` writes); a file named here that does not exist is an error.",
    )
    temporal_api_key: Annotated[
        SecretStr | None,
        SettingDoc(Section.TEMPORAL, default="the profile's, else unset", example="<key>"),
    ] = Field(
        default=None,
        description="The API key sent on every call (Temporal Cloud); turns TLS on.",
    )
    temporal_api_key_file: Path | None = None
    # Resolved from the profile and the TEMPORAL_TLS* / TEMPORAL_GRPC_META_* variables, never
    # parsed from one variable of these names. None = plain TCP (the local dev server).
    temporal_tls: Annotated[
        TemporalTls | None, NoDecode, SettingDoc(Section.TEMPORAL, own_variable=False)
    ] = Field(
        default=None,
        description="TLS to the frontend, from the profile and the `TEMPORAL_TLS*` variables; "
        "unset: plain TCP.",
    )
    temporal_grpc_meta: Annotated[
        dict[str, str], NoDecode, SettingDoc(Section.TEMPORAL, own_variable=False)
    ] = Field(
        default_factory=dict,
        repr=False,
        description="gRPC headers on every call, from the profile and the "
        "`TEMPORAL_GRPC_META_*` variables.",
    )
    temporal_task_queue: Annotated[str, SettingDoc(Section.TEMPORAL)] = Field(
        default="ai-orchestrator",
        min_length=1,
        description="The task queue the workers poll and the CLI starts (and redrives) runs on.",
    )
    temporal_ui_url: Annotated[str, SettingDoc(Section.TEMPORAL)] = Field(
        default="http://localhost:8233",
        description="The Temporal Web UI: the run links the CLI and the inbox show, and the "
        "one origin the codec server admits (CORS).",
    )
