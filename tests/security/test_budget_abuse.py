"""Tenant budgets, attacked by an outsider who may only start runs: spend past a budget with
concurrent runs, escape it with a tenant name that spells one of the store's keys or with a
made-up one, or slip calls through while the store is down.

A real dev server, a real worker process with tenant budgets and ``BUDGET_POLICY=fail`` (a run
its budget refuses is dead-lettered at once), the capacity store (a real Redis) and the LLM
simulator. What was spent is measured twice, independently: from the store, and from the
simulator's log of answered calls priced at sim-large's rates.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch_runtime.capacity import CapacityStore
from tests.support.capacity_store import operator_view
from tests.support.live_runs import request, start
from tests.support.live_stack import E2E_WORKER_ENV, starter
from tests.support.simulator import Simulator
from workflows.payloads import PipelineResult

pytestmark = pytest.mark.e2e

# sim-large's price (LLM_PRICE_TABLE's default), USD per token.
PROMPT_USD, COMPLETION_USD = 0.005 / 1000, 0.015 / 1000
# A message of 1,000 two-byte words: the simulator bills ~1,060 tokens (it counts words), about
# $0.006; the worker's worst case counts its bytes (~2,400 tokens) and the 100-token reply
# limit, about $0.013. So a budget of $0.016 admits one run and refuses the next, and $0.04
# is worth about five runs.
WORDS = " a" * 1000
KEYLIKE_BUDGET, CROWD_BUDGET = 0.016, 0.04
KEYLIKE = ("tenants", "usd", "res", "chg")
WORKER_ENV = {
    **E2E_WORKER_ENV,
    "LLM_FALLBACK_MODEL": "",
    "LLM_MAX_OUTPUT_TOKENS": "100",
    "BUDGET_POLICY": "fail",
    "TENANT_BUDGETS_USD": json.dumps(
        {"acme": 1.0, "crowd": CROWD_BUDGET} | dict.fromkeys(KEYLIKE, KEYLIKE_BUDGET)
    ),
    "TENANT_BUDGET_DEFAULT_USD": "1",
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


def billed(simulator: Simulator, run_ids: Sequence[str]) -> tuple[int, float]:
    """The answered chat calls of ``run_ids`` and what they cost at sim-large's prices."""
    answered = [
        row for run_id in run_ids for row in simulator.chat_requests(run_id) if row["status"] == 200
    ]
    cost = sum(
        row["usage"]["prompt_tokens"] * PROMPT_USD
        + row["usage"]["completion_tokens"] * COMPLETION_USD
        for row in answered
    )
    return len(answered), cost


def today() -> Any:
    return datetime.now(UTC).date()


async def test_fifty_concurrent_runs_never_spend_past_the_budget(
    stack: LocalStack, client: Client, store: CapacityStore
) -> None:
    """50 runs of one tenant started at once, each call taking a second, against a daily budget
    worth about five runs: some complete, the rest are dead-lettered with BudgetExceeded, and
    the tenant spent no more than its budget (0 overshoot), by the store's count and by the
    simulator's (which agree). Before, every run read "nothing spent yet" and all 50 called."""
    handles = await asyncio.gather(
        *(
            start(client, request(f"Run {n} [sim:delay_ms=1000]{WORDS}", tenant="crowd"))
            for n in range(50)
        )
    )
    results: list[PipelineResult] = await asyncio.wait_for(
        asyncio.gather(*(finished(handle) for handle in handles)), timeout=400
    )
    states = [result.state for result in results]
    completed = states.count("completed")
    assert completed >= 1
    assert completed + states.count("dead_letter") == 50, states
    refused = [r for r in results if r.state == "dead_letter"]
    assert all((r.history[-1].detail or "").startswith("BudgetExceeded: tenant") for r in refused)
    calls, cost = billed(Simulator(stack.addresses.openai_base_url), [h.id for h in handles])
    spent = await store.spend("crowd", today())
    print(f"\nbudget figures: {completed}/50 completed, {calls} calls, ${spent:.4f} spent")
    assert calls == completed
    assert spent == pytest.approx(cost, abs=1e-9)
    assert spent <= CROWD_BUDGET, (spent, CROWD_BUDGET)


@pytest.mark.parametrize("tenant", KEYLIKE)
async def test_a_tenant_named_like_a_store_key_is_metered_like_any_other(
    stack: LocalStack, client: Client, store: CapacityStore, tenant: str
) -> None:
    """A tenant named ``tenants`` (the day's list of tenants used to share its key) or like a
    part of a tenant's spend: its first run completes and is counted, its second, whose worst
    case would cross the budget, is dead-lettered without a call, and `starter.py spend`
    reports its spend against its budget. Before, ``tenants`` read and wrote a key of the
    wrong type, every call went ahead unmetered and `spend` failed."""
    await finished(await start(client, request(f"Another tenant first{WORDS}", tenant="acme")))
    # Each tenant's own words first: the simulator's prompt cache would bill a prompt another
    # case sent before at the cached rate, and the second run would fit the budget.
    first = await finished(await start(client, request(f"{tenant} first{WORDS}", tenant=tenant)))
    assert first.state == "completed"
    second_handle = await start(client, request(f"{tenant} second{WORDS}", tenant=tenant))
    second = await finished(second_handle)
    assert second.state == "dead_letter"
    assert (second.history[-1].detail or "").startswith(f"BudgetExceeded: tenant {tenant!r}")
    assert Simulator(stack.addresses.openai_base_url).chat_requests(second_handle.id) == []
    assert 0 < await store.spend(tenant, today()) <= KEYLIKE_BUDGET

    report = starter(stack, "spend", "--json", env=stack.worker_env)
    assert report.returncode == 0, report.stderr
    rows = {row["tenant"]: row for row in map(json.loads, report.stdout.splitlines())}
    assert rows[tenant]["budget_usd"] == KEYLIKE_BUDGET
    assert 0 < rows[tenant]["spent_usd"] <= KEYLIKE_BUDGET


async def test_a_made_up_tenant_is_refused_when_budgets_are_on(
    stack: LocalStack, client: Client
) -> None:
    """With tenant budgets on, a run naming a tenant that has no budget fails at once, at plan
    time, with one InvalidRequest line naming the tenant, and never reaches the model (it used
    to get a fresh default budget per made-up name); a run naming none spends the default
    pool."""
    handle = await start(client, request("Free money please", tenant="made-up-4711"))
    result = await asyncio.wait_for(finished(handle), timeout=30)
    assert result.state == "failed"
    error = result.history[-1].detail or ""
    assert error.startswith("InvalidRequest: tenant 'made-up-4711' has no daily budget"), error
    assert "\n" not in error
    assert Simulator(stack.addresses.openai_base_url).chat_requests(handle.id) == []
    pooled = await finished(await start(client, request("No tenant named")))
    assert pooled.state == "completed"


async def test_no_budgeted_call_goes_through_while_the_store_is_down(
    stack: LocalStack, client: Client, store: CapacityStore
) -> None:
    """With the capacity store down, a budgeted tenant's run makes no call: each attempt fails
    with BudgetStoreUnavailable until the run is dead-lettered; with the store back,
    `dlq redrive` completes it and its cost is counted. Before, calls went ahead unmetered."""
    stack.stop_capacity_store()
    try:
        handle = await start(client, request("While the store is down", tenant="acme"))
        result = await asyncio.wait_for(finished(handle), timeout=120)
    finally:
        stack.start_capacity_store()
    assert result.state == "dead_letter"
    assert result.history[-1].detail == "gave up after 5 attempts"
    errors = [entry.detail or "" for entry in result.history if entry.event == "retryable_error"]
    assert errors and all(e.startswith("BudgetStoreUnavailable: tenant 'acme'") for e in errors)
    assert Simulator(stack.addresses.openai_base_url).chat_requests(handle.id) == []

    redriven = starter(stack, "dlq", "redrive", handle.id, env=stack.worker_env)
    assert redriven.returncode == 0, redriven.stdout + redriven.stderr
    again = await finished(client.get_workflow_handle(handle.id))
    assert again.state == "completed"
    assert await store.spend("acme", today()) > 0
