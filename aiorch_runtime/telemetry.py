"""OpenTelemetry tracing and Prometheus metrics for the worker and the starter.

Traces: when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set,
`tracing` installs a replay-safe tracer provider (``temporalio.contrib.opentelemetry``) with a
batch processor and an OTLP exporter, and ``aiorch_runtime.plugin.AiOrchestratorPlugin`` (which
every client `aiorch_runtime.connection.connect` makes carries) adds Temporal's OpenTelemetry
interceptor, on the same setting. The interceptor carries the trace context in Temporal
headers, so one trace runs from ``starter.py start`` (the ``StartWorkflow`` span) through
``RunWorkflow`` and each transition span into every ``RunActivity``. The exporter is built
without arguments so it honours every standard ``OTEL_EXPORTER_OTLP_*`` variable itself
(endpoint, headers, timeout, compression, certificates, the ``_TRACES_`` variants);
``OTEL_EXPORTER_OTLP_PROTOCOL`` picks gRPC (default) or ``http/protobuf``.
Unset: no provider, no interceptor, nothing exported and no error.

Metrics: `worker_runtime` gives the worker a Temporal ``Runtime`` whose Prometheus endpoint
(``http://0.0.0.0:METRICS_PORT/metrics``) serves the SDK's own metrics (``temporal_*``) and the
project's (``aiorch_*``, see ``workflows.engine.observability``). The SDK's runtime exports
metrics to Prometheus *or* OTLP, not both, so Prometheus is the path: a collector that wants
them over OTLP scrapes this endpoint with its ``prometheus`` receiver.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from temporalio.contrib.opentelemetry import (
    ReplaySafeTracerProvider,
    create_tracer_provider,
)
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from aiorch_runtime.config import Settings
from workflows.engine.observability import (
    METRIC_APPROVAL_DELAY,
    METRIC_LLM_COST,
    METRIC_REVIEW_WAIT,
    METRIC_RUN_DURATION,
)

log = logging.getLogger(__name__)

# Reviews take seconds to days; runs take a second to days (with review); calls cost cents.
HISTOGRAM_BUCKETS: dict[str, Sequence[float]] = {
    METRIC_REVIEW_WAIT: [1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 2 * 86400],
    METRIC_APPROVAL_DELAY: [1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 2 * 86400],
    METRIC_RUN_DURATION: [0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400],
    METRIC_LLM_COST: [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
}


# Each signal's OTLP exporter, in opentelemetry.exporter.otlp.proto.<transport>.<signal>_exporter.
_OTLP_EXPORTERS: Final = {"trace": "OTLPSpanExporter", "metric": "OTLPMetricExporter"}


def otlp_exporter(settings: Settings, signal: Literal["trace", "metric"]) -> Any:
    """The OTLP exporter of ``signal`` for the configured protocol: gRPC, or HTTP for
    ``http/protobuf``. Built without arguments, so it reads its own OTEL_* variables; imported
    only here, so a process loads one transport's stack, not both."""
    transport = "http" if settings.otel_exporter_otlp_protocol == "http/protobuf" else "grpc"
    module = importlib.import_module(
        f"opentelemetry.exporter.otlp.proto.{transport}.{signal}_exporter"
    )
    return getattr(module, _OTLP_EXPORTERS[signal])()


def process_resource(settings: Settings, component: str) -> Resource:
    """The OpenTelemetry resource of this process's spans and metrics."""
    return Resource.create(
        {"service.name": settings.otel_service_name, "aiorch.component": component}
    )


def span_exporter(settings: Settings) -> SpanExporter:
    """The OTLP span exporter for the configured protocol, reading its own OTEL_* variables."""
    exporter: SpanExporter = otlp_exporter(settings, "trace")
    return exporter


def _installed_provider() -> ReplaySafeTracerProvider | None:
    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, ReplaySafeTracerProvider) else None


def install_tracing(settings: Settings, component: str) -> ReplaySafeTracerProvider | None:
    """Install the process-wide tracer provider once, if an endpoint is configured.

    Returns the provider (also when an earlier call installed it), or None when tracing is off.
    """
    if not settings.tracing_enabled:
        return None
    existing = _installed_provider()
    if existing is not None:
        return existing
    provider = create_tracer_provider(resource=process_resource(settings, component))
    provider.add_span_processor(BatchSpanProcessor(span_exporter(settings)))
    trace.set_tracer_provider(provider)
    return provider


@contextlib.contextmanager
def tracing(settings: Settings, component: str) -> Iterator[ReplaySafeTracerProvider | None]:
    """Tracing for the duration of a command or a worker's life; flushes spans on the way out."""
    provider = install_tracing(settings, component)
    try:
        yield provider
    finally:
        if provider is not None:
            provider.force_flush(timeout_millis=10_000)


def worker_runtime(settings: Settings) -> Runtime | None:
    """A runtime serving Prometheus metrics on ``METRICS_HOST:METRICS_PORT``; None when the
    port is 0 or taken.

    A port already in use (a second worker on the same host) is logged, not fatal: metrics must
    never stop the pipeline.
    """
    if not settings.metrics_port:
        return None
    host = f"[{settings.metrics_host}]" if ":" in settings.metrics_host else settings.metrics_host
    bind_address = f"{host}:{settings.metrics_port}"
    try:
        runtime = Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(
                    bind_address=bind_address,
                    counters_total_suffix=True,
                    durations_as_seconds=True,
                    histogram_bucket_overrides=HISTOGRAM_BUCKETS,
                ),
                global_tags={"service_name": settings.otel_service_name},
                attach_service_name=False,
            )
        )
    except ValueError as err:
        log.warning(
            "metrics endpoint %s not started (%s); set METRICS_PORT to a free port, or 0 to "
            "turn it off",
            bind_address,
            err,
        )
        return None
    log.info("Prometheus metrics on http://%s/metrics", bind_address)
    return runtime
