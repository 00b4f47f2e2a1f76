"""The result cache in the fast tier: ``invoke_llm`` against the LLM simulator, keeping replies
in the real capacity store (Valkey in memory, tests/support/valkey.py; attacks on it:
tests/security/test_result_cache.py). A reply is kept per tenant and for
``LLM_RESULT_CACHE_TTL_S`` only; a hit reaches no model and costs nothing."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from datetime import timedelta

import aiohttp
import pytest
import pytest_asyncio
import redis.asyncio as redis
from openai import AsyncOpenAI
from temporalio.testing import ActivityEnvironment

from activities.input_loader import InputLoader
from activities.llm import LlmActivities
from aiorch.devstack.processes import free_port
from aiorch_runtime.config import DEFAULT_PRICE_TABLE
from aiorch_runtime.result_cache import ResultCache, cache_key
from tests.activities.llm_calls import call
from workflows.payloads import LlmCallResult, TokenUsage

TTL = timedelta(minutes=5)
QUESTION = "What did the board decide about the acquisition?"


@pytest.fixture
def cache(valkey_client: redis.Redis) -> ResultCache:
    return ResultCache(valkey_client, ttl=TTL)


async def chat_requests(sim_url: str) -> int:
    """How many chat completions the simulator has answered so far."""
    async with aiohttp.ClientSession() as session, session.get(f"{sim_url}/_sim/requests") as got:
        log = await got.json()
    return sum(1 for entry in log if entry["path"] == "chat")


@pytest_asyncio.fixture
async def llm(sim_url: str, cache: ResultCache) -> AsyncIterator[LlmActivities]:
    client = AsyncOpenAI(base_url=f"{sim_url}/v1", api_key="sim", max_retries=0, timeout=10)
    try:
        yield LlmActivities(
            client, InputLoader(), timeout_s=10, prices=DEFAULT_PRICE_TABLE, results=cache
        )
    finally:
        await client.close()


async def ask(llm: LlmActivities, tenant: str, question: str = QUESTION) -> LlmCallResult:
    asked = call(question, tenant=tenant, result_cache=True)
    return await ActivityEnvironment().run(llm.invoke_llm, asked)


async def kept_keys(store: redis.Redis) -> list[str]:
    """The keys the store holds, each without its call digest."""
    return sorted([key.decode().rsplit(":", 1)[0] async for key in store.scan_iter()])


async def test_a_kept_reply_lives_for_the_ttl_and_no_longer(
    valkey_client: redis.Redis, cache: ResultCache
) -> None:
    """A kept reply is answered, and the store keeps it for the configured TTL and no longer:
    the key's expiry, read back right after the put, is the TTL, so the store drops it itself
    and the cache never grows without bound."""
    reply = LlmCallResult(model="sim-large", content="kept")
    await cache.put("acme", "d1", reply)
    left_ms = await valkey_client.pttl(cache_key("acme", "d1"))
    ttl_ms = int(TTL.total_seconds() * 1000)
    assert ttl_ms - 5000 < left_ms <= ttl_ms  # a few seconds for a loaded machine, no more
    assert await cache.get("acme", "d1") == reply


async def test_one_tenants_reply_never_answers_another(
    llm: LlmActivities, valkey_client: redis.Redis, sim_url: str
) -> None:
    """acme's reply is kept under acme's name: globex asking the very same question reaches
    the model itself and is kept under its own; each tenant asking again is answered from its
    own reply."""
    before = await chat_requests(sim_url)
    first = await ask(llm, "acme")
    assert await chat_requests(sim_url) == before + 1
    other = await ask(llm, "globex")
    assert not other.cached_reply
    assert await chat_requests(sim_url) == before + 2
    assert await kept_keys(valkey_client) == ["aiorch:rc:acme", "aiorch:rc:globex"]
    again = await ask(llm, "acme")
    assert again.cached_reply and again.content == first.content
    assert await chat_requests(sim_url) == before + 2
    assert cache_key("acme", "d") != cache_key("globex", "d")


async def test_a_hit_reaches_no_model_and_costs_nothing(llm: LlmActivities, sim_url: str) -> None:
    """The first call is priced; the same call again is answered from the cache with no
    tokens and no cost (its run is not charged twice for one reply), and no model call."""
    paid = await ask(llm, "initech", "Summarise the quarterly report.")
    assert paid.cost_usd and paid.cost_usd > 0 and not paid.cached_reply
    before = await chat_requests(sim_url)
    hit = await ask(llm, "initech", "Summarise the quarterly report.")
    assert (hit.cached_reply, hit.cost_usd, hit.usage) == (True, 0.0, TokenUsage())
    assert hit.content == paid.content
    assert await chat_requests(sim_url) == before


@pytest.mark.parametrize("tenant", ["acme:x", "", "a" * 300])
def test_a_name_that_is_no_tenant_has_no_key(tenant: str) -> None:
    """No text that is not a tenant name (one with ``:`` above all) can spell a key, so no
    name reaches another tenant's replies."""
    with pytest.raises(ValueError, match="is not a tenant name"):
        cache_key(tenant, "d")


def test_a_long_name_is_shown_cut_in_its_refusal() -> None:
    """The refusal of a name that is no tenant's shows its first 70 characters only, so a
    long name cannot flood the line that reports it."""
    with pytest.raises(ValueError, match="is not a tenant name") as refused:
        cache_key("a" * 300, "d")
    assert str(refused.value) == f"{'a' * 70!r} is not a tenant name"


async def test_a_store_out_of_reach_is_a_miss_and_the_operator_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the store out of reach a lookup is a miss and a reply is not kept, without
    failing the call; each is logged as a warning that names the error, the store's address
    and what happens instead (the call is made, the reply not kept)."""
    port = free_port()
    unreachable = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    cache = ResultCache(unreachable, ttl=TTL)
    try:
        with caplog.at_level(logging.WARNING, logger="aiorch_runtime.result_cache"):
            assert await cache.get("acme", "d1") is None
            await cache.put("acme", "d1", LlmCallResult(model="sim-large", content="lost"))
    finally:
        await unreachable.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "aiorch_runtime.result_cache"]
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
    looked_up, kept = lines
    assert re.fullmatch(
        rf"result cache: ConnectionError: .*:{port}\b.*; the call is made", looked_up
    )
    assert re.fullmatch(
        rf"result cache: ConnectionError: .*:{port}\b.*; the reply is not kept", kept
    )
