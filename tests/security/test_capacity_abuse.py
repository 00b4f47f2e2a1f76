"""The fleet's shared model capacity, attacked by an outsider who may only start and terminate
runs: one request must not stall every other call to a rate-limited model.

A real dev server, a real worker process with ``LLM_RATE_LIMITS`` (sim-large: 20,000 tokens a
minute) and a two-second ``CAPACITY_LEASE_S``, and the capacity store (a real Redis), which
the tests read as an operator would. A document the model can never admit fails at once and
queues nothing; a waiting run that is terminated leaves the queue within three leases.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_name
from tests.support.capacity_store import operator_view
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.simulator import Simulator

pytestmark = pytest.mark.e2e

MODEL = "sim-large"
TPM = 20_000
LEASE_S = 2
LIMITS = (TPM, 0)
# 20 MiB, the largest document MAX_INPUT_BYTES lets a run reference.
DOCUMENT_BYTES = 20 * 1024 * 1024
WORKER_ENV = {
    **E2E_WORKER_ENV,
    "LLM_RATE_LIMITS": json.dumps({MODEL: {"tpm": TPM}}),
    "CAPACITY_LEASE_S": str(LEASE_S),
    "LLM_FALLBACK_MODEL": "",
}


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return WORKER_ENV


@pytest.fixture(scope="module")
def stack_options() -> dict[str, Any]:
    return {"with_capacity_store": True}


@pytest_asyncio.fixture
async def store(stack: LocalStack) -> AsyncIterator[CapacityStore]:
    async with operator_view(stack) as capacity:
        yield capacity


def scope(stack: LocalStack) -> str:
    return scope_name(stack.addresses.openai_base_url, MODEL)


async def test_a_document_the_model_can_never_admit_fails_at_once_and_stalls_nobody(
    stack: LocalStack, client: Client, store: CapacityStore
) -> None:
    """A 20 MiB document in an allowed root, against a model limited to 20,000 tokens a
    minute: the run fails within seconds with LlmPromptTooLarge (one line saying the estimate
    and the limit), without a call and without a place in the model's queue; a small run
    started right after completes without waiting for capacity (it used to wait 18,000 s)."""
    document = stack.addresses.input_dir / "huge.txt"
    line = b"The quarterly report, section by section, with every table spelled out.\n"
    document.write_bytes(line * (DOCUMENT_BYTES // len(line)))
    big = await start(client, request(f"file://{document}"))
    result = await asyncio.wait_for(finished(big), timeout=60)
    assert result.state == "failed"
    error = result.history[-1].detail or ""
    assert error.startswith("LlmPromptTooLarge: the prompt is estimated at "), error
    assert f"the {TPM} tokens per minute {MODEL} allows" in error
    assert "\n" not in error
    assert Simulator(stack.addresses.openai_base_url).chat_requests(big.id) == []
    assert big.id not in await store.queued(scope(stack), LIMITS)

    small = await start(client, request("A one-line summary, please"))
    answered = await asyncio.wait_for(finished(small), timeout=60)
    assert answered.state == "completed"
    assert "await_capacity" not in [entry.to_state for entry in answered.history]


async def test_a_terminated_waiters_place_leaves_the_queue_within_three_leases(
    stack: LocalStack, client: Client, store: CapacityStore
) -> None:
    """With the model's tokens spent ten minutes ahead, a run waits in await_capacity with a
    place in the model's queue; once its owner terminates it, the place is gone within three
    leases (6 s), not when its wait of minutes would have ended, so nobody behind it waits for
    a run that will never come back."""
    model = scope(stack)
    await store.settle(model, LIMITS, hold_id="spent-ahead", used=TPM * 10, called=True)
    try:
        waiting = await start(client, request("Wait for your turn"))
        await wait_for_state(waiting, "await_capacity")
        assert waiting.id in await store.queued(model, LIMITS)
        await waiting.terminate("its owner gave up")
        terminated = time.monotonic()
        while waiting.id in await store.queued(model, LIMITS):
            gone_after = time.monotonic() - terminated
            assert gone_after < 3 * LEASE_S + 2, f"still queued {gone_after:.1f}s after"
            await asyncio.sleep(0.2)
    finally:
        await store.settle(model, LIMITS, hold_id="refill", used=-TPM * 20, called=True)
    assert (await store.levels(model, LIMITS))[0] == pytest.approx(TPM, rel=0.01)
