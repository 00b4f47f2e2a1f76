"""Record workflow histories for the replay tests: ``python -m tests.replay.record [GROUP...]``
(every group, or only those named: ``llm``, ``batch``, ``policies``, ``documents``, ``data``,
``plan_run``, ``rounds``, ``rollouts``, ``spill``; the other groups' files stay as recorded).

Runs each scenario on a fresh local stack (real dev server, worker, simulator, SQS, capacity
store) and writes its event history to ``tests/replay/histories/<scenario>.json``. Re-record
when a workflow change
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
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowHandle

from aiorch.devstack.stack import LocalStack
from aiorch.ops import pipelines
from aiorch.ops.reviews import current_target, submit_review
from aiorch.ops.signing import SigningKey
from aiorch.ops.visibility import start_run
from aiorch_runtime.capacity import CapacityStore, ProviderSignal
from aiorch_runtime.capacity_keys import scope_name
from aiorch_runtime.config import Settings
from aiorch_runtime.experiments import Experiment
from aiorch_runtime.temporal import AiOrchestratorPlugin
from tests.support.invoices import invoice_fields, text_document
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, TRIAGE_V2, write_pipeline
from tests.support.reviewing import signed
from workflows import contract
from workflows.data.payloads import DataRequest
from workflows.documents.contract import WORKFLOW_TYPE_DOCUMENT_PIPELINE
from workflows.documents.payloads import DocumentRequest
from workflows.payloads import (
    BudgetDecision,
    PipelineRequest,
    RequestBase,
    ReviewDecision,
    RunStatus,
)

R = TypeVar("R", bound=RequestBase)

HISTORIES = Path(__file__).parent / "histories"
CANARY: dict[str, Any] = {
    "id": "prompt-v2",
    "variants": [
        {"name": "A", "weight": 50},
        {"name": "B", "weight": 50, "model": "sim-small", "system_prompt": "Answer tersely."},
    ],
}
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
    # The batch lane (each call its own group, at once) and the result cache.
    "LLM_BATCH": "allowed",
    "LLM_BATCH_SIZE": "1",
    "LLM_BATCH_POLL_S": "1",
    "LLM_RESULT_CACHE_TTL_S": "3600",
    # Spill-over: a batch-eligible run told to wait over a second takes the batch lane.
    "SPILL_OVER": "on",
    "SPILL_OVER_WAIT_S": "1",
    # A rollout for tenant canary's runs only, so no other scenario is planned under it.
    "EXPERIMENTS": json.dumps({"llm@canary": CANARY}),
}
# The result cache needs authenticated tenants: each start is signed by its tenant's requester.
REQUESTERS = {
    tenant: SigningKey.generate(name)
    for tenant, name in (
        ("default", "dora"),
        ("quorum", "quinn"),
        ("auto", "otto"),
        ("canary", "cara"),
    )
}
WORKER_ENV["REQUESTER_PUBLIC_KEYS"] = ",".join(
    key.requester_entry(tenant) for tenant, key in REQUESTERS.items()
)


def signed_start(request: R, workflow_type: str) -> R:
    """``request`` with a start claim of its tenant's requester, for a run of
    ``workflow_type``."""
    return REQUESTERS[request.tenant or "default"].sign_start(
        request, workflow_type=workflow_type, namespace="default", now=datetime.now(UTC)
    )


def signed_payload(
    model: type[RequestBase], workflow_type: str, payload: dict[str, Any]
) -> dict[str, Any]:
    """``payload`` (a request of ``model``) with its start claim, as a client sends it."""
    request = signed_start(model.model_validate(payload), workflow_type)
    return request.model_dump(mode="json", exclude_none=True)


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
    *,
    state: str = "await_review",
) -> None:
    await until(handle, state)
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
            contract.WORKFLOW_TYPE,
            signed_payload(PipelineRequest, contract.WORKFLOW_TYPE, payload),
            id=run_id,
            task_queue=contract.DEFAULT_TASK_QUEUE,
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


async def record_policies(client: Client, key: SigningKey, stack: LocalStack) -> None:
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


async def record_llm(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """The LLM pipeline's paths: reviews, retries, dead letters, cancel, a continued reedit
    loop, a capacity wait and a budget approval."""
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
    budget = runs["budget_approved"]
    chain = (await budget.describe()).raw_description.workflow_execution_info.first_run_id
    decision = BudgetDecision(decision="approve", operator="recorder", reason="replay history")
    await budget.execute_update(
        contract.UPDATE_DECIDE_BUDGET,
        key.sign_budget(decision, workflow_id=budget.id, run_id=chain, now=datetime.now(UTC)),
        result_type=RunStatus,
    )

    await save(runs)


async def record_batch(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """The batch lane (a call answered from a batch; one a batch failed with 503, retried in
    another), the batch group's own workflow, and a reply the result cache gave."""
    start = starter(client)
    runs: dict[str, WorkflowHandle[Any, Any]] = {}
    runs["batch_lane"] = await start("Batch me", options={"lane": "batch"})
    runs["batch_lane_retry"] = await start(
        "Batch me twice [sim:status=503:times=1]", options={"lane": "batch"}
    )
    await runs["batch_lane"].result()
    query = f"WorkflowType = '{contract.WORKFLOW_TYPE_LLM_BATCH}'"
    group = [execution async for execution in client.list_workflows(query)][-1]
    runs["batch_group"] = client.get_workflow_handle(group.id)
    await (await start("Answer me once")).result()
    runs["result_cache_hit"] = await start("Answer me once")
    await save(runs)


async def record_spill_over(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """A batch-eligible run spilled to the batch lane: the model is paused for 3 s (a
    provider's 429 to someone), past the 1 s spill-over wait, so its call goes into a batch
    instead of waiting in await_capacity."""
    settings = Settings(capacity_store_url=stack.addresses.capacity_store_url)
    store = CapacityStore.from_settings(settings)
    assert store is not None
    scope = scope_name(stack.addresses.openai_base_url, "sim-large")
    await store.feedback(scope, (TPM, 0), ProviderSignal(retry_after=timedelta(seconds=3)))
    await store.close()
    handle = await starter(client)("Spill me over", options={"batch_eligible": True})
    await save({"spill_over": handle})


async def record_data_pipelines(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """A pipeline file's runs on two versions: version 1 waits for its reply's review while
    the file becomes version 2, and finishes on version 1's steps; a run of version 2 takes
    its own (another prompt, one more step)."""

    async def start(ticket: str) -> WorkflowHandle[Any, Any]:
        run_id = uuid.uuid4().hex[:24]
        payload = {"request_id": run_id, "input": {"ticket": ticket, "customer": "ACME"}}
        return await client.start_workflow(
            TRIAGE,
            signed_payload(DataRequest, TRIAGE, payload),
            id=run_id,
            task_queue=contract.DEFAULT_TASK_QUEUE,
        )

    folder = Path(stack.worker_env["PIPELINES_DIR"])
    write_pipeline(folder, TRIAGE_V1)
    first = await start("Our production site is down, urgent!")
    await review(first, key, "approve", state="urgent_review")
    await until(first, "reply_review")
    write_pipeline(folder, TRIAGE_V2)
    second = await start("Billing: my invoice was charged twice")
    await review(second, key, "approve", state="reply_review")
    await review(first, key, "approve", state="reply_review")
    HISTORIES.mkdir(exist_ok=True)
    for name, handle in (("data_pipeline_v1", first), ("data_pipeline_v2", second)):
        await handle.result()
        history = await handle.fetch_history()
        (HISTORIES / f"{name}.json").write_text(history.to_json() + "\n", encoding="utf-8")
        print(f"recorded {name}: {len(history.events)} events")


def document_starter(client: Client) -> Callable[..., Awaitable[WorkflowHandle[Any, Any]]]:
    async def start(fields: dict[str, Any]) -> WorkflowHandle[Any, Any]:
        request = signed_start(
            DocumentRequest(
                request_id=uuid.uuid4().hex[:24],
                document=text_document(fields).data.decode("utf-8"),
            ),
            WORKFLOW_TYPE_DOCUMENT_PIPELINE,
        )
        workflow_id = await start_run(
            client,
            request,
            task_queue=contract.DEFAULT_TASK_QUEUE,
            pipeline=pipelines.named("documents"),
        )
        return client.get_workflow_handle(workflow_id)

    return start


async def record_documents(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """The document pipeline: an invoice that adds up (stored at once), and one whose total
    does not (a reviewer approves it with corrected fields, which are stored)."""
    valid = invoice_fields(1)
    wrong = {**valid, "total": str(Decimal(valid["total"]) + Decimal("10.00"))}
    start = document_starter(client)
    stored, corrected = await start(valid), await start(wrong)
    await until(corrected, "await_review")
    target = await current_target(client, corrected.id)
    approval = ReviewDecision(decision="approve", reviewer="recorder", fields=valid)
    await submit_review(client, corrected.id, approval, signer=key.signer(), target=target)
    HISTORIES.mkdir(exist_ok=True)
    for name, handle in (("document_stored", stored), ("document_corrected", corrected)):
        await handle.result()
        history = await handle.fetch_history()
        (HISTORIES / f"{name}.json").write_text(history.to_json() + "\n", encoding="utf-8")
        print(f"recorded {name}: {len(history.events)} events")


async def record_plan_run(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """A document run planned by the engine's ``plan_run`` (a reviewer approves it), beside
    the document histories recorded before it, which replay ``plan_document``."""
    document = await document_starter(client)(invoice_fields(2))
    # DOCUMENT_REVIEW_MIN (always, by default): a reviewer approves the valid fields.
    await until(document, "await_review")
    approval = ReviewDecision(decision="approve", reviewer="recorder")
    target = await current_target(client, document.id)
    await submit_review(client, document.id, approval, signer=key.signer(), target=target)
    await save({"document_approved_plan_run": document})


async def until_round_or_refusal(handle: WorkflowHandle[Any, Any], review_round: int) -> None:
    """Wait until ``handle`` waits for review past ``review_round``, or has refused a review."""
    for _ in range(300):
        status = await handle.query(contract.QUERY_STATUS, result_type=RunStatus)
        if status.reviews_refused or (
            status.state == "await_review" and status.review_round > review_round
        ):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{handle.id} neither refused a review nor went past round {review_round}")


async def record_rounds(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """Review rounds: corrected fields that still break a rule (back in review in round 2, in
    the task that took them; a reviewer approves round 2), and a reedit with no feedback sent
    as a signal (refused; a reviewer approves the round it left open).

    Files whose name ends in ``_unpatched`` were recorded by the code before the patches
    ``review-round-republished`` and ``signalled-decision-screened`` (the round stayed
    unpublished; the signal re-ran the model): they stay, so runs started before replay."""
    valid = invoice_fields(3)
    wrong = {**valid, "total": str(Decimal(valid["total"]) + Decimal("10.00"))}
    document = await document_starter(client)(wrong)
    await until(document, "await_review")
    still_wrong = ReviewDecision(
        decision="approve", reviewer="recorder", fields={**wrong, "total": "1.00"}, review_round=1
    )
    target = await current_target(client, document.id)
    await submit_review(client, document.id, still_wrong, signer=key.signer(), target=target)
    await until_round_or_refusal(document, 1)
    approval = ReviewDecision(decision="approve", reviewer="recorder", review_round=2)
    await submit_review(client, document.id, approval, signer=key.signer(), target=target)

    llm = await starter(client)("Tagline please", review="always")
    await until(llm, "await_review")
    await llm.signal(contract.SIGNAL_REVIEW, await signed(llm, key, "reedit", "recorder"))
    await until_round_or_refusal(llm, 1)
    await review(llm, key, "approve")
    await save({"document_correction_still_wrong": document, "reedit_signal_no_feedback": llm})


async def record_rollouts(client: Client, key: SigningKey, stack: LocalStack) -> None:
    """Runs planned under a rollout with variant B (another model and system prompt): one
    reedited once and approved (its ``fetch_prompt`` marker holds the assignment), and one
    continued as new after two reedits, then approved (its continued run carried the plan)."""
    experiment = Experiment.model_validate(CANARY)
    ids = (uuid.uuid4().hex[:24] for _ in range(1000))
    b_ids = (request_id for request_id in ids if experiment.choose(request_id).variant.name == "B")
    runs: dict[str, WorkflowHandle[Any, Any]] = {}
    for name, reedits in (("rollout_variant_b", 1), ("rollout_variant_b_continued", 2)):
        run_id = next(b_ids)
        payload = {"request_id": run_id, "user_message": name, "review": "always"}
        runs[name] = await client.start_workflow(
            contract.WORKFLOW_TYPE,
            signed_payload(
                PipelineRequest, contract.WORKFLOW_TYPE, {**payload, "tenant": "canary"}
            ),
            id=run_id,
            task_queue=contract.DEFAULT_TASK_QUEUE,
        )
        for feedback in ("Shorter", "Simpler")[:reedits]:
            await review(runs[name], key, "reedit", feedback)
        await review(runs[name], key, "approve")
    await save(runs)


Recorder = Callable[[Client, SigningKey, LocalStack], Awaitable[None]]
GROUPS: dict[str, Recorder] = {
    "llm": record_llm,
    "batch": record_batch,
    "policies": record_policies,
    "documents": record_documents,
    "data": record_data_pipelines,
    "plan_run": record_plan_run,
    "rounds": record_rounds,
    "rollouts": record_rollouts,
    "spill": record_spill_over,
}


def main() -> int:
    """Record every group, or the groups named on the command line."""
    named = sys.argv[1:] or list(GROUPS)
    unknown = [name for name in named if name not in GROUPS]
    if unknown:
        print(f"error: no group {unknown[0]!r}; the groups are {', '.join(GROUPS)}")
        return 2
    with (
        tempfile.TemporaryDirectory() as data,
        tempfile.TemporaryDirectory() as pipelines,
        LocalStack(
            Path(data),
            with_worker=True,
            worker_env={**WORKER_ENV, "PIPELINES_DIR": pipelines},
            with_capacity_store=True,
        ) as stack,
    ):

        async def go() -> None:
            client = await Client.connect(
                stack.addresses.temporal_address, plugins=[AiOrchestratorPlugin()]
            )
            for name in named:
                await GROUPS[name](client, stack.reviewer_key, stack)

        asyncio.run(go())
    return 0


if __name__ == "__main__":
    sys.exit(main())
