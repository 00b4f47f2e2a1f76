"""await_capacity and await_budget: a run without capacity waits on a timer, visibly, without
calling or spending an attempt; a run whose next call would cross a budget waits for an
operator's decision (approve, reject, timeout) or is dead-lettered, as the plan's policy says."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowUpdateFailedError

from aiorch.ops import visibility
from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import BudgetSettings
from aiorch_runtime.pipeline_files import check_text
from tests.support.builders import new_request_id
from tests.support.orchestration import Orchestration
from tests.support.pipeline_files import write_pipeline
from tests.support.run_history import entry_for, events, path
from tests.support.scripted_activities import Reply, no_capacity, over_budget
from tests.support.time_skipping import assert_waited
from workflows import contract, errors
from workflows.data import CATALOG
from workflows.engine.identity import parse_review_keys
from workflows.payloads import BudgetDecision, PipelineRequest
from workflows.steps.llm_call import step_priority


def decision(verdict: str, operator: str = "olga", reason: str | None = None) -> dict[str, str]:
    payload = {"decision": verdict, "operator": operator}
    if reason is not None:
        payload["reason"] = reason
    return payload


async def test_a_run_without_capacity_waits_visibly_and_spends_no_attempt(
    orch: Orchestration,
) -> None:
    """An invoke_llm that answers "wait 42 s" moves the run to await_capacity (Pending, shown
    in AiState) with attempts unchanged; after 42 s of workflow time it asks again, and the
    call that is then made is attempt 1."""
    orch.fakes.llm_script = [no_capacity(42), no_capacity(3), Reply(content="at last")]
    handle = await orch.start()

    waiting = await orch.wait_for_state(handle, "await_capacity")
    assert (waiting.status, waiting.attempts) == ("Pending", 0)
    assert (await orch.ai_state(handle))[0] == "await_capacity"

    result = await finished(handle)
    assert result.content == "at last"
    assert path(result.history)[:7] == [
        "idle",
        "fetch_prompt",
        "invoke_llm",
        "await_capacity",
        "invoke_llm",
        "await_capacity",
        "invoke_llm",
    ]
    waited = entry_for(result.history, "capacity_wait")
    ready = entry_for(result.history, "capacity_ready")
    assert_waited(waited.at, ready.at, 42)
    assert [call.attempt for call in orch.fakes.llm_calls] == [1, 1, 1]
    assert {entry.attempt for entry in result.history if entry.event.startswith("capacity")} == {0}
    status = await orch.status(handle)
    assert status.attempts == 1
    await orch.check_finished(handle, result)


async def test_over_budget_waits_for_an_operator_who_approves(orch: Orchestration) -> None:
    """Over budget with policy wait: the run rests in await_budget (WaitingForInput) with the
    budget in last_error; the operator's approval (an update) moves it on with the operator
    recorded, and the next call carries budget_approved, spending attempt 1."""
    orch.fakes.llm_script = [over_budget(), Reply(content="paid for")]
    handle = await orch.start()

    waiting = await orch.wait_for_state(handle, "await_budget")
    assert waiting.status == "WaitingForInput"
    assert waiting.attempts == 0
    assert waiting.last_error is not None
    assert waiting.last_error.startswith(f"{errors.BUDGET_EXCEEDED}: run budget")

    after = await handle.execute_update(
        contract.UPDATE_DECIDE_BUDGET, decision("approve", reason="quarter end")
    )
    assert after["state"] in ("invoke_llm", "generate_embedding", "completed")
    result = await finished(handle)
    assert result.state == "completed"
    approved = entry_for(result.history, "overspend_approved")
    assert approved.reviewer == "olga"
    assert approved.detail == "overspend approved by olga: quarter end"
    assert [c.budget_approved for c in orch.fakes.llm_calls] == [False, True]
    assert [c.attempt for c in orch.fakes.llm_calls] == [1, 1]
    await orch.check_finished(handle, result)


async def test_a_rejected_overspend_fails_the_run_with_budget_exceeded(
    orch: Orchestration,
) -> None:
    """A rejection (the budget_decision signal) ends the run failed, naming the operator, with
    no further call and no dead letter."""
    orch.fakes.llm_script = [over_budget()]
    handle = await orch.start()
    await orch.wait_for_state(handle, "await_budget")
    await handle.signal(contract.SIGNAL_BUDGET_DECISION, decision("reject", "ops-bob"))

    result = await finished(handle)
    assert result.state == "failed"
    rejected = entry_for(result.history, "overspend_rejected")
    assert (rejected.detail, rejected.reviewer) == (
        f"{errors.BUDGET_EXCEEDED}: overspend rejected by ops-bob",
        "ops-bob",
    )
    assert entry_for(result.history, "over_budget").detail == (
        f"{errors.BUDGET_EXCEEDED}: run budget: spent $0.0100 of $0.0100"
    )
    status = await orch.status(handle)
    assert status.last_error == f"{errors.BUDGET_EXCEEDED}: overspend rejected by ops-bob"
    assert len(orch.fakes.llm_calls) == 1
    assert orch.fakes.dead_letters == []


async def test_no_decision_in_time_dead_letters_the_run(orch: Orchestration) -> None:
    """Without a decision within the plan's timeout the run is dead-lettered (redrivable) with
    BudgetExceeded, failed in await_budget."""
    orch.fakes.plan_overrides["budget_timeout_s"] = 600
    orch.fakes.llm_script = [over_budget()]
    handle = await orch.start()

    result = await finished(handle)
    assert result.state == "dead_letter"
    assert events(result.history)[-2:] == ["over_budget", "budget_timeout"]
    assert_waited(
        entry_for(result.history, "over_budget").at,
        entry_for(result.history, "budget_timeout").at,
        600,
    )
    timed_out = entry_for(result.history, "budget_timeout")
    assert timed_out.detail == f"{errors.BUDGET_EXCEEDED}: no budget decision in 600s"
    [message] = orch.fakes.dead_letters
    assert message.message.failed_state == "await_budget"
    assert (message.message.last_error or "").startswith(errors.BUDGET_EXCEEDED)


async def test_policy_fail_dead_letters_at_once(orch: Orchestration) -> None:
    """With BUDGET_POLICY=fail the run is dead-lettered at once with BudgetExceeded (failed in
    invoke_llm), so `dlq redrive` can start it again once the budget allows."""
    orch.fakes.plan_overrides["budget_policy"] = "fail"
    orch.fakes.llm_script = [over_budget("tenant 'acme' daily budget: spent $5 of $5")]
    handle = await orch.start()

    result = await finished(handle)
    assert result.state == "dead_letter"
    assert path(result.history)[-2:] == ["invoke_llm", "dead_letter"]
    assert events(result.history)[-1] == "budget_exceeded"
    assert entry_for(result.history, "budget_exceeded").detail == (
        f"{errors.BUDGET_EXCEEDED}: tenant 'acme' daily budget: spent $5 of $5"
    )
    [message] = orch.fakes.dead_letters
    assert message.message.failed_state == "invoke_llm"
    assert message.message.attempts == 0


async def test_budget_decisions_are_refused_unless_the_run_waits_for_one(
    orch: Orchestration,
) -> None:
    """The update is refused with a reason while the run is not in await_budget (nothing
    happens), and a signal then is counted, not acted on; an invalid payload is refused too."""
    orch.fakes.plan_overrides["review"] = "always"
    handle = await orch.start(review="always")
    await orch.wait_for_state(handle, "await_review")

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(contract.UPDATE_DECIDE_BUDGET, decision("approve"))
    assert "not waiting for a budget decision" in str(refused.value.cause)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(contract.UPDATE_DECIDE_BUDGET, {"decision": "maybe"})

    await handle.signal(contract.SIGNAL_BUDGET_DECISION, decision("approve"))
    await handle.signal(contract.SIGNAL_BUDGET_DECISION, {"operator": ""})
    status = await orch.status(handle)
    assert status.state == "await_review"
    assert status.budget_decisions_refused == 2
    assert status.last_refusal is not None


async def test_signed_budget_decisions_bind_operator_and_run_and_never_the_requester(
    orch: Orchestration,
) -> None:
    """A run planned with reviewer keys takes a budget decision only with a token signed for
    its operator and this run chain: unsigned, for another run, or by the run's requester, the
    decision is refused with the reason; a signed approval lets the run go on."""
    key = SigningKey.generate("ops")
    orch.fakes.plan_overrides.update(
        review_keys=parse_review_keys(key.public_entry(None)),
        budget_decisions_signed=True,
        requested_by="rita",
    )
    orch.fakes.llm_script = [over_budget(), Reply(content="paid for")]
    handle = await orch.start()
    await orch.wait_for_state(handle, "await_budget")
    now = await orch.env.get_current_time()
    chain = handle.first_execution_run_id
    assert chain is not None

    def sign(operator: str, run_id: str) -> dict[str, object]:
        payload = BudgetDecision(decision="approve", operator=operator)
        signed = key.sign_budget(payload, workflow_id=handle.id, run_id=run_id, now=now)
        return signed.model_dump(mode="json", exclude_none=True)

    refusals = {
        "not signed": decision("approve"),
        "issued for another run": sign("olga", "another-chain"),
        "requested this run": sign("rita", chain),
    }
    for words, payload in refusals.items():
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(contract.UPDATE_DECIDE_BUDGET, payload)
        assert words in str(refused.value.cause), words
    await handle.execute_update(contract.UPDATE_DECIDE_BUDGET, sign("olga", chain))
    result = await finished(handle)
    assert result.state == "completed"
    assert entry_for(result.history, "overspend_approved").reviewer == "olga"


async def test_a_runs_priority_reaches_its_model_calls_and_their_tasks(
    orch: Orchestration,
) -> None:
    """A run planned with priority 1 sends it with its model call (for the capacity store's
    queue) and as the call's task priority key on the task queue; a run without one schedules
    its call with no priority at all, as before priorities existed."""
    orch.fakes.plan_overrides = {"priority": 1}
    urgent = await orch.start()
    await finished(urgent)
    orch.fakes.plan_overrides = {}
    plain = await orch.start()
    await finished(plain)

    def scheduled_priorities(history: Any) -> list[tuple[str, bool, int]]:
        return [
            (
                attributes.activity_type.name,
                attributes.HasField("priority"),
                attributes.priority.priority_key,
            )
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            for attributes in [event.activity_task_scheduled_event_attributes]
        ]

    urgent_calls = scheduled_priorities(await urgent.fetch_history())
    plain_calls = scheduled_priorities(await plain.fetch_history())
    assert (contract.ACTIVITY_INVOKE_LLM, True, 1) in urgent_calls
    assert all(key == 0 for _, _, key in plain_calls), plain_calls
    assert [call.priority for call in orch.fakes.llm_calls] == [1, None]


BACKGROUND_STEP = """name: Prioritised
version: 1
input:
  type: object
  properties: {ticket: {type: string}}
steps:
  - id: draft
    type: llm
    prompt: "Draft a reply to {{ input.ticket }}"
  - id: summary
    type: llm
    priority: PRIORITY
    prompt: "Summarise {{ steps.draft.content }}"
"""


@pytest.mark.parametrize(
    ("run", "step", "calls"),
    [(2, 5, [2, 5]), (2, 1, [2, 2]), (None, 1, [None, 3]), (None, 4, [None, 4])],
)
async def test_a_steps_priority_is_its_calls_never_more_urgent_than_its_runs(
    orch: Orchestration, run: int | None, step: int, calls: list[int | None]
) -> None:
    """A pipeline file's llm step with a priority of its own sends it with its call and as the
    call's task priority, the other step the run's; a step cannot be more urgent than its run
    (one without a priority counts as 3), so a file cannot lift a tenant's runs."""
    write_pipeline(orch.pipelines, BACKGROUND_STEP.replace("PRIORITY", str(step)), "p.yaml")
    request_id = new_request_id()
    options = {} if run is None else {"priority": run}
    handle = await orch.client.start_workflow(
        "Prioritised",
        {"request_id": request_id, "input": {"ticket": "slow"}, "options": options},
        id=request_id,
        task_queue=orch.task_queue,
    )
    orch.handles.append(handle)
    await handle.result()
    assert [call.priority for call in orch.fakes.llm_calls] == calls
    scheduled = [
        attributes.priority.priority_key
        for event in (await handle.fetch_history()).events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        for attributes in [event.activity_task_scheduled_event_attributes]
        if attributes.activity_type.name == contract.ACTIVITY_INVOKE_LLM
    ]
    assert scheduled == [call or 0 for call in calls]


def test_a_step_without_a_priority_takes_its_runs() -> None:
    """Without a priority of its own a step's calls have the run's, none included; a file
    naming a priority outside 1 to 5 is refused at its line."""
    assert step_priority(None, None) is None
    assert step_priority(4, None) == 4
    assert step_priority(3, 3) == 3
    for wrong in ("0", "6"):
        _, problems = check_text(BACKGROUND_STEP.replace("PRIORITY", wrong), "p.yaml", CATALOG)
        assert [(p.line, p.rule) for p in problems] == [(12, "invalid-value")]


async def test_a_run_started_for_a_tenant_carries_its_fairness_key_and_weight(
    orch: Orchestration,
) -> None:
    """starter.py's start puts the run's tenant and its TENANT_WEIGHTS weight on the run as its
    tasks' fairness key and weight, and its priority narrowed by TENANT_MAX_PRIORITY; a run
    without a tenant is the default tenant's, weight 1, no priority."""
    settings = BudgetSettings.model_validate(
        {"tenant_weights": "acme=3", "tenant_max_priority": "acme=2"}
    )
    urgent = PipelineRequest(
        request_id=new_request_id(), user_message="hi", tenant="acme", options={"priority": 1}
    )
    plain = PipelineRequest(request_id=new_request_id(), user_message="hi")
    for request in (urgent, plain):
        await visibility.start_run(
            orch.client,
            request,
            task_queue=orch.task_queue,
            priority=visibility.task_priority(request, settings),
        )
    started = []
    for request in (urgent, plain):
        handle = orch.client.get_workflow_handle(request.request_id)
        orch.handles.append(handle)
        await handle.result()
        first = (await handle.fetch_history()).events[0]
        priority = first.workflow_execution_started_event_attributes.priority
        started.append((priority.fairness_key, priority.fairness_weight, priority.priority_key))
    assert started == [("acme", 3.0, 2), ("default", 1.0, 0)]
