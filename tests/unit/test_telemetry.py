"""Telemetry setup: nothing without an endpoint, the interceptor and exporter with one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor

from aiorch.devstack.processes import free_port
from aiorch_runtime.config import load_settings
from aiorch_runtime.plugin import AiOrchestratorPlugin
from aiorch_runtime.telemetry import worker_runtime


def printed_by_a_fresh_process(script: str, env: dict[str, str] | None = None) -> str:
    """What ``script`` prints in a new Python process (the tracer provider is process-wide),
    after checking that it succeeded; ``env``: its whole environment, else this one's."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_no_endpoint_no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without OTEL_EXPORTER_OTLP_ENDPOINT nothing is installed (in a fresh process: the
    workflow tests install a provider in this one) and the plugin adds no tracing
    interceptor."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    settings = load_settings()
    assert not settings.tracing_enabled
    assert not AiOrchestratorPlugin(settings).interceptors
    script = """
        from opentelemetry import trace
        from aiorch_runtime.config import load_settings
        from aiorch_runtime.telemetry import install_tracing
        assert install_tracing(load_settings(), "test") is None
        print(trace.get_tracer("t").start_span("x").is_recording())
    """
    assert printed_by_a_fresh_process(script) == "False"


def test_tracing_follows_the_settings_not_an_installed_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plugin traces when the settings name an endpoint (one interceptor, for client and
    worker alike), whether or not a provider was installed earlier in the process, and an
    explicit ``tracing=False`` turns it off."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    settings = load_settings()
    [interceptor] = AiOrchestratorPlugin(settings).interceptors or []
    assert isinstance(interceptor, OpenTelemetryInterceptor)
    assert not AiOrchestratorPlugin(settings, tracing=False).interceptors


@pytest.mark.parametrize(
    ("protocol", "exporter"),
    [
        ("grpc", "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"),
        ("http/protobuf", "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
    ],
)
def test_endpoint_installs_replay_safe_provider_and_plugin(protocol: str, exporter: str) -> None:
    """With an endpoint (in a fresh process: the provider is process-wide) the replay-safe
    provider and the protocol's OTLP exporter are in place."""
    script = """
        from opentelemetry import trace
        from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider
        from aiorch_runtime.config import load_settings
        from aiorch_runtime.telemetry import install_tracing
        provider = install_tracing(load_settings(), "test")
        assert isinstance(trace.get_tracer_provider(), ReplaySafeTracerProvider)
        assert install_tracing(load_settings(), "again") is provider
        processor = provider._tracer_provider._active_span_processor._span_processors[0]
        print(type(processor._batch_processor._exporter).__module__)
    """
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
    }
    assert printed_by_a_fresh_process(script, env) == exporter


def test_metrics_port_zero_turns_the_endpoint_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """METRICS_PORT=0 gives the SDK's default runtime (no Prometheus endpoint)."""
    monkeypatch.setenv("METRICS_PORT", "0")
    assert worker_runtime(load_settings()) is None


def test_metrics_port_in_use_is_logged_not_fatal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A second worker on the same host keeps running, without its own metrics endpoint."""
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        monkeypatch.setenv("METRICS_PORT", str(taken.getsockname()[1]))
        assert worker_runtime(load_settings()) is None
    assert "METRICS_PORT" in caplog.text


TELEMETRY_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_CAPTURE_CONTENT",
    "METRICS_PORT",
    "LLM_PRICE_TABLE",
)


@pytest.mark.parametrize("name", TELEMETRY_VARIABLES)
def test_telemetry_variables_are_documented(name: str) -> None:
    """Each telemetry setting is a config field, in docs/configuration.md and in .env.example."""
    from aiorch.devstack.docs import ROOT
    from aiorch_runtime.config import Settings

    assert name.lower() in Settings.model_fields
    assert f"`{name}`" in (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert f"{name}=" in (ROOT / ".env.example").read_text(encoding="utf-8")
