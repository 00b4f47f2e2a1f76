"""Observability: traces and GenAI metrics over OTLP, and the worker's Prometheus endpoint. The
``OTEL_*`` names are the standard OpenTelemetry variables."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from aiorch_runtime.config.section import SettingsSection, listen_address
from aiorch_runtime.config_docs import Section, SettingDoc

DEFAULT_METRICS_PORT = 9464


class ObservabilitySettings(SettingsSection):
    """Where traces and metrics go (`Section.OBSERVABILITY`)."""

    SECTION: ClassVar[Section] = Section.OBSERVABILITY

    otel_exporter_otlp_endpoint: Annotated[
        str | None,
        SettingDoc(
            Section.OBSERVABILITY, default="unset (no export)", example="http://localhost:4317"
        ),
    ] = Field(
        default=None,
        description="Where traces and the GenAI client metrics go over OTLP; only this "
        "variable turns export on (a `_TRACES_` or `_METRICS_` variant alone does not).",
    )
    otel_exporter_otlp_protocol: Annotated[
        Literal["grpc", "http/protobuf"], SettingDoc(Section.OBSERVABILITY)
    ] = Field(default="grpc", description="The OTLP transport: `grpc` or `http/protobuf`.")
    otel_service_name: Annotated[str, SettingDoc(Section.OBSERVABILITY)] = Field(
        default="ai-orchestrator",
        min_length=1,
        description="`service.name` of spans and OTLP metrics, and the `service_name` label "
        "of the Prometheus metrics.",
    )
    otel_capture_content: Annotated[bool, SettingDoc(Section.OBSERVABILITY)] = Field(
        default=False,
        description="Put prompt, reply and transition detail text in spans. They may hold "
        "personal data, and spans are not encrypted.",
    )
    metrics_host: Annotated[str, SettingDoc(Section.OBSERVABILITY)] = Field(
        default="127.0.0.1",
        min_length=1,
        description="The address (an IP) where the worker serves Prometheus metrics "
        "(`/metrics`): `0.0.0.0` for a scraper on another host (the Docker image sets it). "
        "Loopback by default: the metrics name models, costs, tenants and the task queue.",
    )
    metrics_port: Annotated[int, SettingDoc(Section.OBSERVABILITY)] = Field(
        default=DEFAULT_METRICS_PORT,
        ge=0,
        le=65535,
        description="The port of `/metrics`; `0` turns it off. A port in use is logged and the "
        "worker runs without it.",
    )

    _metrics_host = field_validator("metrics_host")(listen_address)

    @property
    def tracing_enabled(self) -> bool:
        """True when an OTLP endpoint is configured."""
        return bool(self.otel_exporter_otlp_endpoint)
