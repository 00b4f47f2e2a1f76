"""Record workflow histories for the replay tests: ``python -m tests.replay.record [NAME...]``.

Runs each scenario on a fresh local stack (real dev server, worker, simulator, SQS, capacity
store) and writes its event history to ``tests/replay/histories/<scenario>.json``; given names,
writes only those (the others' files stay as recorded). Re-record when a workflow change
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
BATCH_WORKFLOW = contract.WORKFLOW_TYPE_LLM_BATCH
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
    # The batch lane (each call its own group, at once) and the result cache.
    "LLM_BATCH": "allowed",
    "LLM_BATCH_SIZE": "1",
    "LLM_BATCH_POLL_S": "1",
    "LLM_RESULT_CACHE_TTL_S": "3600",
}


async def until(handle: WorkflowHandle[Any, Any], state: str) -> None:
    for _ in range(300):
        status = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
        if status.state == state:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{handle.id} never reached {state}")


async def review(
    handle: WorkflowHandle[Any, Any], key: SigningKey, decision: str, feedback: str | None = None
) -> None:
    await until(handle, "await_review")
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        await signed(handle, key, decision, "recorder", feedback),
        result_type=RunStatus,
    )


async def record(client: Client, key: SigningKey, stack: LocalStack, only: frozenset[str]) -> None:
    async def start(message: str, **fields: Any) -> WorkflowHandle[Any, Any]:
        run_id = uuid.uuid4().hex[:24]
        payload = {"request_id": run_id, "user_message": message, **fields}
        return await client.start_workflow(
            contract.WORKFLOW_TYPE, payload, id=run_id, task_queue=contract.DEFAULT_TASK_QUEUE
        )

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
    # The batch lane: answered from a batch; a call a batch failed (503), retried in another.
    runs["batch_lane"] = await start("Batch me", options={"lane": "batch"})
    runs["batch_lane_retry"] = await start(
        "Batch me twice [sim:status=503:times=1]", options={"lane": "batch"}
    )
    await runs["batch_lane"].result()
    group = [w async for w in client.list_workflows(f"WorkflowType = '{BATCH_WORKFLOW}'")][-1]
    runs["batch_group"] = client.get_workflow_handle(group.id)
    # The result cache: the second of two identical runs is answered without a call.
    await (await start("Answer me once")).result()
    runs["result_cache_hit"] = await start("Answer me once")

    HISTORIES.mkdir(exist_ok=True)
    for name, handle in runs.items():
        if only and name not in only:
            continue
        try:
            await handle.result()
        except Exception as error:  # a cancelled run ends in an error, which is its point
            print(f"{name}: ended with {type(error).__name__}")
        history = await handle.fetch_history()  # of the latest run: a continued one last
        (HISTORIES / f"{name}.json").write_text(history.to_json() + "\n", encoding="utf-8")
        print(f"recorded {name}: {len(history.events)} events")


def main() -> int:
    only = frozenset(sys.argv[1:])
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
            await record(client, stack.reviewer_key, stack, only)

        asyncio.run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main())
