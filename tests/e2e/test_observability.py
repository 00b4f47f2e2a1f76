"""Traces over real OTLP/HTTP and metrics over a real Prometheus endpoint, end to end.

A stack of its own (dev server, SQS, simulator) runs a worker that exports spans to an OTLP/HTTP
receiver started here on a free port and serves Prometheus metrics on another. The worker keeps
no workflows in its cache, so every workflow task replays the run from the start: span and
metric counts prove that replays record nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import sys
import threading
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from activities.pricing import estimate_cost
from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch_runtime.config import DEFAULT_PRICE_TABLE
from aiorch_runtime.temporal import DATA_CONVERTER
from tests.support.history_events import scheduled_activities
from tests.support.live_runs import request, start, visible_state
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.reviewing import signed
from tests.support.simulator import Simulator
from workflows import contract
from workflows.engine.observability import error_reason

pytestmark = pytest.mark.e2e

PROMPT_MARKER = "zebra-quartz-privacy-marker"


@dataclass(frozen=True)
class SpanRecord:
    """One received span, flattened."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


async def _export_body(request: web.Request) -> bytes:
    """An OTLP/HTTP export's protobuf, which exporters may send gzipped."""
    body = await request.read()
    if request.headers.get("Content-Encoding") == "gzip":
        return gzip.decompress(body)
    return body


@dataclass(frozen=True)
class MetricPoint:
    """One received histogram data point: metric name, unit, attributes, count and sum."""

    name: str
    unit: str
    attributes: dict[str, Any]
    count: int
    total: float


@dataclass
class OtlpReceiver:
    """A tiny OTLP/HTTP receiver (POST /v1/traces and /v1/metrics, protobuf) in a thread of
    its own."""

    port: int = field(default_factory=free_port)
    spans: list[SpanRecord] = field(default_factory=list)
    points: list[MetricPoint] = field(default_factory=list)
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _traces(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await _export_body(request))
        received = []
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        SpanRecord(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            name=span.name,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            resource=resource,
                        )
                    )
        with self._lock:
            self.spans.extend(received)
            self.requests += 1
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        export = ExportMetricsServiceRequest.FromString(await _export_body(request))
        received = []
        for resource_metrics in export.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.WhichOneof("data") != "histogram":
                        continue
                    for point in metric.histogram.data_points:
                        received.append(
                            MetricPoint(
                                name=metric.name,
                                unit=metric.unit,
                                attributes={a.key: _value(a.value) for a in point.attributes},
                                count=point.count,
                                total=point.sum,
                            )
                        )
        with self._lock:
            self.points.extend(received)
        return web.Response(
            body=ExportMetricsServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def snapshot(self) -> list[SpanRecord]:
        with self._lock:
            return list(self.spans)

    def metric_points(self) -> list[MetricPoint]:
        with self._lock:
            return list(self.points)

    @contextlib.contextmanager
    def running(self) -> Iterator[OtlpReceiver]:
        loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        thread = threading.Thread(target=loop.run_forever, name="otlp-receiver", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()


@dataclass
class ObservedStack:
    """The stack, its receiver, and the environment a starter needs to join the trace."""

    stack: LocalStack
    receiver: OtlpReceiver
    metrics_url: str
    otel_env: dict[str, str]

    def scrape(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text: str = response.read().decode()
        return text


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedStack]:
    metrics_port = free_port()
    with OtlpReceiver().running() as receiver:
        otel_env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # standard variable: export batches quickly
            "OTEL_METRIC_EXPORT_INTERVAL": "500",  # and metrics every half second
            "OTEL_SERVICE_NAME": "aiorch-e2e",
        }
        worker_env = {
            **E2E_WORKER_ENV,
            **otel_env,
            "METRICS_PORT": str(metrics_port),
            "WORKER_MAX_CACHED_WORKFLOWS": "0",  # every task replays from the first event
        }
        with LocalStack(
            tmp_path_factory.mktemp("observed"), with_worker=True, worker_env=worker_env
        ) as stack:
            yield ObservedStack(
                stack, receiver, f"http://127.0.0.1:{metrics_port}/metrics", otel_env
            )


@pytest.fixture(scope="module")
async def observed_client(observed: ObservedStack) -> Client:
    return await Client.connect(
        observed.stack.addresses.temporal_address, data_converter=DATA_CONVERTER
    )


async def run_starter(observed: ObservedStack, *args: str) -> str:
    """``python starter.py ARGS`` with the stack's and OTel's environment; returns what it
    printed on stderr (with ``--wait``: the id and links; stdout holds the result's JSON)."""
    env = {**observed.stack.addresses.env(), **observed.otel_env}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stderr.decode()
    json.loads(stdout)
    return stderr.decode()


def transitions_of(spans: list[SpanRecord], workflow_id: str) -> list[SpanRecord]:
    return [s for s in spans if s.attributes.get("aiorch.workflow_id") == workflow_id]


async def wait_for_spans(
    receiver: OtlpReceiver,
    workflow_id: str,
    transitions: int,
    client: Client,
    timeout: float = 20.0,
) -> list[SpanRecord]:
    """Every span of the run's trace, once the workflow span and all transitions arrived, and
    then every transition of a run started after that one closed: the worker exports spans in
    the order they end, so anything of the first run's (a duplicate, too) has arrived by then."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        spans = receiver.snapshot()
        run = [
            s
            for s in spans
            if s.name == f"RunWorkflow:{contract.WORKFLOW_TYPE}"
            and s.attributes.get("temporalWorkflowID") == workflow_id
        ]
        moves = transitions_of(spans, workflow_id)
        if run and len(moves) >= transitions:
            later = await start(client, request("After the traced run", review="never"))
            closed = len((await finished(later)).history)
            while len(transitions_of(receiver.snapshot(), later.id)) < closed:
                assert asyncio.get_running_loop().time() < deadline, "the later run's spans"
                await asyncio.sleep(0.2)
            return [s for s in receiver.snapshot() if s.trace_id == run[0].trace_id]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"{workflow_id}: {len(run)} workflow span(s), {len(moves)}/{transitions} "
                f"transition spans after {timeout:g}s"
            )
        await asyncio.sleep(0.2)


async def test_one_trace_links_start_workflow_activities_and_transitions(
    observed: ObservedStack, observed_client: Client
) -> None:
    """`starter.py start` opens a trace that the workflow, every activity (one per attempt) and
    one transition span per history entry join; transition spans carry state, event, attempt,
    model and the simulator's token usage, and no span holds the prompt text."""
    message = f"Explain tracing {PROMPT_MARKER} [sim:status=503:times=1]"
    output = await run_starter(observed, "start", message, "--wait")
    workflow_id = output.split("started ", 1)[1].split()[0]
    handle = observed_client.get_workflow_handle(workflow_id)
    result = await finished(handle)
    assert [h.to_state for h in result.history] == [
        "fetch_prompt",
        "invoke_llm",
        "retry_llm",
        "invoke_llm",
        "generate_embedding",
        "completed",
    ]

    spans = await wait_for_spans(
        observed.receiver, workflow_id, len(result.history), observed_client
    )
    by_name = Counter(s.name for s in spans)
    start_spans = [s for s in spans if s.name == f"StartWorkflow:{contract.WORKFLOW_TYPE}"]
    assert len(start_spans) == 1
    assert start_spans[0].resource["aiorch.component"] == "starter"
    assert start_spans[0].parent_id == ""  # the start call is the root of the trace
    assert by_name[f"RunWorkflow:{contract.WORKFLOW_TYPE}"] == 1
    scheduled = await scheduled_activities(handle)
    # The inline message's fetch_prompt is a local activity: traced, but not an activity task.
    assert scheduled == ["invoke_llm", "invoke_llm", "generate_embedding"]
    assert Counter(
        s.name.removeprefix("RunActivity:") for s in spans if s.name.startswith("RunActivity:")
    ) == Counter(["fetch_prompt", *scheduled])
    assert all(s.resource["service.name"] == "aiorch-e2e" for s in spans)

    moves = sorted((s for s in spans if s.name.startswith("transition ")), key=lambda s: s.end_ns)
    assert len(moves) == len(result.history)
    for span, entry in zip(moves, result.history, strict=True):
        assert span.name == f"transition {entry.from_state}->{entry.to_state}"
        assert span.attributes["aiorch.from_state"] == entry.from_state
        assert span.attributes["aiorch.to_state"] == entry.to_state
        assert span.attributes["aiorch.event"] == entry.event
        assert span.attributes["aiorch.attempt"] == entry.attempt
        assert span.attributes["aiorch.workflow_id"] == workflow_id
        assert span.end_ns >= span.start_ns
    retry = moves[2].attributes
    assert retry["aiorch.error_type"] == "LlmRetryable"
    answer = moves[4].attributes
    chats = [r for r in observed_simulator(observed).chat_requests(workflow_id) if r["usage"]]
    assert len(chats) == 1
    assert answer["gen_ai.response.model"] == "sim-large"
    assert answer["gen_ai.usage.input_tokens"] == chats[0]["usage"]["prompt_tokens"]
    assert answer["gen_ai.usage.output_tokens"] == chats[0]["usage"]["completion_tokens"]

    everything = observed.receiver.snapshot()
    for span in everything:
        for value in [*span.attributes.values(), *span.resource.values(), span.name]:
            assert PROMPT_MARKER not in str(value), (span.name, value)
    assert "aiorch.prompt" not in answer
    assert "aiorch.reply" not in answer


def document(observed: ObservedStack, text: str) -> str:
    """``text`` as a document in the worker's input root, by reference."""
    path = observed.stack.addresses.input_dir / f"{uuid.uuid4().hex}.txt"
    path.write_text(text, encoding="utf-8")
    return path.as_uri()


def grown(
    after: dict[str, list[tuple[dict[str, str], float]]],
    before: dict[str, list[tuple[dict[str, str], float]]],
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """How much each sample grew since ``before`` (samples that did not grow left out)."""
    earlier = {
        (name, tuple(sorted(labels.items()))): value
        for name in before
        for labels, value in before[name]
    }
    found: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for name, values in after.items():
        for labels, value in values:
            change = value - earlier.get((name, tuple(sorted(labels.items()))), 0.0)
            if change:
                found[name].append((labels, change))
    return found


def observed_simulator(observed: ObservedStack) -> Simulator:
    return Simulator(observed.stack.addresses.openai_base_url)


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus samples by name: [(labels, value)]."""
    found: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name].append((dict(sample.labels), sample.value))
    return found


def total(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(
        value
        for got, value in found.get(name, [])
        if all(got.get(key) == wanted for key, wanted in labels.items())
    )


async def test_prometheus_endpoint_counts_transitions_retries_tokens_and_cost(
    observed: ObservedStack, observed_client: Client
) -> None:
    """After runs with retries, a review and a dead letter, the worker's /metrics grew by
    exactly the transitions of their histories, retries by error type, dead letters, review
    waits and approval delays, run durations, the tokens the simulator reported per model and
    the price table's cost, though the worker has no cache and replays every task from the
    first event."""
    before = samples(observed.scrape())
    messages: list[tuple[str, dict[str, Any]]] = [
        ("plain answer", {}),
        ("flaky answer [sim:status=429:times=2:retry_after_ms=50]", {}),
        ("bad shape [sim:malformed:times=1]", {}),
        ("reviewed answer", {"review": "always"}),
        ("never works [sim:status=500]", {"options": {"llm_max_attempts": 2}}),
    ]
    # By reference, so fetch_prompt is an activity task: with no cache, a run evicted while a
    # *local* fetch is in flight loses that first task, and its retry runs it again (not as a
    # replay, so it counts again; see README, Metrics).
    runs = [request(document(observed, text), **fields) for text, fields in messages]
    handles = [await start(observed_client, run) for run in runs]
    review = handles[3]
    # Visibility, not the state query: a query that reaches a cache-less worker while a workflow
    # task is in flight replays that task live, which the SDK may count twice (see README).
    assert await visible_state(observed_client, review.id, "await_review", timeout=90)
    await review.signal(
        contract.SIGNAL_REVIEW,
        await signed(review, observed.stack.reviewer_key, "approve", "eve", review_round=1),
    )
    results = [await finished(handle) for handle in handles]
    entries = [entry for result in results for entry in result.history]
    found = grown(samples(observed.scrape()), before)

    edges = Counter((e.from_state, e.to_state, e.event) for e in entries)
    scraped_edges = {
        (labels["from_state"], labels["to_state"], labels["event"]): value
        for labels, value in found["aiorch_transitions_total"]
    }
    assert scraped_edges == edges

    retries = Counter(error_reason(e.detail) for e in entries if e.event == "retryable_error")
    assert {"LlmRateLimited", "LlmMalformedReply", "LlmRetryable"} <= set(retries)
    scraped_retries = {
        labels["reason"]: value for labels, value in found["aiorch_llm_retries_total"]
    }
    assert scraped_retries == retries

    assert total(found, "aiorch_dead_letters_total", failed_state="invoke_llm") == 1
    assert total(found, "aiorch_review_wait_seconds_count", outcome="approve") == 1
    approvals = {"pipeline": "llm", "group": "-", "decision": "approve"}
    assert total(found, "aiorch_approval_delay_seconds_count", **approvals) == 1
    finals = Counter(result.state for result in results)
    for final, count in finals.items():
        assert total(found, "aiorch_run_duration_seconds_count", final_state=final) == count

    ours = {handle.id for handle in handles}
    chats = [
        r
        for r in observed_simulator(observed).requests()
        if r["path"] == "chat" and r.get("run_id") in ours
    ]
    tokens: Counter[tuple[str, str]] = Counter()
    cost: dict[str, float] = defaultdict(float)
    for chat in chats:
        if chat["usage"] is None:
            continue
        usage = chat["usage"]
        tokens[(chat["model"], "prompt")] += usage["prompt_tokens"]
        tokens[(chat["model"], "completion")] += usage["completion_tokens"]
        estimate = estimate_cost(
            DEFAULT_PRICE_TABLE, chat["model"], usage["prompt_tokens"], usage["completion_tokens"]
        )
        assert estimate is not None
        cost[chat["model"]] += estimate
    scraped_tokens = {
        (labels["model"], labels["kind"]): value
        for labels, value in found["aiorch_llm_tokens_total"]
    }
    assert scraped_tokens == tokens
    for model, dollars in cost.items():
        assert total(found, "aiorch_llm_cost_usd_sum", model=model) == pytest.approx(dollars)
    assert any(name.startswith("temporal_") for name in found)


GENAI_REQUIRED = {
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "server.address",
    "server.port",
}
CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"}


async def test_llm_and_embedding_calls_follow_the_genai_conventions(
    observed: ObservedStack, observed_client: Client
) -> None:
    """Each chat and embeddings call is a CLIENT span named `{operation} {model}` under its
    RunActivity span, with the GenAI attributes (provider openai, request and response model,
    response id, finish reasons, token usage, error.type on the failed attempt) and no message
    content (capture is off); the worker exports gen_ai.client.token.usage (by token type) and
    gen_ai.client.operation.duration over OTLP."""
    handle = await start(
        observed_client, request(f"GenAI conventions {PROMPT_MARKER} [sim:status=503:times=1]")
    )
    result = await finished(handle)
    assert result.state == "completed"
    chats = [r for r in observed_simulator(observed).chat_requests(handle.id)]

    deadline = asyncio.get_running_loop().time() + 20
    while True:
        spans = observed.receiver.snapshot()
        ours = [s for s in spans if s.name in ("chat sim-large", "embeddings sim-embed")]
        run = {s.span_id for s in spans if s.attributes.get("temporalWorkflowID") == handle.id}
        mine = [s for s in ours if s.parent_id in run]
        points = observed.receiver.metric_points()
        names = {p.name for p in points}
        if (
            len(mine) >= 3
            and {
                "gen_ai.client.token.usage",
                "gen_ai.client.operation.duration",
            }
            <= names
        ):
            break
        assert asyncio.get_running_loop().time() < deadline, (len(mine), names)
        await asyncio.sleep(0.3)

    chat_spans = sorted((s for s in mine if s.name == "chat sim-large"), key=lambda s: s.start_ns)
    [embedding] = [s for s in mine if s.name == "embeddings sim-embed"]
    failed, answered = chat_spans
    for span in (failed, answered, embedding):
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert not CONTENT_KEYS & set(span.attributes)
    assert failed.attributes["error.type"] == "503"
    assert answered.attributes.keys() >= GENAI_REQUIRED | {
        "gen_ai.response.id",
        "gen_ai.response.finish_reasons",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
    }
    assert answered.attributes["gen_ai.operation.name"] == "chat"
    assert answered.attributes["gen_ai.request.model"] == "sim-large"
    assert answered.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    usage = chats[-1]["usage"]
    assert answered.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert answered.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert "error.type" not in answered.attributes
    assert embedding.attributes["gen_ai.operation.name"] == "embeddings"
    assert embedding.attributes["gen_ai.usage.input_tokens"] > 0
    for span in observed.receiver.snapshot():
        assert PROMPT_MARKER not in str(span.attributes)

    tokens = [p for p in points if p.name == "gen_ai.client.token.usage"]
    assert {p.attributes["gen_ai.token.type"] for p in tokens} >= {"input", "output"}
    assert all(p.unit == "{token}" for p in tokens)
    assert all(p.attributes["gen_ai.provider.name"] == "openai" for p in tokens)
    durations = [p for p in points if p.name == "gen_ai.client.operation.duration"]
    assert all(p.unit == "s" for p in durations)
    assert any(p.attributes.get("error.type") == "503" for p in durations)
    assert {p.attributes["gen_ai.operation.name"] for p in durations} == {"chat", "embeddings"}
