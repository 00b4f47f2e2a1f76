"""The OpenAI-compatible LLM simulator, exercised over real HTTP with the real openai client."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio

from aiorch.devstack.llm_simulator import running_simulator

MODEL = "sim-large"
FALLBACK = "sim-small"


@pytest_asyncio.fixture(scope="module")
async def sim_url() -> AsyncIterator[str]:
    async with running_simulator(port=0, embedding_dim=64) as url:
        yield url


@pytest_asyncio.fixture
async def http(sim_url: str) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=sim_url) as session:
        await session.delete("/_sim/requests")
        await session.delete("/_sim/faults")
        yield session


@pytest_asyncio.fixture
async def llm(sim_url: str, http: aiohttp.ClientSession) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{sim_url}/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        yield client


async def ask(
    llm: openai.AsyncOpenAI, text: str, *, model: str = MODEL, run_id: str | None = None
) -> Any:
    headers = {"X-Run-Id": run_id} if run_id else {}
    return await llm.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], extra_headers=headers
    )


async def request_log(http: aiohttp.ClientSession) -> list[dict[str, Any]]:
    async with http.get("/_sim/requests") as response:
        return list(await response.json())


async def test_default_reply_is_content_json_with_usage(llm):
    """A plain request gets a stop reply whose content is {content, needs_review} JSON."""
    reply = await ask(llm, "Summarise the quarterly report please")

    assert reply.object == "chat.completion"
    assert reply.model == MODEL
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.refusal is None
    answer = json.loads(choice.message.content)
    assert answer == {
        "content": f"Simulated answer ({MODEL}): Summarise the quarterly report please",
        "needs_review": False,
    }
    assert reply.usage.prompt_tokens == 5
    assert reply.usage.completion_tokens == len(choice.message.content.split())
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


async def test_reply_is_deterministic(llm):
    """The same request yields the same content every time."""
    first = await ask(llm, "Same question")
    second = await ask(llm, "Same question")

    assert first.choices[0].message.content == second.choices[0].message.content


async def test_review_directive_sets_needs_review(llm):
    """[sim:review] makes the reply ask for human review."""
    reply = await ask(llm, "Draft a press release [sim:review]")

    assert json.loads(reply.choices[0].message.content)["needs_review"] is True


async def test_directives_are_stripped_from_content(llm):
    """Directive tokens never leak into the echoed content."""
    reply = await ask(llm, "Hello [sim:review] world [sim:delay_ms=1]")

    content = json.loads(reply.choices[0].message.content)["content"]
    assert content == f"Simulated answer ({MODEL}): Hello world"


async def test_reviewer_feedback_changes_the_answer(llm):
    """A 'Reviewer feedback:' line is echoed, so a reedit visibly changes the content."""
    messages: Any = [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "Write a tagline"},
        {"role": "assistant", "content": '{"content": "old", "needs_review": true}'},
        {"role": "user", "content": "Write a tagline\nReviewer feedback: make it shorter"},
    ]
    reply = await llm.chat.completions.create(model=MODEL, messages=messages)

    content = json.loads(reply.choices[0].message.content)["content"]
    assert content.startswith(f"Simulated answer ({MODEL}): Write a tagline")
    assert "make it shorter" in content


async def test_rate_limit_twice_with_retry_after_then_success(llm, http):
    """status=429:times=2:retry_after=2 fails twice with Retry-After: 2, then answers."""
    text = "Classify this [sim:status=429:times=2:retry_after=2]"
    for _ in range(2):
        with pytest.raises(openai.RateLimitError) as caught:
            await ask(llm, text, run_id="run-429")
        assert caught.value.response.headers["retry-after"] == "2"
        assert caught.value.code == "rate_limit_exceeded"
        assert caught.value.type == "rate_limit_error"

    reply = await ask(llm, text, run_id="run-429")

    assert json.loads(reply.choices[0].message.content)["needs_review"] is False
    log = await request_log(http)
    assert [entry["status"] for entry in log] == [429, 429, 200]
    assert [entry["fault"] for entry in log] == ["status", "status", None]


async def test_retry_after_ms_sets_its_own_header(http):
    """retry_after_ms=1500 sends retry-after-ms and no Retry-After."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x [sim:status=429:retry_after_ms=1500]"}],
    }
    async with http.post("/v1/chat/completions", json=body) as response:
        assert response.status == 429
        assert response.headers["retry-after-ms"] == "1500"
        assert "Retry-After" not in response.headers
        error = (await response.json())["error"]
    assert error["type"] == "rate_limit_error"
    assert error["param"] is None
    assert error["message"]


async def test_fault_counters_are_per_run_id(llm):
    """Two runs with the same directive each see their own first failure."""
    text = "Translate [sim:status=503:times=1]"
    for run_id in ("run-a", "run-b"):
        with pytest.raises(openai.InternalServerError):
            await ask(llm, text, run_id=run_id)
    for run_id in ("run-a", "run-b"):
        await ask(llm, text, run_id=run_id)


async def test_model_restricted_fault_lets_fallback_through(llm, http):
    """A fault limited to the primary model does not touch the fallback model."""
    text = f"Answer [sim:status=503:model={MODEL}]"
    with pytest.raises(openai.InternalServerError):
        await ask(llm, text, run_id="run-fallback")

    reply = await ask(llm, text, model=FALLBACK, run_id="run-fallback")

    assert reply.model == FALLBACK
    assert FALLBACK in json.loads(reply.choices[0].message.content)["content"]
    log = await request_log(http)
    assert [(e["model"], e["status"]) for e in log] == [(MODEL, 503), (FALLBACK, 200)]


async def test_insufficient_quota_code(llm):
    """code=insufficient_quota answers 429 with that code and error type."""
    with pytest.raises(openai.RateLimitError) as caught:
        await ask(llm, "Go [sim:status=429:code=insufficient_quota]")

    assert caught.value.code == "insufficient_quota"
    assert caught.value.type == "insufficient_quota"


@pytest.mark.parametrize(
    ("status", "error_class", "error_type"),
    [
        (500, openai.InternalServerError, "server_error"),
        (502, openai.InternalServerError, "server_error"),
        (400, openai.BadRequestError, "invalid_request_error"),
        (401, openai.AuthenticationError, "authentication_error"),
        (403, openai.PermissionDeniedError, "permission_error"),
        (404, openai.NotFoundError, "invalid_request_error"),
    ],
)
async def test_status_directive_maps_to_openai_errors(llm, status, error_class, error_type):
    """Any status directive reaches the client as the matching openai error class and type."""
    with pytest.raises(error_class) as caught:
        await ask(llm, f"Go [sim:status={status}]")

    assert caught.value.status_code == status
    assert caught.value.type == error_type


async def test_malformed_reply_is_not_json(llm):
    """[sim:malformed] answers 200 with content that does not parse as JSON."""
    reply = await ask(llm, "Go [sim:malformed]")

    content = reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


async def test_fenced_reply_wraps_valid_json(llm):
    """[sim:fenced] wraps the expected JSON in a Markdown json fence."""
    reply = await ask(llm, "Go [sim:fenced]")

    content = reply.choices[0].message.content
    assert content.startswith("```json\n")
    assert content.endswith("\n```")
    assert set(json.loads(content.removeprefix("```json\n").removesuffix("\n```"))) == {
        "content",
        "needs_review",
    }


async def test_badjson_reply_has_the_wrong_shape(llm):
    """[sim:badjson] is valid JSON without the content/needs_review fields."""
    reply = await ask(llm, "Go [sim:badjson]")

    assert set(json.loads(reply.choices[0].message.content)) == {"answer"}


async def test_truncated_reply_stops_for_length_mid_json(llm):
    """[sim:truncated] ends with finish_reason length and JSON cut short."""
    reply = await ask(llm, "Go [sim:truncated]")

    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.content.startswith('{"content": ')
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.choices[0].message.content)


async def test_refusal_sets_refusal_and_no_content(llm):
    """[sim:refusal] fills message.refusal and leaves content null."""
    reply = await ask(llm, "Go [sim:refusal]")

    assert reply.choices[0].message.content is None
    assert reply.choices[0].message.refusal


async def test_content_filter_finish_reason(llm):
    """[sim:content_filter] stops with finish_reason content_filter and no content."""
    reply = await ask(llm, "Go [sim:content_filter]")

    assert reply.choices[0].finish_reason == "content_filter"
    assert reply.choices[0].message.content is None


async def test_directives_apply_in_order_with_their_own_counts(llm, http):
    """status x2 then malformed x1: a call counts only against the directives it reaches."""
    text = "Go [sim:status=429:times=2][sim:malformed:times=1]"
    for _ in range(2):
        with pytest.raises(openai.RateLimitError):
            await ask(llm, text, run_id="run-order")
    malformed = await ask(llm, text, run_id="run-order")
    healthy = await ask(llm, text, run_id="run-order")

    with pytest.raises(json.JSONDecodeError):
        json.loads(malformed.choices[0].message.content)
    assert json.loads(healthy.choices[0].message.content)["needs_review"] is False
    assert [e["fault"] for e in await request_log(http)] == ["status", "status", "malformed", None]


async def test_hang_does_not_block_a_concurrent_request(llm):
    """hang=2 delays only its own reply; a concurrent request is answered while it hangs."""
    started = time.monotonic()
    hanging = asyncio.create_task(ask(llm, "Slow [sim:hang=2]"))
    await ask(llm, "Fast")
    fast_elapsed = time.monotonic() - started
    assert not hanging.done()

    await hanging

    assert fast_elapsed < 2
    assert time.monotonic() - started >= 2


async def test_hang_forever_until_client_times_out(llm, http):
    """[sim:hang] never answers; the client times out and the log shows it unanswered."""
    with pytest.raises(openai.APITimeoutError):
        await llm.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Stuck [sim:hang:times=1]"}],
            timeout=0.3,
        )
    log = await request_log(http)

    assert (log[0]["fault"], log[0]["status"]) == ("hang", None)
    await ask(llm, "Stuck [sim:hang:times=1]")


async def test_embeddings_are_deterministic_normalised_and_sized(llm):
    """Embeddings (base64 and float formats) depend only on the text, are unit length, 64-d."""
    first = await llm.embeddings.create(model="sim-embed", input=["alpha", "beta"])
    again = await llm.embeddings.create(model="sim-embed", input="alpha", encoding_format="float")

    alpha, beta = (item.embedding for item in first.data)
    assert [item.index for item in first.data] == [0, 1]
    assert len(alpha) == 64
    assert again.data[0].embedding == pytest.approx(alpha, abs=1e-6)
    assert alpha != beta
    assert math.sqrt(sum(v * v for v in beta)) == pytest.approx(1.0, abs=1e-5)
    assert first.usage.prompt_tokens == 2


async def test_embeddings_fault_targets_the_embeddings_path(llm):
    """path=embeddings applies a status directive to embeddings, never to chat."""
    text = "vector me [sim:status=503:times=1:path=embeddings]"
    await ask(llm, text, run_id="run-emb")
    with pytest.raises(openai.InternalServerError):
        await llm.embeddings.create(
            model="sim-embed", input=text, extra_headers={"X-Run-Id": "run-emb"}
        )

    result = await llm.embeddings.create(
        model="sim-embed", input=text, extra_headers={"X-Run-Id": "run-emb"}
    )

    assert len(result.data[0].embedding) == 64


async def test_global_fault_fails_everything_until_cleared(llm, http):
    """A global fault fails chat and embeddings alike until DELETE /_sim/faults."""
    async with http.post("/_sim/faults", json={"status": 503, "retry_after": 1}) as response:
        assert response.status == 200
    with pytest.raises(openai.InternalServerError) as caught:
        await ask(llm, "Anything")
    assert caught.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.InternalServerError):
        await llm.embeddings.create(model="sim-embed", input="anything")
    async with http.get("/_sim/faults") as response:
        assert [(f["status"], f["hits"]) for f in await response.json()] == [(503, 2)]

    await http.delete("/_sim/faults")

    await ask(llm, "Anything")
    assert [e["fault"] for e in await request_log(http)] == ["global_status"] * 2 + [None]


async def test_global_fault_with_times_and_model(llm, http):
    """A global fault honours times and model: it fails the first primary call only."""
    fault = {"status": 429, "model": MODEL, "path": "chat", "times": 1, "code": None}
    await http.post("/_sim/faults", json=fault)

    await ask(llm, "x", model=FALLBACK)
    with pytest.raises(openai.RateLimitError):
        await ask(llm, "x")
    await ask(llm, "x")


async def test_invalid_global_fault_is_rejected(http):
    """A global fault with an unknown field is refused with 400."""
    async with http.post("/_sim/faults", json={"status": 503, "tims": 2}) as response:
        assert response.status == 400


async def test_request_log_records_headers_and_parameters(llm, http):
    """The log keeps idempotency key, run id, temperature, response_format and messages."""
    messages: Any = [{"role": "user", "content": "Log me"}]
    await llm.chat.completions.create(
        model=MODEL,
        messages=messages,
        temperature=0.2,
        response_format={"type": "json_object"},
        extra_headers={"Idempotency-Key": "idem-1", "X-Run-Id": "run-log"},
    )

    (entry,) = await request_log(http)
    assert entry["path"] == "chat"
    assert entry["model"] == MODEL
    assert entry["idempotency_key"] == "idem-1"
    assert entry["run_id"] == "run-log"
    assert entry["temperature"] == 0.2
    assert entry["response_format"] == {"type": "json_object"}
    assert entry["messages"] == messages
    assert (entry["status"], entry["fault"]) == (200, None)
    assert entry["seq"] >= 1
    assert entry["at"] == pytest.approx(time.time(), abs=5)


async def test_clearing_the_log_resets_counters(llm, http):
    """DELETE /_sim/requests empties the log and restarts every times counter."""
    text = "Once [sim:status=500:times=1]"
    with pytest.raises(openai.InternalServerError):
        await ask(llm, text, run_id="run-reset")

    await http.delete("/_sim/requests")

    assert await request_log(http) == []
    with pytest.raises(openai.InternalServerError):
        await ask(llm, text, run_id="run-reset")


@pytest.mark.parametrize(
    "directive",
    [
        "[sim:reveiw]",
        "[sim:status=429:tims=2]",
        "[sim:status]",
        "[sim:hang=soon]",
        "[sim:review=1]",
    ],
)
async def test_invalid_directive_is_a_loud_400(llm, http, directive):
    """A typo in a directive is answered with 400 naming the directive, and logged."""
    with pytest.raises(openai.BadRequestError) as caught:
        await ask(llm, f"Go {directive}")

    assert directive in caught.value.message
    assert caught.value.code == "invalid_directive"
    (entry,) = await request_log(http)
    assert (entry["status"], entry["fault"]) == (400, "invalid_directive")


async def test_models_lists_defaults_and_models_seen(llm):
    """GET /v1/models lists the default models and every model requested so far."""
    await ask(llm, "hi", model="custom-model")

    ids = [model.id async for model in llm.models.list()]

    assert {"sim-large", "custom-model"} <= set(ids)


async def test_healthz(http):
    """GET /healthz answers 200 {"ok": true}."""
    async with http.get("/healthz") as response:
        assert response.status == 200
        assert await response.json() == {"ok": True}


async def test_global_delay_slows_matching_calls_then_lets_them_through(llm, http):
    """A global fault with only delay_ms slows matching calls (here: the first embeddings call)
    and then answers normally; a delay_ms alone needs no status, an empty fault is refused."""
    fault = {"delay_ms": 400, "path": "embeddings", "times": 1}
    async with http.post("/_sim/faults", json=fault) as response:
        assert response.status == 200
    async with http.post("/_sim/faults", json={"path": "chat"}) as response:
        assert response.status == 400

    started = time.monotonic()
    await llm.embeddings.create(model="sim-embed", input="slow one")
    slow = time.monotonic() - started
    started = time.monotonic()
    await llm.embeddings.create(model="sim-embed", input="fast one")
    fast = time.monotonic() - started
    await ask(llm, "chat is not delayed")

    assert slow >= 0.4 > fast
    log = await request_log(http)
    assert [(e["path"], e["fault"], e["status"]) for e in log] == [
        ("embeddings", "global_delay", 200),
        ("embeddings", None, 200),
        ("chat", None, 200),
    ]


async def test_a_schema_s_enum_takes_the_choice_the_text_mentions_last(llm):
    """Asked for an object whose property has an ``enum`` and no ``Label: value`` line gives
    it, the simulator answers the choice the user's text mentions last (a prompt lists the
    choices, then quotes the ticket), or null when it mentions none."""
    schema = {
        "type": "object",
        "properties": {"category": {"type": "string", "enum": ["urgent", "billing", "other"]}},
    }
    system = "Classify.\nJSON Schema: " + json.dumps(schema)
    prompt = "One of: urgent, billing or other.\nTicket: "

    async def category(text: str) -> Any:
        reply = await llm.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
        )
        return json.loads(reply.choices[0].message.content)["category"]

    assert await category(prompt + "Our site is down, this is URGENT.") == "urgent"
    assert await category(prompt + "A billing question.") == "billing"
    assert await category(prompt + "Hello there.") == "other"
    assert await category("Hello there.") is None
    assert await category(prompt + "urgent\nCategory: billing") == "billing"
