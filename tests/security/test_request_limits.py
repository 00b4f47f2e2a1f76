"""The operator's limits, attacked by an outsider who writes the request: a request may only
lower them. A real dev server and a real worker process with LLM_MAX_ATTEMPTS=3, one-second
review and escalation timeouts, a run budget of $0.01 and BUDGET_POLICY=fail; the attacker
asks for 100 attempts, a year of review and escalation, and a $1,000 run budget."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start
from tests.support.live_stack import E2E_WORKER_ENV
from tests.support.simulator import Simulator

pytestmark = pytest.mark.e2e

YEAR_S = 365 * 86400
WORKER_ENV = {
    **E2E_WORKER_ENV,
    "LLM_MAX_ATTEMPTS": "3",
    "LLM_FALLBACK_MODEL": "",
    "REVIEW_TIMEOUT_S": "1",
    "ESCALATION_TIMEOUT_S": "1",
    "RUN_BUDGET_USD": "0.01",
    "LLM_MAX_OUTPUT_TOKENS": "100",
    "BUDGET_POLICY": "fail",
}


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return WORKER_ENV


async def test_a_request_cannot_raise_the_attempts(stack: LocalStack, client: Client) -> None:
    """A run asking for 100 attempts whose every reply is malformed gives up after the
    operator's 3 (LLM_MAX_ATTEMPTS), as its history and the simulator's log show."""
    handle = await start(
        client, request("Never parses [sim:malformed]", options={"llm_max_attempts": 100})
    )
    result = await asyncio.wait_for(finished(handle), timeout=60)
    assert result.state == "dead_letter"
    assert result.history[-1].detail == "gave up after 3 attempts"
    assert max(entry.attempt for entry in result.history) == 3
    assert len(Simulator(stack.addresses.openai_base_url).chat_requests(handle.id)) == 3


async def test_a_request_cannot_lengthen_the_review_timeouts(client: Client) -> None:
    """A run asking for a year of review and a year of escalation escalates after the
    operator's REVIEW_TIMEOUT_S (1 s) and is dead-lettered after ESCALATION_TIMEOUT_S (1 s):
    a leaked reviewer key stays useful on it for seconds, not a year."""
    payload = request(
        "Hold for review",
        review="always",
        options={"review_timeout_s": YEAR_S, "escalation_timeout_s": YEAR_S},
    )
    result = await asyncio.wait_for(finished(await start(client, payload)), timeout=60)
    assert result.state == "dead_letter"
    timed_out = [entry for entry in result.history if entry.from_state == "await_review"]
    assert timed_out and timed_out[0].detail == "no review in 1s"


async def test_a_request_cannot_raise_the_run_budget(stack: LocalStack, client: Client) -> None:
    """A run asking for a $1,000 budget whose first call's worst case (over $0.018: a prompt of
    10,000 characters) is over the operator's RUN_BUDGET_USD ($0.01) is dead-lettered with
    BudgetExceeded before any call: its ceiling is the operator's, not the request's."""
    handle = await start(client, request("Costly" + " word" * 2000, options={"max_cost_usd": 1000}))
    result = await asyncio.wait_for(finished(handle), timeout=60)
    assert result.state == "dead_letter"
    assert (result.history[-1].detail or "").startswith(
        "BudgetExceeded: run budget: spent $0.0000 of $0.0100"
    )
    assert Simulator(stack.addresses.openai_base_url).chat_requests(handle.id) == []
