"""fetch_prompt resolves the run's limits and tenant: a request may only lower the operator's
limits, and with tenant budgets on a run must spend one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError

from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import Settings
from tests.activities.test_review_policy import RUN_ID, plan_for
from workflows import errors
from workflows.payloads import PipelineRequest, PromptPlan

YEAR_S = 365 * 86400.0
BUDGETS: dict[str, Any] = {
    "capacity_store_url": SecretStr("redis://127.0.0.1:1/0"),
    "tenant_budgets_usd": {"acme": 5.0, "tenants": 1.0},
}


async def test_a_request_may_lower_the_operators_limits_never_raise_them() -> None:
    """llm_max_attempts, review_timeout_s, escalation_timeout_s and max_cost_usd above the
    operator's (LLM_MAX_ATTEMPTS, REVIEW_TIMEOUT_S, ESCALATION_TIMEOUT_S, RUN_BUDGET_USD) are
    cut to the operator's; below them they are kept; left out, the operator's apply."""
    settings = Settings(
        llm_max_attempts=5, review_timeout_s=600, escalation_timeout_s=300, run_budget_usd=0.5
    )
    raised = await plan_for(
        settings,
        options={
            "llm_max_attempts": 100,
            "review_timeout_s": YEAR_S,
            "escalation_timeout_s": YEAR_S,
            "max_cost_usd": 1000,
        },
    )
    assert (raised.max_attempts, raised.review_timeout_s) == (5, 600)
    assert (raised.escalation_timeout_s, raised.budget_usd) == (300, 0.5)
    lowered = await plan_for(
        settings,
        options={
            "llm_max_attempts": 2,
            "review_timeout_s": 60,
            "escalation_timeout_s": 30,
            "max_cost_usd": 0.1,
        },
    )
    assert (lowered.max_attempts, lowered.review_timeout_s) == (2, 60)
    assert (lowered.escalation_timeout_s, lowered.budget_usd) == (30, 0.1)
    default = await plan_for(settings)
    assert (default.max_attempts, default.review_timeout_s) == (5, 600)
    assert (default.escalation_timeout_s, default.budget_usd) == (300, 0.5)


async def test_without_an_operators_ceiling_a_request_may_set_its_own() -> None:
    """With RUN_BUDGET_USD unset, a request's max_cost_usd is the run's ceiling."""
    assert (await plan_for(Settings(), options={"max_cost_usd": 0.2})).budget_usd == 0.2
    assert (await plan_for(Settings())).budget_usd is None


@pytest.mark.parametrize("tenant", ["made-up", "default-2", "other"])
async def test_with_tenant_budgets_on_a_tenant_without_one_fails_the_plan(tenant: str) -> None:
    """With TENANT_BUDGETS_USD set, a run naming a tenant it does not list fails at plan time
    with a one-line InvalidRequest naming the tenant (no fresh budget per made-up name)."""
    with pytest.raises(ApplicationError) as refused:
        await plan_for(Settings(**BUDGETS), tenant=tenant)
    assert refused.value.type == errors.INVALID_REQUEST
    assert refused.value.non_retryable
    assert f"tenant {tenant!r} has no daily budget" in refused.value.message
    assert "\n" not in refused.value.message


async def test_runs_without_a_tenant_share_the_default_pool_or_are_refused() -> None:
    """A run naming no tenant spends the pool TENANT_BUDGET_DEFAULT_USD when it is set, and
    is refused when it is not (budgets on); budgeted tenants, `tenants` included, plan."""
    pooled = Settings(**BUDGETS, tenant_budget_default_usd=2.0)
    assert (await plan_for(pooled)).tenant == "default"
    assert pooled.tenant_budget("default") == 2.0
    assert pooled.tenant_budget("made-up") is None
    with pytest.raises(ApplicationError) as refused:
        await plan_for(Settings(**BUDGETS))
    assert "the run names no tenant" in refused.value.message
    assert (await plan_for(Settings(**BUDGETS), tenant="tenants")).tenant == "tenants"


async def test_with_tenant_budgets_off_any_tenant_plans() -> None:
    """Without tenant budgets a request's tenant only labels its spend."""
    assert (await plan_for(Settings(), tenant="anyone")).tenant == "anyone"


STORE: dict[str, Any] = {"capacity_store_url": SecretStr("redis://127.0.0.1:1/0")}


async def test_the_lane_is_the_requests_where_the_operator_allows_batches() -> None:
    """With LLM_BATCH=allowed a run goes synchronously unless its request asks for batch; with
    default, through the batch API unless it asks for sync; the plan carries how long a batched
    call waits for its submission (the group delay and half an hour) and for its answer."""
    allowed = Settings(**STORE, llm_batch="allowed", llm_batch_delay_s=60, llm_batch_wait_s=7200)
    assert (await plan_for(allowed)).lane == "sync"
    asked = await plan_for(allowed, options={"lane": "batch"})
    assert (asked.lane, asked.batch_queue_s, asked.batch_wait_s) == ("batch", 1860.0, 7200.0)
    default = Settings(**STORE, llm_batch="default")
    assert (await plan_for(default)).lane == "batch"
    assert (await plan_for(default, options={"lane": "sync"})).lane == "sync"


async def test_asking_for_the_batch_lane_where_there_is_none_fails_the_plan() -> None:
    """With LLM_BATCH=off (the default), a request asking for the batch lane fails at plan time
    with one InvalidRequest line that says what to do; asking for sync plans."""
    with pytest.raises(ApplicationError) as refused:
        await plan_for(Settings(), options={"lane": "batch"})
    assert refused.value.type == errors.INVALID_REQUEST
    assert refused.value.non_retryable
    assert refused.value.message == (
        "options.lane is batch, and this deployment does not use the provider's batch API "
        "(LLM_BATCH=off): leave the lane out, or ask for sync"
    )
    assert (await plan_for(Settings(), options={"lane": "sync"})).lane == "sync"


async def test_the_result_cache_is_opt_in_and_a_request_may_refuse_it() -> None:
    """Off unless LLM_RESULT_CACHE_TTL_S is set; on, a request's result_cache=false keeps its
    run's calls going to the model."""
    assert not (await plan_for(Settings())).result_cache
    cached = Settings(**STORE, llm_result_cache_ttl_s=3600)
    assert (await plan_for(cached)).result_cache
    assert not (await plan_for(cached, options={"result_cache": False})).result_cache


ALICE = SigningKey.generate("alice")
BOB = SigningKey.generate("bob")
SIGNED_STARTS = Settings(
    requester_public_keys=f"{ALICE.requester_entry('acme')},{BOB.requester_entry('bigco')}"
)


async def signed_plan(key: SigningKey, **fields: Any) -> PromptPlan:
    """The plan of a request ``key`` signed, on a worker that authenticates starts."""
    payload = {"request_id": RUN_ID, "user_message": "Hi", **fields}
    # The activity environment's run is of workflow type "test" in namespace "default".
    claimed = key.sign_start(
        PipelineRequest.model_validate(payload),
        workflow_type="test",
        namespace="default",
        now=datetime.now(UTC),
    )
    return await plan_for(SIGNED_STARTS, **claimed.model_dump(mode="json", exclude_none=True))


async def test_with_start_authentication_the_signing_key_names_requester_and_tenant() -> None:
    """With REQUESTER_PUBLIC_KEYS set, the run's requester and tenant are those of the key
    that signed its start claim, whether the request leaves them out or names the same."""
    for key, tenant in ((ALICE, "acme"), (BOB, "bigco")):
        plan = await signed_plan(key)
        assert (plan.requested_by, plan.tenant) == (key.key_id, tenant)
        same = await signed_plan(key, requested_by=key.key_id, tenant=tenant)
        assert (same.requested_by, same.tenant) == (key.key_id, tenant)


async def test_with_start_authentication_a_request_cannot_speak_for_another() -> None:
    """An unsigned start, or a signed one naming another requester or tenant than its key's,
    fails the plan with one final InvalidRequest line saying why."""
    refusals: list[tuple[Callable[[], Awaitable[PromptPlan]], str]] = [
        (
            lambda: plan_for(SIGNED_STARTS, requested_by="alice", tenant="acme"),
            "the start is not signed (start authentication is on: sign it with REQUESTER_KEY)",
        ),
        (
            lambda: signed_plan(ALICE, requested_by="bob"),
            "requested_by names another requester than the one whose key signed the start",
        ),
        (
            lambda: signed_plan(ALICE, tenant="bigco"),
            "tenant 'bigco' is not the tenant of the key that signed the start",
        ),
    ]
    for attempt, why in refusals:
        with pytest.raises(ApplicationError) as refused:
            await attempt()
        assert refused.value.type == errors.INVALID_REQUEST
        assert refused.value.non_retryable
        assert refused.value.message == why
