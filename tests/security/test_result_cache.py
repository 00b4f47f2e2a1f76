"""The result cache, attacked by an outsider who may only start runs: read another tenant's
model reply by asking the same question under another tenant's name (or none).

A real dev server, a real worker process with the result cache on, the capacity store (a real
Redis) and the LLM simulator, whose log says which runs reached the model.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.simulator import Simulator

pytestmark = pytest.mark.e2e

QUESTION = "What did the board decide about the acquisition?"


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return {**E2E_WORKER_ENV, "LLM_RESULT_CACHE_TTL_S": "3600"}


@pytest.fixture(scope="module")
def stack_options() -> dict[str, Any]:
    return {"with_capacity_store": True}


async def test_one_tenants_cached_reply_never_answers_another(
    stack: LocalStack, client: Client
) -> None:
    """acme asks a question and its reply is kept; globex (and a run naming no tenant) asking
    the very same question each reach the model themselves, never getting acme's reply; acme
    asking again is answered from its own cache. Every kept reply sits under its own tenant's
    key, so no tenant's name can reach another's."""
    simulator = Simulator(stack.addresses.openai_base_url)

    async def ask(tenant: str | None) -> tuple[int, str | None]:
        fields = {"tenant": tenant} if tenant else {}
        handle = await start(client, request(QUESTION, review="never", **fields))
        result = await finished(handle)
        assert result.state == "completed"
        return len(simulator.chat_requests(handle.id)), result.content

    assert (await ask("acme"))[0] == 1
    assert (await ask("globex"))[0] == 1
    assert (await ask(None))[0] == 1
    assert (await ask("acme"))[0] == 0
    assert (await ask("globex"))[0] == 0

    url = stack.addresses.capacity_store_url
    assert url is not None
    store = redis.Redis.from_url(url)
    try:
        keys = sorted([key.decode() async for key in store.scan_iter("aiorch:rc:*")])
    finally:
        await store.aclose()
    assert [key.rsplit(":", 1)[0] for key in keys] == [
        "aiorch:rc:acme",
        "aiorch:rc:default",
        "aiorch:rc:globex",
    ]
    assert len({key.rsplit(":", 1)[1] for key in keys}) == 1  # one question, three tenants


async def test_a_run_can_refuse_the_cache(stack: LocalStack, client: Client) -> None:
    """A request with options.result_cache false reaches the model even though an identical
    call of its tenant is kept."""
    simulator = Simulator(stack.addresses.openai_base_url)
    await finished(await start(client, request("Fresh answer please", tenant="initech")))
    handle = await start(
        client, request("Fresh answer please", tenant="initech", options={"result_cache": False})
    )
    assert (await finished(handle)).state == "completed"
    assert len(simulator.chat_requests(handle.id)) == 1
