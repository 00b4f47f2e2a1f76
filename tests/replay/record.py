"""Record workflow histories for the replay tests: ``python -m tests.replay.record`` (every
scenario), or ``python -m tests.replay.record policies`` (the review-policy scenarios only).

Runs each scenario on a fresh local stack (real dev server, worker, simulator, SQS) and writes
its event history to ``tests/replay/histories/<scenario>.json``. Re-record when a workflow change
is *meant* to alter commands. Until the first release, histories are simply re-recorded; from
the first tagged release on, a change of commands is guarded by ``workflow.patched`` (then
``deprecate_patch``, then removed, each step with its reason and date) and the old files stay,
so runs started before the change still replay.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.stack import LocalStack
from aiorch.ops.signing import SigningKey
from aiorch.runtime.capacity import CapacityStore, ProviderSignal, scope_name
from aiorch.runtime.config import Settings
from aiorch.runtime.temporal import AiOrchestratorPlugin
from tests.reviewing import signed
from workflows import contract
from workflows.payloads import RunStatus

HISTORIES = Path(__file__).parent / "histories"
# Two reedit rounds per run, so a longer loop records a continued run too.
# The model's shared capacity is limited (far above what the other scenarios use), so the
# capacity scenario can be made to wait: a provider's 429 pauses the model for everyone.
TPM = 60_000
WORKER_ENV = {
    "LLM_BACKOFF_INITIAL_S": "0.2",
    "LLM_BACKOFF_MAX_S": "0.5",
    "REEDIT_ROUNDS_PER_RUN": "2",
    "LLM_RATE_LIMITS": json.dumps({"sim-large": {"tpm": TPM}}),
    "LLM_MAX_OUTPUT_TOKENS": "64",
    # Review policies for two tenants: two approvals from a pair, and a rule that approves a
    # reply the model did not flag.
    "REVIEW_POLICIES": json.dumps(
        {
            "llm@quorum": {"name": "two-of-pair", "stages": [{"group": "pair", "approvals": 2}]},
            "llm@auto": {
                "name": "unflagged",
                "auto_approve": [
                    {
                        "name": "unflagged",
                        "when": [{"fact": "needs_review", "op": "==", "value": False}],
                    }
                ],
            },
        }
    ),
    "REVIEW_GROUPS": json.dumps({"pair": ["recorder", "second"]}),
}


async def until(handle: WorkflowHandle[Any, Any], state: str) -> None:
    for _ in range(300):
        status = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
        if status.state == state:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{handle.id} never reached {state}")


async def review(
    handle: WorkflowHandle[Any, Any],
    key: SigningKey,
    decision: str,
    feedback: str | None = None,
    reviewer: str = "recorder",
) -> None:
    await until(handle, "await_review")
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        await signed(handle, key, decision, reviewer, feedback),
        result_type=RunStatus,
    )


def starter(client: Client) -> Callable[..., Awaitable[WorkflowHandle[Any, Any]]]:
    async def start(message: str, **fields: Any) -> WorkflowHandle[Any, Any]:
        run_id = uuid.uuid4().hex[:24]
        payload = {"request_id": run_id, "user_message": message, **fields}
        return await client.start_workflow(
            contract.WORKFLOW_TYPE, payload, id=run_id, task_queue=contract.DEFAULT_TASK_QUEUE
        )

    return start


async def save(runs: dict[str, WorkflowHandle[Any, Any]]) -> None:
    HISTORIES.mkdir(exist_ok=True)
    for name, handle in runs.items():
        try:
            await handle.result()
        except Exception as error:  # a cancelled run ends in an error, which is its point
            print(f"{name}: ended with {type(error).__name__}")
        history = await handle.fetch_history()  # of the latest run: a continued one last
        (HISTORIES / f"{name}.json").write_text(history.to_json() + "\n", encoding="utf-8")
        print(f"recorded {name}: {len(history.events)} events")


async def record_policies(client: Client, key: SigningKey) -> None:
    """Review policies: a quorum of two (a vote, then the approval that completes it), and a
    result an auto-approve rule approves."""
    start = starter(client)
    runs = {
        "quorum_two_approvals": await start("Needs two", review="always", tenant="quorum"),
        "auto_approved": await start("Routine", review="always", tenant="auto"),
    }
    await review(runs["quorum_two_approvals"], key, "approve", reviewer="recorder")
    await review(runs["quorum_two_approvals"], key, "approve", reviewer="second")
    await save(runs)


async def record(client: Client, key: SigningKey, stack: LocalStack) -> None:
    start = starter(client)
    runs: dict[str, WorkflowHandle[Any, Any]] = {}
    runs["happy_path"] = await start("Explain replay.")
    runs["review_approve"] = await start("Check this [sim:review]")
    runs["reedit_then_approve"] = await start("Tagline please", review="always")
    runs["reject"] = await start("Press release", review="always")
    runs["retry_then_complete"] = await start("Busy [sim:status=429:times=2:retry_after=0.5]")
    runs["malformed_then_complete"] = await start("Odd [sim:malformed:times=1]")
    runs["dead_letter"] = await start("Down [sim:status=503]", options={"llm_max_attempts": 3})
    runs["permanent_error"] = await start("Bad [sim:status=400]")
    runs["review_timeout_dead_letter"] = await start(
        "Nobody answers",
        review="always",
        options={"review_timeout_s": 1, "escalation_timeout_s": 1},
    )
    runs["cancel_in_review"] = await start("Cancel me", review="always")
    runs["continued_reedit_loop"] = await start("Loop until it is right", review="always")

    await review(runs["review_approve"], key, "approve")
    await review(runs["reedit_then_approve"], key, "reedit", "Shorter")
    await review(runs["reedit_then_approve"], key, "approve")
    await review(runs["reject"], key, "reject", "No")
    for feedback in ("Shorter", "Simpler"):
        await review(runs["continued_reedit_loop"], key, "reedit", feedback)
    await review(runs["continued_reedit_loop"], key, "approve")
    await until(runs["cancel_in_review"], "await_review")
    await runs["cancel_in_review"].cancel()

    for handle in runs.values():
        try:
            await handle.result()
        except Exception as error:  # a cancelled or failed run ends in an error
            print(f"{handle.id}: ended with {type(error).__name__}")

    # Waiting for capacity: the provider answered 429 "retry after 3 s" to someone, so the
    # model is paused for every worker and this run waits in await_capacity.
    settings = Settings(capacity_store_url=stack.addresses.capacity_store_url)
    store = CapacityStore.from_settings(settings)
    assert store is not None
    scope = scope_name(stack.addresses.openai_base_url, "sim-large")
    await store.feedback(scope, (TPM, 0), ProviderSignal(retry_after=timedelta(seconds=3)))
    await store.close()
    runs["capacity_wait"] = await start("Queued for capacity")
    # Over the request's own ceiling: waits in await_budget until an operator approves.
    runs["budget_approved"] = await start("Worth it", options={"max_cost_usd": 0.0001})
    await until(runs["budget_approved"], "await_budget")
    await runs["budget_approved"].execute_update(
        contract.UPDATE_DECIDE_BUDGET,
        {"decision": "approve", "operator": "recorder", "reason": "replay history"},
        result_type=RunStatus,
    )

    await save(runs)
    await record_policies(client, key)


def main() -> int:
    with (
        tempfile.TemporaryDirectory() as data,
        LocalStack(
            Path(data), with_worker=True, worker_env=WORKER_ENV, with_capacity_store=True
        ) as stack,
    ):

        async def go() -> None:
            client = await Client.connect(
                stack.addresses.temporal_address, plugins=[AiOrchestratorPlugin()]
            )
            if sys.argv[1:] == ["policies"]:
                await record_policies(client, stack.reviewer_key)
            else:
                await record(client, stack.reviewer_key, stack)

        asyncio.run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main())
