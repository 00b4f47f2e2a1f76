"""OpenTelemetry GenAI semantic conventions for every chat and embeddings call.

Each call gets a client span named ``{gen_ai.operation.name} {gen_ai.request.model}`` (``chat
sim-large``, ``embeddings sim-embed``) with the conventions' attributes, and records the two
client metrics, ``gen_ai.client.token.usage`` (histogram of tokens, by ``gen_ai.token.type``)
and ``gen_ai.client.operation.duration`` (seconds). Prompt tokens read from the provider's
prompt cache are the span's ``gen_ai.usage.cache_read.input_tokens`` (part of
``gen_ai.usage.input_tokens``, as the conventions count them) and a token-usage point of type
``cache_read`` (the conventions name no type for them yet). A call answered through the
provider's batch API is recorded when its batch is collected, without a duration (its span
says ``aiorch.batch_id``). Only activities call this, and activities
are never replayed, so nothing is emitted twice.

Spans go to the process's tracer provider (``aiorch_runtime.telemetry``; a no-op without an
endpoint). The metrics need a meter provider of their own: the SDK's runtime exports its
metrics to Prometheus (``METRICS_PORT``, unchanged), so `install_genai_metrics` builds an
OpenTelemetry ``MeterProvider`` with an OTLP exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
set (it reads the standard ``OTEL_EXPORTER_OTLP_*`` and ``OTEL_METRIC_EXPORT_INTERVAL``
variables itself). Without one, the instruments are no-ops.

Message content (``gen_ai.system_instructions``, ``gen_ai.input.messages``,
``gen_ai.output.messages``, as JSON in the conventions' parts format) is recorded only with
``OTEL_CAPTURE_CONTENT=true``: it may be personal data, and spans are not encrypted.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlparse

from opentelemetry import metrics, trace
from opentelemetry.metrics import Histogram, Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from aiorch_runtime.config import Settings
from aiorch_runtime.telemetry import otlp_exporter, process_resource

PROVIDER: Final = "openai"
OPERATION_CHAT: Final = "chat"
OPERATION_EMBEDDINGS: Final = "embeddings"
METRIC_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
METRIC_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TRACER_NAME: Final = "ai-orchestrator.genai"
# The conventions' advised bucket boundaries.
TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
CONTENT_ATTRIBUTES: Final = frozenset(
    {"gen_ai.system_instructions", "gen_ai.input.messages", "gen_ai.output.messages"}
)


def install_genai_metrics(settings: Settings, component: str) -> MeterProvider | None:
    """A meter provider exporting over OTLP when an endpoint is configured, else None.

    The caller owns it: `GenAiTelemetry` records through it, and ``shutdown()`` flushes it.
    """
    if not settings.tracing_enabled:
        return None
    resource = process_resource(settings, component)
    exporter: MetricExporter = otlp_exporter(settings, "metric")
    reader = PeriodicExportingMetricReader(exporter)
    return MeterProvider(metric_readers=[reader], resource=resource)


def server_of(base_url: str) -> tuple[str, int | None]:
    """``server.address`` and ``server.port`` of an endpoint URL."""
    parsed = urlparse(base_url)
    port = parsed.port or {"https": 443, "http": 80}.get(parsed.scheme)
    return parsed.hostname or base_url, port


def text_messages(messages: Sequence[Any]) -> str:
    """Chat messages as the conventions' JSON: ``[{"role", "parts": [{"type": "text",
    "content"}]}]`` (system messages included; `system_instructions` has them apart too)."""
    shown = [
        {
            "role": str(message.get("role", "")),
            "parts": [{"type": "text", "content": str(message.get("content", ""))}],
        }
        for message in messages
        if isinstance(message, dict)
    ]
    return json.dumps(shown, ensure_ascii=False)


@dataclass
class CallRecord:
    """What one call learned, filled in by the activity while the span is open."""

    span: Span
    response_model: str | None = None
    response_id: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    error_type: str | None = None
    capture: bool = False

    def content(self, name: str, value: str) -> None:
        """Record a content attribute, only with content capture on."""
        if self.capture:
            self.span.set_attribute(name, value)


class GenAiTelemetry:
    """Spans and metrics of the GenAI conventions, for one worker's LLM and embeddings calls."""

    def __init__(
        self,
        base_url: str,
        *,
        capture_content: bool = False,
        meter_provider: MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self._address, self._port = server_of(base_url)
        # The process's provider by default (replay-safe, OTLP when configured).
        self._tracer_provider = tracer_provider
        self._capture = capture_content
        meter: Meter = (meter_provider or metrics.NoOpMeterProvider()).get_meter(TRACER_NAME)
        self._tokens: Histogram = meter.create_histogram(
            METRIC_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self._duration: Histogram = meter.create_histogram(
            METRIC_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )

    @contextlib.contextmanager
    def call(
        self,
        operation: str,
        model: str,
        *,
        timed: bool = True,
        **request: int | float | str | None,
    ) -> Iterator[CallRecord]:
        """A client span around one call; ``request`` adds ``gen_ai.request.*`` attributes;
        ``timed`` False: the block is not the call (a batched call, recorded when collected),
        so no duration is recorded.

        An exception leaving the block sets ``error.type`` (the record's, else the exception's
        class name) and the span's error status, and is re-raised.
        """
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": model,
            "server.address": self._address,
        }
        if self._port is not None:
            attributes["server.port"] = self._port
        for name, value in request.items():
            if value is not None:
                attributes[f"gen_ai.request.{name}"] = value
        tracer = (self._tracer_provider or trace.get_tracer_provider()).get_tracer(TRACER_NAME)
        started = time.perf_counter()
        with tracer.start_as_current_span(
            f"{operation} {model}",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            record = CallRecord(span=span, capture=self._capture)
            try:
                yield record
            except BaseException as err:
                record.error_type = record.error_type or type(err).__name__
                raise
            finally:
                self._finish(record, attributes, time.perf_counter() - started if timed else None)

    def _finish(self, record: CallRecord, request: dict[str, Any], seconds: float | None) -> None:
        span = record.span
        common = {k: v for k, v in request.items() if not k.startswith("gen_ai.request.")}
        common["gen_ai.request.model"] = request["gen_ai.request.model"]
        if record.response_model:
            span.set_attribute("gen_ai.response.model", record.response_model)
            common["gen_ai.response.model"] = record.response_model
        if record.response_id:
            span.set_attribute("gen_ai.response.id", record.response_id)
        if record.finish_reasons:
            span.set_attribute("gen_ai.response.finish_reasons", record.finish_reasons)
        for kind, count in (("input", record.input_tokens), ("output", record.output_tokens)):
            if count is None:
                continue
            span.set_attribute(f"gen_ai.usage.{kind}_tokens", count)
            self._tokens.record(count, {**common, "gen_ai.token.type": kind})
        if record.cache_read_tokens is not None:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", record.cache_read_tokens)
            self._tokens.record(
                record.cache_read_tokens, {**common, "gen_ai.token.type": "cache_read"}
            )
        if record.error_type:
            span.set_attribute("error.type", record.error_type)
            span.set_status(Status(StatusCode.ERROR, record.error_type))
            common["error.type"] = record.error_type
        if seconds is not None:
            self._duration.record(seconds, common)
