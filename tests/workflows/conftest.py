"""Workflow layer fixtures: the real ``AiOrchestrator`` on Temporal's time-skipping test server,
every activity a scripted double (the harness is ``tests.support.orchestration``; how the
server behaves, which it relies on, is in ``tests.support.time_skipping``).

* ``env``: one time-skipping server per test module, with the project's data converter; its
  client's runtime records what the workers measure in ``worker_metrics``.
* ``orch``: per test, a fresh task queue, fresh scripted activities and a running worker; open
  runs are terminated at teardown so no test leaves work behind for the shared server;
  ``worker_metrics`` is drained first, so it holds this test's metrics only.
* ``private_orch``: the same on a server of its own.
* ``transition_spans``: the spans the workflows write, this test's only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.contrib.opentelemetry import create_tracer_provider
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import WorkflowEnvironment

from tests.support.orchestration import Orchestration, running_orchestration
from tests.support.time_skipping import time_skipping_server


@pytest.fixture(scope="session")
def worker_metrics() -> MetricBuffer:
    """What the workers on the shared servers record; ``orch`` drains it before every test,
    whose worker records a few thousand updates at most."""
    return MetricBuffer(100_000)


@pytest.fixture(scope="session")
def worker_runtime(worker_metrics: MetricBuffer) -> Runtime:
    """The runtime of every shared server's client and so of its workers: one for the layer."""
    return Runtime(telemetry=TelemetryConfig(metrics=worker_metrics))


@pytest_asyncio.fixture(scope="module")
async def env(worker_runtime: Runtime) -> AsyncIterator[WorkflowEnvironment]:
    """One time-skipping server per test module. A server that served the whole layer
    sometimes kept its clock locked for minutes on a loaded machine (after earlier tests had
    closed runs with a task still in flight, which the server keeps outstanding), and a later
    test's skip outlasted its deadline; a server per module keeps such a lock to the module."""
    async with time_skipping_server(worker_runtime) as environment:
        yield environment


@pytest_asyncio.fixture
async def orch(
    env: WorkflowEnvironment, worker_metrics: MetricBuffer
) -> AsyncIterator[Orchestration]:
    """This test's worker, fakes and runs on the shared server."""
    worker_metrics.retrieve_updates()
    async with running_orchestration(env) as orchestration:
        yield orchestration


@pytest_asyncio.fixture
async def private_orch() -> AsyncIterator[Orchestration]:
    """Like ``orch`` but on a server of its own, for a test that closes a run while one of its
    activities is still in flight (TRY_CANCEL). The test server does not skip time while an
    activity is outstanding, and an activity orphaned by a closed run stays outstanding until
    its own timeout, so on the shared server it would freeze time for the tests that follow."""
    async with (
        time_skipping_server() as environment,
        running_orchestration(environment, check_time_skips=False) as orchestration,
    ):
        yield orchestration


@pytest.fixture(scope="session")
def recorded_spans() -> InMemorySpanExporter:
    """Every span of this process from now on: the workflows write transition spans through the
    process-wide tracer provider, so it is installed here, replay-safe as the worker's is."""
    spans = InMemorySpanExporter()
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:
        pytest.fail("a tracer provider was installed in this test process before this fixture")
    return spans


@pytest.fixture
def transition_spans(recorded_spans: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """The spans written during this test."""
    recorded_spans.clear()
    yield recorded_spans
    recorded_spans.clear()
