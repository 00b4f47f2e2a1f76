"""Cost budgets end to end: a tenant whose daily budget runs out, an operator's approval, the
spend command, and a run dead-lettered by BUDGET_POLICY=fail that `dlq redrive` completes once
the budget allows. Real dev server, worker process, simulator, SQS and capacity store (Redis)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, stack_with_worker, starter
from workflows import contract

pytestmark = pytest.mark.e2e

# A short message's call here may cost up to $0.0038 (a bound of about 460 prompt tokens, the
# UTF-8 bytes of the system prompt and the message, at $0.005/1K + 100 reply tokens at
# $0.015/1K); answered, it costs about $0.0004 (the simulator's words). So acme's $0.0040 admits
# its first run, and the second run's worst case on top of the first run's spend would cross it.
# With tenant budgets on, every tenant a run names has one.
BUDGET_ENV = {
    **E2E_WORKER_ENV,
    "LLM_MAX_OUTPUT_TOKENS": "100",
    "TENANT_BUDGETS_USD": json.dumps({"acme": 0.004, "globex": 1, "initech": 1}),
}


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from stack_with_worker(
        tmp_path_factory.mktemp("budgets"), BUDGET_ENV, with_capacity_store=True
    )


def aiorch(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    """``python starter.py ARGS`` with the worker's budgets, as the operator's shell has them."""
    return starter(stack, *args, env=stack.worker_env)


async def test_a_tenant_out_of_budget_waits_for_an_approval_others_go_on(
    budgeted: LocalStack,
) -> None:
    """acme's first run completes and spends; its second waits in await_budget (no LLM call,
    AiState shows it) while another tenant's run completes; `starter.py budget ... approve`
    lets it finish; `starter.py spend` shows acme's spend against its budget."""
    client = await connect(budgeted)
    first = await start(client, request("First report please", tenant="acme"))
    assert (await finished(first)).state == "completed"

    second = await start(client, request("Second report please", tenant="acme"))
    waiting = await wait_for_state(second, "await_budget")
    assert waiting.tenant == "acme"
    assert waiting.attempts == 0
    assert waiting.last_error is not None
    assert "tenant 'acme' daily budget" in waiting.last_error

    other = await start(client, request("Globex report", tenant="globex"))
    assert (await finished(other)).state == "completed"
    assert (await wait_for_state(second, "await_budget")).state == "await_budget"

    refused = aiorch(budgeted, "budget", first.id, "approve", "--operator", "olga")
    assert refused.returncode == 1
    assert "no open run" in refused.stderr  # one line, no traceback
    approved = aiorch(budgeted, "budget", second.id, "approve", "--operator", "olga")
    assert approved.returncode == 0, approved.stderr
    result = await finished(second)
    assert result.state == "completed"
    assert [e.event for e in result.history].count("overspend_approved") == 1

    spend = aiorch(budgeted, "spend", "--json")
    assert spend.returncode == 0, spend.stderr
    rows = {row["tenant"]: row for row in map(json.loads, spend.stdout.splitlines())}
    assert rows["acme"]["budget_usd"] == 0.004
    assert rows["acme"]["spent_usd"] > 0.0006  # two answered calls, the second approved
    assert rows["globex"]["budget_usd"] == 1
    assert rows["globex"]["spent_usd"] > 0


async def test_policy_fail_dead_letters_and_redrive_completes_once_the_budget_allows(
    budgeted: LocalStack,
) -> None:
    """With BUDGET_POLICY=fail a run whose call would cross RUN_BUDGET_USD is dead-lettered at
    once with BudgetExceeded, before any LLM call; once the operator raises the ceiling,
    `dlq redrive` starts it again (same id, from its own history) and it completes."""
    client = await connect(budgeted)
    budgeted.stop_worker()
    budgeted.worker_env.update({"BUDGET_POLICY": "fail", "RUN_BUDGET_USD": "0.001"})
    budgeted.start_worker()
    try:
        handle = await start(client, request("Costly answer", tenant="initech"))
        result = await finished(handle)
        assert result.state == "dead_letter"
        assert result.history[-1].event == "budget_exceeded"
        assert (result.history[-1].detail or "").startswith("BudgetExceeded: run budget")

        budgeted.stop_worker()
        budgeted.worker_env["RUN_BUDGET_USD"] = "1"
        budgeted.start_worker()
        redriven = aiorch(budgeted, "dlq", "redrive", handle.id)
        assert redriven.returncode == 0, redriven.stdout + redriven.stderr
        again = await finished(client.get_workflow_handle(handle.id))
        assert again.state == "completed"
    finally:
        budgeted.stop_worker()
        for key in ("BUDGET_POLICY", "RUN_BUDGET_USD"):
            budgeted.worker_env.pop(key, None)
        budgeted.start_worker()
    status = await client.get_workflow_handle(handle.id).query(contract.QUERY_STATUS)
    assert status["cost_usd"] > 0
