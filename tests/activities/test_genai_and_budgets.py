"""The LLM activity's GenAI telemetry, budgets and the simulator's rate limits, against the
simulator over HTTP in this event loop, in Temporal's activity test environment. (The capacity
store's own behaviour, which needs a Redis server: tests/e2e/test_capacity_store.py.)"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from openai import AsyncOpenAI
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.exceptions import ApplicationError
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from activities.capacity import (
    METRIC_STORE_ERRORS,
    CallAdmission,
    CallGate,
    Settlement,
    unbudgeted_tenant,
)
from activities.input_loader import InputLoader
from activities.llm import LlmActivities
from activities.llm_request import build_messages
from activities.pricing import estimate_cost
from activities.prompt_tokens import PromptTokens, prompt_tokens
from activities.spend import METRIC_SPEND, call_key, today
from aiorch.devstack.llm_simulator import running_simulator
from aiorch_runtime.capacity import ProviderSignal
from aiorch_runtime.config import DEFAULT_PRICE_TABLE, RateLimit
from aiorch_runtime.genai import CONTENT_ATTRIBUTES, GenAiTelemetry
from tests.activities.llm_calls import call
from tests.support.capacity_store import unreachable_store
from workflows import errors

MARKER = "violet-harbour-7"


@pytest.fixture(scope="module")
async def sim_root() -> AsyncIterator[str]:
    async with running_simulator() as root:
        yield root


@pytest.fixture(scope="module")
async def llm(sim_root: str) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(base_url=f"{sim_root}/v1", api_key="sim", max_retries=0, timeout=10)
    yield client
    await client.close()


class Recorded:
    """An LLM activity whose spans and metrics land in memory."""

    def __init__(self, client: AsyncOpenAI, *, capture: bool, gate: CallGate | None = None) -> None:
        self.spans = InMemorySpanExporter()
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.client = client
        telemetry = GenAiTelemetry(
            str(client.base_url),
            capture_content=capture,
            meter_provider=MeterProvider(metric_readers=[self.metrics]),
            tracer_provider=tracer,
        )
        self.activities = LlmActivities(
            self.client,
            InputLoader(),
            10,
            prices=DEFAULT_PRICE_TABLE,
            gate=gate,
            telemetry=telemetry,
        )

    def metric_names(self) -> set[str]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return {
            metric.name
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


def gate(**fields: object) -> CallGate:
    values: dict[str, object] = {
        "base_url": "http://sim/v1",
        "rate_limits": {},
        "prices": DEFAULT_PRICE_TABLE,
        "tenant_budget": lambda tenant: None,
        "max_output_tokens": 100,
    }
    values.update(fields)
    return CallGate(None, **values)  # type: ignore[arg-type]


async def test_content_is_recorded_only_with_capture_on(llm: AsyncOpenAI) -> None:
    """With capture off the chat span has the GenAI attributes and no message content; with it
    on, it has the system instructions, input and output messages in the conventions' JSON."""
    quiet = Recorded(llm, capture=False)
    result = await ActivityEnvironment().run(quiet.activities.invoke_llm, call(f"hi {MARKER}"))
    [span] = quiet.spans.get_finished_spans()
    assert span.name == "chat sim-large"
    assert span.attributes is not None
    assert span.attributes["gen_ai.usage.output_tokens"] == result.usage.completion_tokens
    assert not CONTENT_ATTRIBUTES & set(span.attributes)
    assert MARKER not in str(dict(span.attributes))
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= (
        quiet.metric_names()
    )

    loud = Recorded(llm, capture=True)
    await ActivityEnvironment().run(loud.activities.invoke_llm, call(f"hi {MARKER}"))
    [span] = loud.spans.get_finished_spans()
    assert span.attributes is not None
    inputs = json.loads(str(span.attributes["gen_ai.input.messages"]))
    assert inputs[0]["role"] == "user"
    assert MARKER in inputs[0]["parts"][0]["content"]
    outputs = json.loads(str(span.attributes["gen_ai.output.messages"]))
    assert outputs[0]["role"] == "assistant"
    assert outputs[0]["finish_reason"] == "stop"
    assert "gen_ai.system_instructions" in span.attributes


async def test_a_call_over_the_run_budget_is_not_made(llm: AsyncOpenAI) -> None:
    """A call whose worst case (prompt estimate + reply limit, priced) would cross the run's
    ceiling returns over_budget without reaching the provider; approved, it is made and its
    cost returned."""
    recorded = Recorded(llm, capture=False, gate=gate())
    over = await ActivityEnvironment().run(
        recorded.activities.invoke_llm, call("budget please", budget_usd=0.001, spent_usd=0.0)
    )
    assert over.outcome == "over_budget"
    assert over.budget is not None
    assert over.budget.startswith("run budget")
    assert recorded.spans.get_finished_spans() == ()

    approved = await ActivityEnvironment().run(
        recorded.activities.invoke_llm,
        call("budget please", budget_usd=0.001, budget_approved=True),
    )
    assert approved.outcome == "answered"
    assert approved.cost_usd is not None
    assert approved.cost_usd > 0


def test_the_prompt_estimate_is_generous() -> None:
    """The estimate covers the simulator's count (words) and the usual ~4 characters per token
    of real tokenizers, so a reservation is an upper bound for ordinary text; the bound covers
    the estimate."""
    messages = build_messages(call("Summarise the quarterly report in three lines."), None)
    words = sum(len(str(m["content"]).split()) for m in messages)
    characters = sum(len(str(m["content"])) for m in messages)
    tokens = prompt_tokens(messages)
    assert tokens.estimate >= words
    assert tokens.estimate >= characters / 4
    assert tokens.bound >= tokens.estimate


@pytest.mark.parametrize(
    "text",
    [
        "季度报告的三行摘要,请用中文回答。" * 50,  # CJK: 3 UTF-8 bytes a character
        "🙂🚀👩‍👩‍👧‍👦🇺🇳" * 50,  # emoji, a ZWJ family and a flag: 4 bytes a code point
        "Quarterly report: résumé, naïve café, ½ ≠ ∞ " * 50,  # mostly ASCII, some not
    ],
)
def test_no_script_is_undercounted(text: str) -> None:
    """Every character outside ASCII counts its UTF-8 bytes in the estimate, and the bound is
    the prompt's UTF-8 bytes (no byte-level tokenizer makes more tokens than bytes), so CJK text
    and emoji, which the old 3-characters-per-token rule undercounted three to twelve times, are
    never undercounted; English stays near its real count (within 3 characters a token)."""
    messages = [{"role": "user", "content": text}]
    size = len(text.encode())
    non_ascii = sum(len(c.encode()) for c in text if ord(c) >= 128)
    tokens = prompt_tokens(messages)
    assert tokens.bound >= size
    assert tokens.estimate >= non_ascii + (len(text) - sum(ord(c) >= 128 for c in text)) / 3
    english = prompt_tokens([{"role": "user", "content": "Summarise the report. " * 100}])
    assert english.estimate <= 2200 / 3 + 10
    assert english.bound >= 2200


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        # 4 ASCII characters are 2 tokens at 3 a token (rounded up), 4 bytes at most.
        ([{"role": "user", "content": "abcd"}], PromptTokens(estimate=3 + 4 + 2, bound=3 + 4 + 4)),
        # "é" counts its 2 bytes; the 2 ASCII characters round up to 1 token.
        ([{"role": "user", "content": "éab"}], PromptTokens(estimate=3 + 4 + 1 + 2, bound=11)),
        # A lone surrogate (from a JSON escape) counts its 3 bytes instead of failing.
        ([{"role": "user", "content": "\ud800"}], PromptTokens(estimate=10, bound=10)),
        # A message without content (a tool call's turn) and one that is not a mapping take
        # only the chat format's tokens.
        ([{"role": "assistant"}], PromptTokens(estimate=7, bound=7)),
        ([("user", "a shape the estimate does not read")], PromptTokens(estimate=7, bound=7)),
        ([], PromptTokens(estimate=3, bound=3)),
    ],
    ids=["ascii", "mixed", "surrogate", "no-content", "not-a-mapping", "empty"],
)
def test_the_prompt_estimate_counts_each_message_exactly(
    messages: list[Any], expected: PromptTokens
) -> None:
    """The estimate is the reply's priming tokens, plus for each message the chat format's
    tokens, its ASCII characters at 3 a token rounded up and its other characters' UTF-8
    bytes; the bound counts every byte. A message without text adds only the format's
    tokens."""
    assert prompt_tokens(messages) == expected


def test_a_tenant_without_a_budget_is_told_what_to_name() -> None:
    """With tenant budgets on, a run without a tenant, or naming one without a budget, is
    refused in one line naming the setting that gives it one; with a budget, or budgets off,
    nothing is refused."""
    assert unbudgeted_tenant("acme", 5.0, budgets_on=True) is None
    assert unbudgeted_tenant("made-up", None, budgets_on=False) is None
    assert unbudgeted_tenant("default", None, budgets_on=True) == (
        "the run names no tenant, and runs without one have no daily budget "
        "(TENANT_BUDGET_DEFAULT_USD): name a tenant that has one (TENANT_BUDGETS_USD)"
    )
    assert unbudgeted_tenant("made-up", None, budgets_on=True) == (
        "tenant 'made-up' has no daily budget (TENANT_BUDGETS_USD): with tenant budgets on, "
        "a run names a tenant that has one, or none (TENANT_BUDGET_DEFAULT_USD)"
    )


async def test_a_call_for_a_tenant_that_is_no_tenant_name_fails_for_good() -> None:
    """A call whose tenant is not a tenant name (a payload written by hand) fails at once
    with the permanent InvalidRequest, in one line, before any budget is looked up."""
    with pytest.raises(ApplicationError) as refused:
        await gate().admit(call("hi", tenant="../other"), [{"role": "user", "content": "hi"}])
    assert refused.value.type == errors.INVALID_REQUEST
    assert refused.value.non_retryable
    assert refused.value.message == "the call's tenant is not a tenant name"


async def test_a_call_that_just_fits_the_run_budget_is_made() -> None:
    """A call whose worst case brings the run exactly to its ceiling is admitted; with any
    spend before it, it is refused naming the spend, the ceiling and the worst case."""
    messages = [{"role": "user", "content": "budget please"}]
    worst = estimate_cost(DEFAULT_PRICE_TABLE, "sim-large", prompt_tokens(messages).bound, 100)
    assert worst is not None and worst > 0
    fits = await gate().admit(call("budget please", budget_usd=worst), messages)
    assert fits == CallAdmission("go")
    over = await gate().admit(
        call("budget please", budget_usd=worst, spent_usd=worst / 2), messages
    )
    assert over == CallAdmission(
        "over_budget",
        budget=(
            f"run budget: spent ${worst / 2:.4f} of ${worst:.4f}; "
            f"the next call may cost up to ${worst:.4f}"
        ),
    )


async def test_without_a_store_a_budgeted_tenant_is_not_held_to_its_budget() -> None:
    """Without a capacity store (none configured) a tenant's daily budget cannot be kept, and
    a call of a budgeted tenant is admitted with no reservation to settle."""
    budgeted = gate(tenant_budget={"acme": 5.0}.get, tenant_budgets_on=True)
    admission = await budgeted.admit(call("hi", tenant="acme"), [{"role": "user", "content": "hi"}])
    assert admission == CallAdmission("go")


async def test_without_a_store_every_cost_counts_in_the_metrics() -> None:
    """Without a capacity store, settling a call reports its cost as counted now (the metrics
    are its only record), whatever it held or cost."""
    free = gate()
    done = Settlement(used=5, called=True, signal=ProviderSignal(), cost_usd=0.01)
    assert await free.settle(CallAdmission("go"), call("hi"), done) is True
    assert await free.settle_spend(None, call("hi"), 0.01) is True
    assert await free.settle_spend(None, call("hi"), None) is True


def test_a_calls_key_names_its_run_chain_and_attempt() -> None:
    """A call's key (its Idempotency-Key, its batch item's name, what its spend is settled
    once by) is the workflow id, joined by the chain's first run id when the run has one,
    then the activity and the attempt: a workflow id reused by a new chain gets new keys."""
    assert call_key(call("hi", workflow_id="doc-1")) == "doc-1:invoke_llm:1"
    chained = call("hi", workflow_id="doc-1", chain_id="first-run", attempt=3)
    assert call_key(chained) == "doc-1/first-run:invoke_llm:3"


def test_spend_is_counted_in_the_utc_day_whatever_the_hosts_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The day a tenant's spend is counted in is the UTC day on a worker in any time zone: at
    any hour one of UTC+14 and UTC-12 is on another date than UTC."""
    try:
        for zone in ("<+14>-14", "<-12>+12"):
            monkeypatch.setenv("TZ", zone)
            time.tzset()
            assert today() == datetime.now(UTC).date()
    finally:
        monkeypatch.undo()
        time.tzset()


async def test_the_simulators_rate_limit_answers_429_with_the_providers_headers() -> None:
    """With --tpm 150 the first call is admitted with x-ratelimit headers, the next one that
    does not fit gets 429 rate_limit_exceeded with Retry-After and retry-after-ms, which the
    activity turns into a retryable LlmRateLimited with that delay."""
    async with running_simulator(tpm=150) as root:
        client = AsyncOpenAI(base_url=f"{root}/v1", api_key="sim", max_retries=0)
        raw = await client.chat.completions.with_raw_response.create(
            model="sim-large", messages=[{"role": "user", "content": "one two three"}]
        )
        assert raw.headers["x-ratelimit-limit-tokens"] == "150"
        assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 150
        assert raw.headers["x-ratelimit-reset-tokens"].endswith(("ms", "s"))
        activities = LlmActivities(client, InputLoader(), 10)
        with pytest.raises(ApplicationError) as limited:
            await ActivityEnvironment().run(activities.invoke_llm, call("too long " * 40))
        assert limited.value.type == errors.LLM_RATE_LIMITED
        assert limited.value.next_retry_delay is not None
        assert limited.value.next_retry_delay.total_seconds() > 0
        await client.close()


async def test_a_prompt_the_model_can_never_admit_fails_for_good(llm: AsyncOpenAI) -> None:
    """A call whose prompt estimate plus reply limit is more than the model's tokens per
    minute (LLM_RATE_LIMITS) fails at once with the permanent LlmPromptTooLarge, one line that
    says the estimate and the limit, without a call; a call that fits is made."""
    limited = gate(rate_limits={"sim-large": RateLimit(tpm=1000)})
    recorded = Recorded(llm, capture=False, gate=limited)
    with pytest.raises(ApplicationError) as too_large:
        await ActivityEnvironment().run(recorded.activities.invoke_llm, call("word " * 3000))
    assert too_large.value.type == "LlmPromptTooLarge"
    assert too_large.value.non_retryable
    assert "\n" not in too_large.value.message
    estimate = prompt_tokens(build_messages(call("word " * 3000), None)).estimate
    assert too_large.value.message == (
        f"the prompt is estimated at {estimate} tokens; with the reply limit of 100 "
        f"(LLM_MAX_OUTPUT_TOKENS) the call needs {estimate + 100}, more than the 1000 tokens "
        "per minute sim-large allows (LLM_RATE_LIMITS): it can never be made"
    )
    assert recorded.spans.get_finished_spans() == ()
    fits = await ActivityEnvironment().run(recorded.activities.invoke_llm, call("a short one"))
    assert fits.outcome == "answered"
    # The reply limit counts: a prompt that fits on its own, but not with its reply, fails.
    short = prompt_tokens(build_messages(call("a short one"), None)).estimate
    tight = Recorded(
        llm, capture=False, gate=gate(rate_limits={"sim-large": RateLimit(tpm=short + 99)})
    )
    with pytest.raises(ApplicationError) as one_short:
        await ActivityEnvironment().run(tight.activities.invoke_llm, call("a short one"))
    assert one_short.value.type == errors.LLM_PROMPT_TOO_LARGE
    just = Recorded(
        llm, capture=False, gate=gate(rate_limits={"sim-large": RateLimit(tpm=short + 100)})
    )
    answered = await ActivityEnvironment().run(just.activities.invoke_llm, call("a short one"))
    assert answered.outcome == "answered"


async def test_a_budgeted_call_is_never_made_while_the_store_is_down(llm: AsyncOpenAI) -> None:
    """With the capacity store down, a call of a tenant with a daily budget fails with the
    retryable BudgetStoreUnavailable and is not made (it would be unmetered); with tenant
    budgets off, a call goes ahead without the shared rate limit (fail open)."""
    store = unreachable_store(lease=timedelta(seconds=3))
    limits = {"sim-large": RateLimit(tpm=100_000)}
    try:
        budgeted = Recorded(
            llm,
            capture=False,
            gate=CallGate(
                store,
                base_url="http://sim/v1",
                rate_limits=limits,
                prices=DEFAULT_PRICE_TABLE,
                tenant_budget={"acme": 5.0}.get,
                tenant_budgets_on=True,
                max_output_tokens=100,
            ),
        )
        with pytest.raises(ApplicationError) as down:
            await ActivityEnvironment().run(
                budgeted.activities.invoke_llm, call("metered please", tenant="acme")
            )
        assert down.value.type == "BudgetStoreUnavailable"
        assert not down.value.non_retryable
        assert "no call is made unmetered" in down.value.message
        assert budgeted.spans.get_finished_spans() == ()

        open_gate = CallGate(
            store,
            base_url="http://sim/v1",
            rate_limits=limits,
            prices=DEFAULT_PRICE_TABLE,
            tenant_budget=lambda tenant: None,
            max_output_tokens=100,
        )
        unbudgeted = Recorded(llm, capture=False, gate=open_gate)
        result = await ActivityEnvironment().run(
            unbudgeted.activities.invoke_llm, call("no budgets here", tenant="globex")
        )
        assert result.outcome == "answered"
    finally:
        await store.close()


async def test_with_the_store_down_calls_go_ahead_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the capacity store down and no tenant budgets, a call is made without the shared
    rate limit (fail open): the worker logs why and counts each failed store operation
    (aiorch_capacity_store_errors), and a provider's 429 is still the retryable LlmRateLimited
    with the provider's delay (the run's retry_llm wait)."""
    store = unreachable_store(lease=timedelta(seconds=3))
    buffer = MetricBuffer(10_000)
    environment = ActivityEnvironment()
    environment.metric_meter = Runtime(telemetry=TelemetryConfig(metrics=buffer)).metric_meter
    try:
        async with running_simulator(tpm=150) as root:
            client = AsyncOpenAI(base_url=f"{root}/v1", api_key="sim", max_retries=0)
            open_gate = CallGate(
                store,
                base_url=f"{root}/v1",
                rate_limits={"sim-large": RateLimit(tpm=100_000)},
                prices=DEFAULT_PRICE_TABLE,
                tenant_budget=lambda tenant: None,
                max_output_tokens=10,
            )
            activities = LlmActivities(client, InputLoader(), 10, gate=open_gate)
            with caplog.at_level(logging.WARNING, logger="activities.capacity"):
                answered = await environment.run(activities.invoke_llm, call("one two"))
                with pytest.raises(ApplicationError) as limited:
                    await environment.run(activities.invoke_llm, call("too long " * 40))
            await client.close()
    finally:
        await store.close()
    assert answered.outcome == "answered"
    assert limited.value.type == errors.LLM_RATE_LIMITED and not limited.value.non_retryable
    assert limited.value.next_retry_delay is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and all(line.startswith("capacity store: ") for line in warnings), warnings
    admissions = [line for line in warnings if line.endswith("; calling without the shared limit")]
    assert len(admissions) == 2  # one for each call
    counted = [u for u in buffer.retrieve_updates() if u.metric.name == METRIC_STORE_ERRORS]
    assert {u.metric.description for u in counted} == {"Capacity store operations that failed"}
    assert sum(u.value for u in counted) == len(warnings)  # each failed operation, once


async def test_with_tenant_budgets_on_a_tenant_without_one_is_not_called(
    llm: AsyncOpenAI,
) -> None:
    """A call planned for a tenant with no daily budget while tenant budgets are on (a run
    planned before they were) answers over_budget naming the tenant, without a call."""
    strict = gate(tenant_budget={"acme": 5.0}.get, tenant_budgets_on=True)
    recorded = Recorded(llm, capture=False, gate=strict)
    over = await ActivityEnvironment().run(
        recorded.activities.invoke_llm, call("spend please", tenant="made-up")
    )
    assert over.outcome == "over_budget"
    assert over.budget is not None
    assert "tenant 'made-up' has no daily budget" in over.budget
    assert recorded.spans.get_finished_spans() == ()


async def test_a_flood_of_tenant_names_adds_no_spend_label(llm: AsyncOpenAI) -> None:
    """The spend metric (aiorch_spend_usd) labels a call with its tenant only when the tenant
    has a budget of its own; 30 other names, as requests may bring, all share the label
    ``other``, so they cannot grow the metric's series without bound."""
    buffer = MetricBuffer(10_000)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    environment = ActivityEnvironment()
    environment.metric_meter = runtime.metric_meter
    activities = LlmActivities(
        llm,
        InputLoader(),
        10,
        prices=DEFAULT_PRICE_TABLE,
        gate=gate(),
        budgeted_tenants=frozenset({"acme"}),
    )
    for n in range(30):
        await environment.run(activities.invoke_llm, call(f"flood {n}", tenant=f"flood-{n}"))
    await environment.run(activities.invoke_llm, call("budgeted", tenant="acme"))
    spent = [u for u in buffer.retrieve_updates() if u.metric.name == METRIC_SPEND]
    assert {update.attributes["tenant"] for update in spent} == {"other", "acme"}
    assert {update.metric.description for update in spent} == {
        "Cost of each LLM call by tenant (sum = spend), from LLM_PRICE_TABLE"
    }
