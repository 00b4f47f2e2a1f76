"""The simulator's Files and Batches API and its prompt cache, over real HTTP with the real
openai client: what the batch lane and the cost figures are tested against."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Final

import aiohttp
import openai
import pytest
import pytest_asyncio

from aiorch.devstack.llm_simulator.prompt_cache import BLOCK, MIN_TOKENS

MODEL = "sim-large"
ENDPOINT: Final = "/v1/chat/completions"


@pytest_asyncio.fixture
async def llm(sim_url: str, http: aiohttp.ClientSession) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{sim_url}/v1", api_key="sim", max_retries=0, timeout=10
    ) as client:
        yield client


def line(custom_id: str, question: str) -> str:
    body = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": question},
        ],
        "response_format": {"type": "json_object"},
    }
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body})


async def submit(llm: openai.AsyncOpenAI, lines: list[str], **metadata: str) -> Any:
    data = ("\n".join(lines) + "\n").encode()
    uploaded = await llm.files.create(file=("in.jsonl", data), purpose="batch")
    return await llm.batches.create(
        input_file_id=uploaded.id,
        endpoint=ENDPOINT,
        completion_window="24h",
        metadata=metadata or None,
    )


async def results(llm: openai.AsyncOpenAI, file_id: str | None) -> dict[str, Any]:
    if file_id is None:
        return {}
    content = await llm.files.content(file_id)
    parsed = [json.loads(raw) for raw in content.text.splitlines() if raw]
    return {item["custom_id"]: item for item in parsed}


async def state(http: aiohttp.ClientSession) -> dict[str, Any]:
    async with http.get("/_sim/batches") as response:
        found: dict[str, Any] = await response.json()
        return found


async def test_a_batch_answers_each_line_matched_by_custom_id(llm, http):
    """Uploaded, created (counted as one submission), then completed: 200 answers in the
    output file, the failure a directive asked for in the error file, each found by its
    custom_id (the files are not in input order), with usage."""
    created = await submit(llm, [line("a", "first"), line("b", "[sim:status=503]"), line("c", "x")])
    assert created.status == "in_progress"
    assert (await state(http))["submissions"] == 1
    done = await llm.batches.retrieve(created.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    output = await results(llm, done.output_file_id)
    errors = await results(llm, done.error_file_id)
    assert list(output) == ["c", "a"]
    assert output["a"]["response"]["status_code"] == 200
    body = output["a"]["response"]["body"]
    assert json.loads(body["choices"][0]["message"]["content"])["content"].endswith("first")
    assert body["usage"]["prompt_tokens"] > 0
    assert errors["b"]["response"]["status_code"] == 503


async def test_a_batch_stays_in_progress_until_its_completion_time(llm, http):
    """With a completion time set, a batch is in progress until then, and answers nothing."""
    await http.put("/_sim/batches", json={"completion_s": 0.5})
    created = await submit(llm, [line("a", "slow")])
    assert (await llm.batches.retrieve(created.id)).status == "in_progress"
    await asyncio.sleep(0.6)
    assert (await llm.batches.retrieve(created.id)).status == "completed"


async def test_an_expiring_batch_leaves_the_rest_unfinished(llm, http):
    """expire_after=1: the first line is answered, the batch ends expired, and the rest are in
    the error file with code batch_expired."""
    await http.put("/_sim/batches", json={"completion_s": 0, "expire_after": 1})
    created = await submit(llm, [line("a", "one"), line("b", "two"), line("c", "three")])
    done = await llm.batches.retrieve(created.id)
    assert done.status == "expired"
    assert set(await results(llm, done.output_file_id)) == {"a"}
    errors = await results(llm, done.error_file_id)
    assert {k: v["error"]["code"] for k, v in errors.items()} == {
        "b": "batch_expired",
        "c": "batch_expired",
    }


async def test_a_cancelled_batch_answers_nothing(llm, http):
    """Cancelled before it was due, a batch ends cancelled and makes no call."""
    await http.put("/_sim/batches", json={"completion_s": 30})
    created = await submit(llm, [line("a", "never")])
    cancelled = await llm.batches.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert (await llm.batches.retrieve(created.id)).output_file_id is None
    async with http.get("/_sim/requests") as response:
        assert [r for r in await response.json() if r["path"] == "chat"] == []


async def test_batches_are_listed_newest_first_with_their_metadata(llm, http):
    """The list pages newest first and carries each batch's metadata: how a submission whose
    outcome is unknown finds its batch again."""
    ids = [(await submit(llm, [line("a", f"q{n}")], key=f"k{n}")).id for n in range(3)]
    listed = [batch async for batch in llm.batches.list(limit=2)]
    assert [batch.id for batch in listed] == ids[::-1]
    assert [batch.metadata for batch in listed] == [{"key": "k2"}, {"key": "k1"}, {"key": "k0"}]


async def test_a_slow_create_counts_its_batch_before_it_answers(llm, http):
    """create_delay_ms: the batch exists (and is counted) while the create call still waits,
    as when a worker dies between creating a batch and hearing back."""
    await http.put("/_sim/batches", json={"completion_s": 0, "create_delay_ms": 800})
    pending = asyncio.ensure_future(submit(llm, [line("a", "late")]))
    await asyncio.sleep(0.4)
    assert not pending.done()
    assert (await state(http))["submissions"] == 1
    await pending


async def test_batch_lines_are_logged_with_their_batch_and_custom_id(llm, http):
    """Each line the batch answers is in the request log, with its batch id and custom_id."""
    created = await submit(llm, [line("a", "logged")])
    await llm.batches.retrieve(created.id)
    async with http.get("/_sim/requests") as response:
        chats = [r for r in await response.json() if r["path"] == "chat"]
    assert [(r["batch_id"], r["custom_id"], r["status"]) for r in chats] == [(created.id, "a", 200)]


@pytest.mark.parametrize("words", [MIN_TOKENS + BLOCK * 7 + 5])
async def test_a_seen_prefix_is_reported_as_cached_tokens(llm, http, words):
    """The first prompt with a long prefix caches nothing; the next sharing it reports its
    whole 128-word blocks as cached tokens; a prompt shorter than 1,024 never does; a request's
    prompt_cache_key is logged."""
    prefix = " ".join(f"p{n}" for n in range(words))

    async def ask(question: str, system: str = prefix) -> Any:
        return await llm.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
            extra_body={"prompt_cache_key": "aiorch:test"},
        )

    first, second = await ask("one"), await ask("two")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == (words // BLOCK) * BLOCK
    short = " ".join(f"s{n}" for n in range(MIN_TOKENS - 1))
    await ask("a", short)
    assert (await ask("b", short)).usage.prompt_tokens_details.cached_tokens == 0
    async with http.get("/_sim/requests") as response:
        assert {r["prompt_cache_key"] for r in await response.json()} == {"aiorch:test"}
