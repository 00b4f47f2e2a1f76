"""Prompt caching priced right: runs that share a long prefix (the pipeline's system prompt)
have most of their input read from the provider's prompt cache, which the LLM activity reads
from the reply and prices at the cached rate, in its result and its cost metric. Against the
simulator over HTTP, through the real openai client, in Temporal's activity test environment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.runtime import MetricBuffer, MetricBufferDurationFormat, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from activities.input_loader import InputLoader
from activities.llm import LlmActivities
from activities.llm_request import build_messages, prompt_cache_key
from aiorch.devstack.llm_simulator import running_simulator
from aiorch_runtime.config import DEFAULT_PRICE_TABLE
from aiorch_runtime.genai import GenAiTelemetry
from tests.activities.llm_calls import call
from workflows.engine.observability import METRIC_LLM_COST, METRIC_LLM_TOKENS

RUNS = 100
PREFIX_WORDS = 2000  # the simulator counts a word as a token
PRICE = DEFAULT_PRICE_TABLE["sim-large"]


@pytest.fixture
async def sim_root() -> AsyncIterator[str]:
    async with running_simulator() as root:
        yield root


async def chat_log(root: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"{root}/_sim/requests") as response:
        return [entry for entry in await response.json() if entry["path"] == "chat"]


def hand_priced(usage: dict[str, Any]) -> float:
    """The cost of one call from the simulator's token counts and the price table, by hand."""
    assert PRICE.cached_prompt is not None
    cached = int(usage["prompt_tokens_details"]["cached_tokens"])
    uncached = int(usage["prompt_tokens"]) - cached
    completion = int(usage["completion_tokens"])
    return (
        uncached * PRICE.prompt + cached * PRICE.cached_prompt + completion * PRICE.completion
    ) / 1000


OUR_LABELS = frozenset({"kind", "lane", "model"})


def metric_sums(updates: list[Any], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The sum of a counter's or histogram's recordings, by our labels."""
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    for update in updates:
        if update.metric.name != name:
            continue
        key = tuple(sorted((k, str(v)) for k, v in update.attributes.items() if k in OUR_LABELS))
        value = update.value
        total = sum(value) if isinstance(value, list) else value  # a histogram's recordings
        sums[key] = sums.get(key, 0.0) + float(total)
    return sums


async def test_runs_sharing_a_long_prefix_read_it_from_the_cache_and_pay_the_cached_rate(
    sim_root: str,
) -> None:
    """100 runs whose calls share a 2,000-token system prompt, each with its own question: after
    the first, at least 90% of their input tokens are read from the prompt cache; every call
    names its pipeline as prompt_cache_key; each result's cost, their sum and the cost metric
    equal a hand calculation from the simulator's token counts and the price table within 1%
    (cached tokens at the cached rate), and the token metric counts the cached ones."""
    prefix = " ".join(f"rule{n}" for n in range(PREFIX_WORDS))
    buffer = MetricBuffer(100_000, duration_format=MetricBufferDurationFormat.SECONDS)
    environment = ActivityEnvironment()
    environment.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    environment.info = environment.info.__class__(
        **{**environment.info.__dict__, "workflow_type": "AiOrchestrator"}
    )
    async with AsyncOpenAI(
        base_url=f"{sim_root}/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        activities = LlmActivities(
            client, InputLoader(), 10, prices=DEFAULT_PRICE_TABLE, cache_scope="pipeline"
        )
        results = [
            await environment.run(
                activities.invoke_llm,
                call(f"Question number {n}: what applies?", system_prompt=prefix),
            )
            for n in range(RUNS)
        ]
    logged = await chat_log(sim_root)
    assert len(logged) == RUNS
    assert {entry["prompt_cache_key"] for entry in logged} == {
        prompt_cache_key("pipeline", "AiOrchestrator", "default")
    }
    later = results[1:]
    cached = sum(result.usage.cached_tokens for result in later)
    prompt = sum(result.usage.prompt_tokens for result in later)
    assert results[0].usage.cached_tokens == 0
    assert cached / prompt >= 0.9, f"cached share {cached / prompt:.3f}"

    by_hand = [hand_priced(entry["usage"]) for entry in logged]
    for result, expected in zip(results, by_hand, strict=True):
        assert result.cost_usd == pytest.approx(expected, rel=0.01)
    total = sum(by_hand)
    assert sum(result.cost_usd or 0.0 for result in results) == pytest.approx(total, rel=0.01)
    uncached_total = sum(
        (
            e["usage"]["prompt_tokens"] * PRICE.prompt
            + e["usage"]["completion_tokens"] * PRICE.completion
        )
        / 1000
        for e in logged
    )
    assert total < 0.5 * uncached_total  # the cache is most of the input, at a quarter price
    updates = list(buffer.retrieve_updates())
    costs = metric_sums(updates, METRIC_LLM_COST)
    assert costs == {(("lane", "sync"), ("model", "sim-large")): pytest.approx(total, rel=0.01)}
    tokens = metric_sums(updates, METRIC_LLM_TOKENS)
    read = (("kind", "cache_read"), ("lane", "sync"), ("model", "sim-large"))
    assert tokens[read] == cached


def test_the_stable_prefix_comes_first() -> None:
    """The system prompt (the pipeline's, shared by its runs) is the first message, then a
    referenced document, then the run's own text; review feedback and a correction only add to
    the end, so each round keeps the prefix the provider cached."""
    plain = build_messages(call("Own question"), None)
    with_document = build_messages(call("Own question"), "SHARED DOCUMENT ")
    reviewed = build_messages(
        call("Own question", feedback=["shorter"], corrective=True), "SHARED DOCUMENT "
    )
    assert [m["role"] for m in plain] == ["system", "user"]
    assert str(with_document[1]["content"]).startswith("SHARED DOCUMENT \n\nOwn question")
    assert str(reviewed[1]["content"]).startswith(str(with_document[1]["content"]))
    assert reviewed[0] == with_document[0] == plain[0]
    assert len(reviewed) == 3


def test_a_referenced_document_is_parted_from_the_prompt_once() -> None:
    """A prompt that starts with its own blank line (the document pipeline's) follows the
    document as it is; any other prompt (a lab's candidate) is parted from it by one blank line,
    so its first line is never glued to the document's last."""
    own = build_messages(call("\n\nExtract the fields."), "Total: 10")
    other = build_messages(call("Due date: 2026-12-31"), "Total: 10")
    assert own[1]["content"] == "Total: 10\n\nExtract the fields."
    assert other[1]["content"] == "Total: 10\n\nDue date: 2026-12-31"


async def test_the_genai_span_and_metrics_carry_the_cached_tokens(sim_root: str) -> None:
    """A call whose prefix the provider cached reports it on its chat span
    (gen_ai.usage.cache_read.input_tokens, within gen_ai.usage.input_tokens) and as a
    gen_ai.client.token.usage point of type cache_read."""
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    prefix = " ".join(f"term{n}" for n in range(1500))
    async with AsyncOpenAI(
        base_url=f"{sim_root}/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        telemetry = GenAiTelemetry(
            str(client.base_url),
            meter_provider=MeterProvider(metric_readers=[reader]),
            tracer_provider=tracer,
        )
        activities = LlmActivities(
            client, InputLoader(), 10, prices=DEFAULT_PRICE_TABLE, telemetry=telemetry
        )
        for question in ("first?", "second?"):
            result = await ActivityEnvironment().run(
                activities.invoke_llm, call(question, system_prompt=prefix)
            )
    assert result.usage.cached_tokens == 1408  # the 11 whole 128-token blocks of its 1,501
    first, second = spans.get_finished_spans()
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 0
    assert second.attributes["gen_ai.usage.cache_read.input_tokens"] == 1408
    assert second.attributes["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "gen_ai.client.token.usage"
        for point in metric.data.data_points
        if (point.attributes or {}).get("gen_ai.token.type") == "cache_read"
    ]
    assert sum(point.sum for point in points if isinstance(point, HistogramDataPoint)) == 1408
