"""The engine's plan step, ``plan_run``, plans each run as the pipelines' own plan activities
did: over a table of requests and settings (``plan_cases``), the plan a run starts with (from
``plan_run`` and the prompt its pipeline builds in workflow code) equals the plan recorded
from the planning code before ``plan_run`` existed (``plans_before_plan_run.json``), and so
does the plan of the activities kept for replay (``fetch_prompt``, ``plan_document``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.documents.plan import DocumentPlanActivities
from activities.input_loader import InputLoader
from activities.planning import PlanActivities, PlanDefaults
from activities.prompt import PromptActivities
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import Settings
from tests.activities.plan_cases import REQUEST_ID, cases
from workflows import contract, errors
from workflows.documents import prompt as document_prompt
from workflows.documents.contract import PIPELINE_DOCUMENTS
from workflows.documents.payloads import DocumentPlan, DocumentRequest, PlanDocumentInput
from workflows.engine.planning import PlanRunInput, with_prompt
from workflows.llm import prompt as llm_prompt
from workflows.payloads import PipelineRequest, PromptInput, PromptPlan, RequestBase

BEFORE = json.loads((Path(__file__).parent / "plans_before_plan_run.json").read_text())
CASES = cases()
REQUESTS: dict[str, type[RequestBase]] = {
    contract.PIPELINE_LLM: PipelineRequest,
    PIPELINE_DOCUMENTS: DocumentRequest,
}


def plans(defaults: PlanDefaults) -> PlanActivities:
    return PlanActivities(defaults, REQUESTS)


async def new_plan(defaults: PlanDefaults, pipeline: str, payload: dict[str, Any]) -> PromptPlan:
    """A new run's plan: ``plan_run``, then the prompt built as the pipeline's workflow code
    builds it."""
    request = REQUESTS[pipeline].model_validate(payload)
    plan_input = PlanRunInput(pipeline=pipeline, request=request.model_dump(mode="json"))
    plan = await ActivityEnvironment().run(plans(defaults).plan_run, plan_input)
    if isinstance(request, DocumentRequest):
        return with_prompt(plan, DocumentPlan, **document_prompt.prompt(request))
    assert isinstance(request, PipelineRequest)
    return with_prompt(plan, PromptPlan, **llm_prompt.prompt(request))


async def legacy_plan(defaults: PlanDefaults, pipeline: str, payload: dict[str, Any]) -> PromptPlan:
    """A replayed run's plan: the pipeline's own plan activity, kept for recorded histories."""
    if pipeline == PIPELINE_DOCUMENTS:
        document = PlanDocumentInput(request=DocumentRequest.model_validate(payload))
        plan_document = DocumentPlanActivities(defaults).plan_document
        return await ActivityEnvironment().run(plan_document, document)
    message = PromptInput(request=PipelineRequest.model_validate(payload))
    fetch_prompt = PromptActivities(defaults, InputLoader()).fetch_prompt
    return await ActivityEnvironment().run(fetch_prompt, message)


async def outcome(plan: Any) -> dict[str, Any]:
    """A plan as JSON, or the refusal that ended the run. The table was recorded before plans
    had a rollout ``assignment``, which a worker without experiments leaves None."""
    try:
        planned: dict[str, Any] = (await plan).model_dump(mode="json")
    except ApplicationError as err:
        return {"error": err.type, "message": err.message}
    assert planned.pop("assignment") is None
    return planned


def test_the_table_covers_review_modes_refusals_floors_and_fallbacks() -> None:
    """The recorded table holds every review level, refusals, plans with and without a
    fallback model and budget, and a document run under each of its floors."""
    planned = [plan for plan in BEFORE.values() if "error" not in plan]
    assert set(BEFORE) == {case for case, *_ in CASES}
    assert {plan["review"] for plan in planned} == {"never", "auto", "always"}
    assert {plan["fallback_model"] for plan in planned} >= {None, "sim-small", "fallback-model"}
    assert {plan["budget_usd"] for plan in planned} >= {None, 0.1, 0.5}
    assert {plan["lane"] for plan in planned} == {"sync", "batch"}
    assert {plan["review_policy"] for plan in planned} >= {None, "two", "docs"}
    refusals = {plan["error"] for plan in BEFORE.values() if "error" in plan}
    assert refusals == {errors.INVALID_REQUEST}


@pytest.mark.parametrize(
    ("case", "pipeline", "settings", "payload"), CASES, ids=[c[0] for c in CASES]
)
async def test_plan_run_plans_as_the_pipelines_own_plan_did(
    case: str, pipeline: str, settings: dict[str, Any], payload: dict[str, Any]
) -> None:
    """For the same request and settings, a new run's plan (``plan_run`` and its pipeline's
    prompt) and a replayed run's (its plan activity) equal the plan recorded before
    ``plan_run``: review level and reviewers, the document floor, budgets, fallback model,
    lane and cache, policies, and the same refusals."""
    defaults = PlanDefaults.of(Settings(**settings))
    assert await outcome(new_plan(defaults, pipeline, payload)) == BEFORE[case]
    assert await outcome(legacy_plan(defaults, pipeline, payload)) == BEFORE[case]


async def test_plan_run_accepts_a_signed_start_and_names_its_requester() -> None:
    """With start authentication on, the request travels to ``plan_run`` as JSON and still
    matches its start claim: the run's requester and tenant are the signing key's, as in
    ``fetch_prompt``'s plan."""
    key = SigningKey.generate("alice")
    defaults = PlanDefaults.of(Settings(requester_public_keys=key.requester_entry("acme")))
    request = key.sign_start(
        PipelineRequest(request_id=REQUEST_ID, user_message="Hi", metadata={"a": [1, "é"]}),
        # The activity environment's run is of workflow type "test" in namespace "default".
        workflow_type="test",
        namespace="default",
        now=datetime.now(UTC),
    )
    payload = request.model_dump(mode="json")
    new = await new_plan(defaults, contract.PIPELINE_LLM, payload)
    assert (new.requested_by, new.tenant) == ("alice", "acme")
    assert new == await legacy_plan(defaults, contract.PIPELINE_LLM, payload)


async def test_plan_run_refuses_a_pipeline_or_request_it_does_not_know() -> None:
    """A pipeline the worker does not plan, or a request that does not fit the pipeline's
    model, fails the run at once (InvalidRequest, non-retryable)."""
    activities = plans(PlanDefaults.of(Settings()))
    for plan_input in (
        PlanRunInput(pipeline="translate", request={"request_id": REQUEST_ID}),
        PlanRunInput(pipeline=contract.PIPELINE_LLM, request={"request_id": REQUEST_ID}),
    ):
        with pytest.raises(ApplicationError) as info:
            await ActivityEnvironment().run(activities.plan_run, plan_input)
        assert info.value.type == errors.INVALID_REQUEST and info.value.non_retryable


async def test_a_runs_priority_is_planned_no_more_urgent_than_its_tenant_may_be() -> None:
    """With TENANT_MAX_PRIORITY beta=3: beta's run asking for priority 1 is planned at 3, one
    asking for 4 at 4, acme's (not listed) at what it asks, and a run asking for none has none,
    in ``plan_run`` and in the activities kept for replay alike."""
    defaults = PlanDefaults.of(Settings(tenant_max_priority="beta=3"))

    async def planned(tenant: str, priority: int | None) -> int | None:
        payload: dict[str, Any] = {"request_id": REQUEST_ID, "user_message": "Hi", "tenant": tenant}
        if priority is not None:
            payload["options"] = {"priority": priority}
        new = await new_plan(defaults, contract.PIPELINE_LLM, payload)
        assert new == await legacy_plan(defaults, contract.PIPELINE_LLM, payload)
        return new.priority

    assert await planned("beta", 1) == 3
    assert await planned("beta", 4) == 4
    assert await planned("acme", 1) == 1
    assert await planned("beta", None) is None
