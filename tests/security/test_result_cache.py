"""The result cache, attacked by an outsider who may only start runs: read another tenant's
model reply by asking the same question under another tenant's name (or none), or learn from a
hit that another tenant asked it.

The cache is a tenant boundary only where tenants are authenticated: a worker refuses to start
with the cache on and no ``REQUESTER_PUBLIC_KEYS``; with them, a run's tenant is its signing
key's, so naming another tenant fails the run before any lookup.

A real dev server, a real worker process with the result cache on, the capacity store (a real
Redis) and the LLM simulator, whose log says which runs reached the model.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as redis
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from tests.support.builders import new_request_id
from tests.support.live_runs import request, start, status_of
from tests.support.live_stack import E2E_WORKER_ENV, run_script
from tests.support.simulator import Simulator
from workflows import contract, errors
from workflows.payloads import PipelineRequest

pytestmark = pytest.mark.e2e

QUESTION = "What did the board decide about the acquisition?"
ACME = SigningKey.generate("ann")
GLOBEX = SigningKey.generate("gus")
INITECH = SigningKey.generate("ian")
CACHE_ON = {"LLM_RESULT_CACHE_TTL_S": "3600"}


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    keys = ",".join(
        key.requester_entry(tenant)
        for key, tenant in ((ACME, "acme"), (GLOBEX, "globex"), (INITECH, "initech"))
    )
    return {**E2E_WORKER_ENV, **CACHE_ON, "REQUESTER_PUBLIC_KEYS": keys}


@pytest.fixture(scope="module")
def stack_options() -> dict[str, Any]:
    return {"with_capacity_store": True}


def signed(key: SigningKey, message: str, **fields: Any) -> dict[str, Any]:
    """A start signed by ``key``, as its holder's CLI sends it (``REQUESTER_KEY``)."""
    claimed = key.sign_start(
        PipelineRequest.model_validate(request(message, review="never", **fields)),
        workflow_type=contract.WORKFLOW_TYPE,
        namespace="default",
        now=datetime.now(UTC),
    )
    return claimed.model_dump(mode="json", exclude_none=True)


def test_a_worker_with_the_cache_and_no_tenant_keys_does_not_start(stack: LocalStack) -> None:
    """With ``LLM_RESULT_CACHE_TTL_S`` set and no ``REQUESTER_PUBLIC_KEYS`` (where any request
    names any tenant it likes), a worker exits 1 with one line naming both settings."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("REQUESTER_")},
        **stack.addresses.env(),
        **E2E_WORKER_ENV,
        **CACHE_ON,
        "HEALTH_PORT": "0",
        "TEMPORAL_TASK_QUEUE": f"q-{new_request_id()}",
    }
    done = run_script("worker.py", env=env)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("worker: LLM_RESULT_CACHE_TTL_S keeps model replies per tenant")
    assert "set REQUESTER_PUBLIC_KEYS" in line


async def test_one_tenants_cached_reply_never_answers_another(
    stack: LocalStack, client: Client
) -> None:
    """acme asks a question and its reply is kept; globex asking the very same question
    reaches the model itself; each asking again is answered from its own cache. globex's key
    naming tenant acme, and an unsigned start naming acme, fail before any lookup (no hit, no
    model call): a client cannot be another tenant. Every kept reply sits under its own
    tenant's key."""
    simulator = Simulator(stack.addresses.openai_base_url)

    async def ask(key: SigningKey) -> int:
        handle = await start(client, signed(key, QUESTION))
        result = await finished(handle)
        assert result.state == "completed"
        return len(simulator.chat_requests(handle.id))

    async def refused(payload: dict[str, Any], words: str) -> None:
        handle = await start(client, payload)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and errors.INVALID_REQUEST in cause.message
        status = await status_of(handle)
        assert words in (status.last_error or ""), status.last_error
        assert "cached" not in (status.last_error or "")
        assert simulator.chat_requests(handle.id) == []

    assert await ask(ACME) == 1
    assert await ask(GLOBEX) == 1
    await refused(signed(GLOBEX, QUESTION, tenant="acme"), "not the tenant of the key")
    await refused(request(QUESTION, review="never", tenant="acme"), "the start is not signed")
    assert await ask(ACME) == 0
    assert await ask(GLOBEX) == 0

    url = stack.addresses.capacity_store_url
    assert url is not None
    store = redis.Redis.from_url(url)
    try:
        keys = sorted([key.decode() async for key in store.scan_iter("aiorch:rc:*")])
    finally:
        await store.aclose()
    assert [key.rsplit(":", 1)[0] for key in keys] == ["aiorch:rc:acme", "aiorch:rc:globex"]
    assert len({key.rsplit(":", 1)[1] for key in keys}) == 1  # one question, two tenants


async def test_a_run_can_refuse_the_cache(stack: LocalStack, client: Client) -> None:
    """A request with options.result_cache false reaches the model even though an identical
    call of its tenant is kept."""
    simulator = Simulator(stack.addresses.openai_base_url)
    await finished(await start(client, signed(INITECH, "Fresh answer please")))
    handle = await start(
        client, signed(INITECH, "Fresh answer please", options={"result_cache": False})
    )
    assert (await finished(handle)).state == "completed"
    assert len(simulator.chat_requests(handle.id)) == 1
