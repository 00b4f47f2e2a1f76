"""fetch_prompt resolves the run's review policy: the operator's is the floor."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.input_loader import InputLoader
from activities.planning import PlanDefaults
from activities.prompt import PromptActivities
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import Settings
from workflows import errors
from workflows.payloads import PipelineRequest, PromptInput, PromptPlan

RUN_ID = "0123456789abcdef01234567"


async def plan_for(settings: Settings, **request: Any) -> PromptPlan:
    activity = PromptActivities(PlanDefaults.of(settings), InputLoader())
    payload = {"request_id": RUN_ID, "user_message": "Hi", **request}
    prompt_input = PromptInput(request=PipelineRequest.model_validate(payload))
    return await ActivityEnvironment().run(activity.fetch_prompt, prompt_input)


@pytest.mark.parametrize(
    ("floor", "asked", "level"),
    [
        ("auto", "never", "auto"),
        ("always", "never", "always"),
        ("always", "auto", "always"),
        ("auto", "always", "always"),
        ("never", "never", "never"),
    ],
)
async def test_a_request_may_raise_the_review_level_never_lower_it(
    floor: str, asked: str, level: str
) -> None:
    """The run's review level is the higher of REVIEW_MIN and the request's (never < auto <
    always): `review: never` cannot skip a review the operator requires."""
    plan = await plan_for(Settings(review_min=floor), review=asked)
    assert plan.review == level


async def test_a_request_may_narrow_the_reviewers_never_widen_them() -> None:
    """With ALLOWED_REVIEWERS set, a request's list keeps only names the operator allows; a
    list that leaves nobody fails the run (InvalidRequest) instead of opening review to all."""
    settings = Settings(allowed_reviewers=["alice", "bob"])
    assert (await plan_for(settings)).allowed_reviewers == ["alice", "bob"]
    narrowed = await plan_for(settings, options={"allowed_reviewers": ["bob", "mallory"]})
    assert narrowed.allowed_reviewers == ["bob"]
    with pytest.raises(ApplicationError) as info:
        await plan_for(settings, options={"allowed_reviewers": ["mallory"]})
    assert info.value.type == errors.INVALID_REQUEST and info.value.non_retryable
    assert "names nobody the operator allows" in info.value.message


async def test_without_an_operator_list_a_request_names_its_reviewers() -> None:
    """When the operator allows anyone, a request may still restrict its run to a few."""
    plan = await plan_for(Settings(), options={"allowed_reviewers": ["carol"]})
    assert plan.allowed_reviewers == ["carol"]
    assert (await plan_for(Settings())).allowed_reviewers is None


async def test_plan_carries_public_keys_and_the_requester_never_a_private_key() -> None:
    """Reviewer public keys and the requester travel in the plan (the workflow verifies
    reviews with them); the private key never does."""
    key = SigningKey.generate("inbox")
    settings = Settings(
        review_public_keys=key.public_entry(),
        reviewer_key=key.private_entry(),
    )
    plan = await plan_for(settings, requested_by="alice")
    assert [k.key_id for k in plan.review_keys] == ["inbox"]
    assert plan.requested_by == "alice"
    private = key.private_entry().split(":", 1)[1]
    assert private not in plan.model_dump_json()


POLICIES = {
    "llm": {
        "name": "two-of-finance",
        "stages": [
            {"group": "finance", "approvals": 2, "timeout_s": 3600},
            {"group": "leads", "timeout_s": 7200},
        ],
        "auto_approve": [
            {"name": "sure", "when": [{"fact": "confidence", "op": ">=", "value": 0.9}]}
        ],
    },
    "llm@acme": {"stages": [{"group": "leads"}]},
}
GROUPS = {"finance": ["alice", "bob", "carol"], "leads": ["dave"]}


def with_policies(**more: Any) -> Settings:
    return Settings(review_policies=json.dumps(POLICIES), review_groups=json.dumps(GROUPS), **more)


async def test_the_pipelines_policy_travels_in_the_plan_resolved_against_its_groups() -> None:
    """REVIEW_POLICIES for the pipeline and REVIEW_GROUPS become the plan's stages (members,
    quorum), deadlines and rules; a tenant's own policy wins for that tenant; a pipeline with
    none keeps the engine's rule (no stages)."""
    plan = await plan_for(with_policies(review_timeout_s=86400, escalation_timeout_s=86400))

    assert plan.review_policy == "two-of-finance"
    assert [(s.group, s.reviewers, s.approvals) for s in plan.review_stages] == [
        ("finance", ["alice", "bob", "carol"], 2),
        ("leads", ["dave"], 1),
    ]
    assert (plan.review_timeout_s, plan.escalation_timeout_s) == (3600, 7200)
    assert [rule.name for rule in plan.auto_approve] == ["sure"]
    acme = await plan_for(with_policies(), tenant="acme")
    assert acme.review_policy == "llm@acme"
    assert [s.group for s in acme.review_stages] == ["leads", "leads"]  # escalates to the same
    assert (await plan_for(Settings())).review_stages == []


async def test_a_one_stage_policys_deadline_is_its_review_s_alone() -> None:
    """A policy of one stage with ``timeout_s`` sets the review's deadline; its escalation (to
    the same group) keeps ESCALATION_TIMEOUT_S, as a second stage without ``timeout_s`` does."""
    one = {"llm": {"stages": [{"group": "leads", "timeout_s": 60}]}}
    two = {"llm": {"stages": [{"group": "leads", "timeout_s": 60}, {"group": "finance"}]}}
    for policies in (one, two):
        settings = Settings(
            review_policies=json.dumps(policies),
            review_groups=json.dumps(GROUPS),
            review_timeout_s=3600,
            escalation_timeout_s=7200,
        )
        plan = await plan_for(settings)
        assert (plan.review_timeout_s, plan.escalation_timeout_s) == (60, 7200)


async def test_a_request_may_narrow_a_policy_never_widen_or_break_it() -> None:
    """A request's reviewers narrow each group, its timeouts only lower the policy's deadlines;
    one that leaves a stage fewer reviewers than its quorum (or that names its requester among
    the few left) fails the run at once with InvalidRequest."""
    narrowed = await plan_for(
        with_policies(),
        options={
            "allowed_reviewers": ["alice", "bob", "dave"],
            "review_timeout_s": 60,
            "escalation_timeout_s": 99999,
        },
    )
    assert narrowed.review_stages[0].reviewers == ["alice", "bob"]
    assert (narrowed.review_timeout_s, narrowed.escalation_timeout_s) == (60, 7200)

    with pytest.raises(ApplicationError) as info:
        await plan_for(with_policies(), options={"allowed_reviewers": ["alice", "dave"]})
    assert info.value.type == errors.INVALID_REQUEST and info.value.non_retryable
    assert info.value.message == (
        "review policy two-of-finance, stage 1: group finance leaves 1 reviewer(s) who may "
        "decide this run (within options.allowed_reviewers, the requester not counted); it "
        "needs 2 approvals"
    )
    with pytest.raises(ApplicationError):
        await plan_for(
            with_policies(),
            requested_by="alice",
            options={"allowed_reviewers": ["alice", "bob", "dave"]},
        )


async def test_the_operators_allowed_reviewers_bound_every_group() -> None:
    """ALLOWED_REVIEWERS still bounds a group: a member it leaves out never decides."""
    plan = await plan_for(with_policies(allowed_reviewers=["alice", "bob", "dave", "erin"]))
    assert plan.review_stages[0].reviewers == ["alice", "bob"]
    assert plan.review_stages[1].reviewers == ["dave"]


async def test_every_setting_the_run_uses_is_taken_from_the_worker() -> None:
    """The plan carries the worker's settings, each as configured (none left at a default):
    the model and its fallback, timeouts and backoff, limits, the review token's lifetime and
    binding to the run chain, signed budget decisions, notifications, content capture and the
    budget policy."""
    settings = Settings(
        llm_model="model-a",
        llm_temperature=0.3,
        llm_fallback_model="model-b",
        llm_fallback_after=4,
        llm_timeout_s=42,
        llm_backoff_initial_s=3,
        llm_backoff_max_s=30,
        max_reply_chars=5000,
        review_token_ttl_s=120,
        max_feedback_chars=700,
        reedit_rounds_per_run=2,
        review_webhook_url="http://127.0.0.1:9/hook",
        otel_capture_content=True,
        budget_policy="fail",
        budget_decision_timeout_s=77,
    )
    plan = await plan_for(settings)
    assert (plan.model, plan.temperature) == ("model-a", 0.3)
    assert (plan.fallback_model, plan.fallback_after) == ("model-b", 4)
    assert (plan.llm_timeout_s, plan.backoff_initial_s, plan.backoff_max_s) == (42, 3, 30)
    assert (plan.max_reply_chars, plan.max_feedback_chars) == (5000, 700)
    assert (plan.review_token_ttl_s, plan.review_token_binds_run) == (120, True)
    assert plan.budget_decisions_signed
    assert (plan.reedit_rounds_per_run, plan.notify, plan.capture_content) == (2, True, True)
    assert (plan.budget_policy, plan.budget_timeout_s) == ("fail", 77)


async def test_metadata_follows_the_message_as_sorted_json() -> None:
    """A request's metadata is appended to its message as context: sorted keys, characters
    kept as they are; without metadata the message is sent as it is."""
    plan = await plan_for(Settings(), metadata={"ticket": "Å-7", "customer": "Zoë"})
    assert plan.user_prompt == 'Hi\n\nContext (JSON): {"customer": "Zoë", "ticket": "Å-7"}'
    assert (await plan_for(Settings())).user_prompt == "Hi"


async def test_a_reviewer_list_that_leaves_nobody_is_refused_in_one_line() -> None:
    """The refusal says which option, against which setting, and the rule."""
    with pytest.raises(ApplicationError) as info:
        await plan_for(
            Settings(allowed_reviewers=["alice"]), options={"allowed_reviewers": ["mallory"]}
        )
    assert info.value.message == (
        "options.allowed_reviewers names nobody the operator allows (ALLOWED_REVIEWERS): "
        "a request may only narrow the set of reviewers"
    )
