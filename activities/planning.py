"""The engine's planning rule: what a run of any pipeline settles once, when it starts.

`planned` resolves the run's `RunPolicy` and `ModelSettings` (``RunPlan``) from the worker's
defaults (`PlanDefaults`, derived from the settings once) and the request: review level and
reviewers (the operator's floor), the requester and tenant (start authentication), the review
policy, retries, model, budgets, lane and result cache. A request may only raise the review
level, narrow the reviewers and lower limits, never the other way round.

``plan_run`` is the one plan step every pipeline's run takes (a local activity: no I/O but,
for a pipeline under a rollout experiment, one read of its halts, `activities.experiments`);
the pipeline builds its prompt in workflow code (`workflows.engine.planning`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.capacity import unbudgeted_tenant
from activities.experiments import NO_ROLLOUTS, Rollouts
from aiorch_runtime.config import Settings, narrowed_priority
from aiorch_runtime.review_policies import PolicySpec, PolicyUnmet, policy_for, resolve
from workflows import contract, errors
from workflows.documents.contract import PIPELINE_DOCUMENTS
from workflows.engine.identity import start_claim_problem
from workflows.engine.planning import PlanRunInput, RunPlan
from workflows.payloads import (
    DEFAULT_TENANT,
    BudgetPolicy,
    RequestBase,
    RequesterKey,
    ReviewKey,
    ReviewMode,
    describe_validation_error,
    printable,
)

Limit = TypeVar("Limit", int, float)
# A batched call waits for its group's delay (LLM_BATCH_DELAY_S), then this long at most for the
# submission itself (a large file's upload, a provider briefly down), before its run retries.
BATCH_SUBMISSION_ALLOWANCE_S = 1800.0
REVIEW_LEVELS: tuple[ReviewMode, ...] = ("never", "auto", "always")


@dataclass(frozen=True, kw_only=True)
class PlanDefaults:
    """What planning takes from the worker's settings: the model and its retries, review
    (floors, reviewers, keys, policies and timeouts), requester keys, budgets and the batch
    lane. ``review_floors``: a pipeline's own review floor above ``review_min`` (by its short
    name)."""

    model: str
    temperature: float
    max_attempts: int
    fallback_model: str | None
    fallback_after: int
    timeout_s: float
    backoff_initial_s: float
    backoff_max_s: float
    max_reply_chars: int | None
    review_min: ReviewMode
    review_floors: Mapping[str, ReviewMode]
    allowed_reviewers: list[str] | None
    review_keys: list[ReviewKey]
    requester_keys: list[RequesterKey]
    review_policies: Mapping[str, PolicySpec]
    review_groups: Mapping[str, list[str]]
    review_timeout_s: float
    escalation_timeout_s: float
    review_token_ttl_s: float | None
    max_feedback_chars: int
    reedit_rounds_per_run: int
    notify: bool
    capture_content: bool
    run_budget_usd: float | None
    budget_policy: BudgetPolicy
    budget_timeout_s: float
    tenant_budgets: Mapping[str, float]
    tenant_budgeted: bool
    tenant_max_priority: Mapping[str, int]
    batch: str
    batch_queue_s: float
    batch_wait_s: float
    result_cache: bool
    spill_after_s: float | None

    @classmethod
    def of(cls, settings: Settings) -> PlanDefaults:
        """The planning defaults of ``settings``; a document's fields are model output the
        document itself steers, so its runs get at least ``DOCUMENT_REVIEW_MIN``.

        Raises:
            ConfigError: the reviewer or requester keys are malformed.
        """
        return cls(
            model=settings.llm_model,
            temperature=settings.llm_temperature,
            max_attempts=settings.llm_max_attempts,
            fallback_model=settings.llm_fallback_model,
            fallback_after=settings.llm_fallback_after,
            timeout_s=settings.llm_timeout_s,
            backoff_initial_s=settings.llm_backoff_initial_s,
            backoff_max_s=settings.llm_backoff_max_s,
            max_reply_chars=settings.max_reply_chars,
            review_min=settings.review_min,
            review_floors={PIPELINE_DOCUMENTS: settings.document_review_min},
            allowed_reviewers=settings.allowed_reviewers,
            review_keys=settings.review_keys(),
            requester_keys=settings.requester_keys(),
            review_policies=settings.review_policies,
            review_groups=settings.review_groups,
            review_timeout_s=settings.review_timeout_s,
            escalation_timeout_s=settings.escalation_timeout_s,
            review_token_ttl_s=settings.review_token_ttl_s,
            max_feedback_chars=settings.max_feedback_chars,
            reedit_rounds_per_run=settings.reedit_rounds_per_run,
            notify=settings.notifications_enabled,
            capture_content=settings.otel_capture_content,
            run_budget_usd=settings.run_budget_usd,
            budget_policy=settings.budget_policy,
            budget_timeout_s=settings.budget_decision_timeout_s,
            tenant_budgets=tenant_budgets(settings),
            tenant_budgeted=settings.tenant_budgeted,
            tenant_max_priority=settings.tenant_max_priority,
            batch=settings.llm_batch,
            batch_queue_s=settings.llm_batch_delay_s + BATCH_SUBMISSION_ALLOWANCE_S,
            batch_wait_s=settings.llm_batch_wait_s,
            result_cache=settings.result_cache_on,
            spill_after_s=settings.spill_over_wait_s if settings.spill_over == "on" else None,
        )

    def review_floor(self, pipeline: str) -> ReviewMode:
        """The lowest review level a run of ``pipeline`` (its short name) may have."""
        floor = self.review_floors.get(pipeline, self.review_min)
        return max(self.review_min, floor, key=REVIEW_LEVELS.index)


def tenant_budgets(settings: Settings) -> dict[str, float]:
    """Each tenant's daily budget in USD (``Settings.tenant_budget``): the named tenants', and
    the shared pool of the runs that name none under ``default``."""
    budgets = dict(settings.tenant_budgets_usd)
    pool = settings.tenant_budget(DEFAULT_TENANT)
    if pool is not None:
        budgets[DEFAULT_TENANT] = pool
    return budgets


class PlanActivities:
    """The ``plan_run`` activity: the plan of a run of any pipeline the worker runs
    (``requests``: each pipeline's request model, by its short name), with its rollout variant
    (``rollouts``)."""

    def __init__(
        self,
        defaults: PlanDefaults,
        requests: Mapping[str, type[RequestBase]],
        rollouts: Rollouts = NO_ROLLOUTS,
    ) -> None:
        self._defaults = defaults
        self._requests = dict(requests)
        self._rollouts = rollouts

    @activity.defn(name=contract.ACTIVITY_PLAN_RUN)
    async def plan_run(self, plan_input: PlanRunInput) -> RunPlan:
        """The run's policy and model settings, resolved from the worker's defaults and the
        request, and its rollout variant.

        Raises:
            ApplicationError: ``InvalidRequest`` (non-retryable): the worker has no such
                pipeline, the request does not fit its model, or `planned` refuses it.
        """
        model = self._requests.get(plan_input.pipeline)
        if model is None:
            raise _invalid(f"this worker plans no pipeline {printable(plan_input.pipeline, 80)}")
        try:
            request = model.model_validate(plan_input.request)
        except ValidationError as err:
            raise _invalid(describe_validation_error(err)) from None
        plan = planned(self._defaults, request, pipeline=plan_input.pipeline)
        return await self._rollouts.assigned(plan, plan_input.pipeline)


def planned(defaults: PlanDefaults, request: RequestBase, *, pipeline: str) -> RunPlan:
    """A run's plan for a run of ``pipeline`` (its short name, which picks its review policy
    and floor): every setting the run will use, resolved once from the worker's defaults and
    the request. Called inside an activity (start authentication names the activity's caller).

    Raises:
        ApplicationError: ``InvalidRequest`` when the request's reviewers leave nobody, or fewer
            than the pipeline's review policy needs, its tenant has no budget while tenant
            budgets are on, or it asks for a lane the deployment has not.
    """
    cfg, opts = defaults, request.options
    review, reviewers = review_policy(cfg, request, pipeline=pipeline)
    requested_by, tenant = requester(cfg, request)
    refused = unbudgeted_tenant(tenant, cfg.tenant_budgets.get(tenant), cfg.tenant_budgeted)
    if refused is not None:
        raise _invalid(refused)
    try:
        reviewed = resolve(
            policy_for(cfg.review_policies, pipeline, tenant),
            cfg.review_groups,
            allowed=reviewers,
            requested_by=request.requested_by,
            review_timeout_s=cfg.review_timeout_s,
            escalation_timeout_s=cfg.escalation_timeout_s,
            asked_review_timeout_s=opts.review_timeout_s,
            asked_escalation_timeout_s=opts.escalation_timeout_s,
        )
    except PolicyUnmet as err:
        raise _invalid(str(err)) from None
    return RunPlan(
        # The LLM calls (a request may lower its attempts).
        model=cfg.model,
        temperature=cfg.temperature,
        llm_max_attempts=lowered(cfg.max_attempts, opts.llm_max_attempts),
        fallback_model=cfg.fallback_model,
        fallback_after=cfg.fallback_after,
        llm_timeout_s=cfg.timeout_s,
        backoff_initial_s=cfg.backoff_initial_s,
        backoff_max_s=cfg.backoff_max_s,
        max_reply_chars=cfg.max_reply_chars,
        # Review: the operator's policy as the floor, its timeouts as the ceiling.
        review=review,
        allowed_reviewers=reviewers,
        requested_by=requested_by,
        review_keys=cfg.review_keys,
        review_token_binds_run=True,
        budget_decisions_signed=True,
        quorum_counts_keys=True,
        review_token_ttl_s=cfg.review_token_ttl_s,
        review_timeout_s=reviewed.review_timeout_s,
        escalation_timeout_s=reviewed.escalation_timeout_s,
        **reviewed.plan_fields(),
        max_feedback_chars=cfg.max_feedback_chars,
        reedit_rounds_per_run=cfg.reedit_rounds_per_run,
        notify=cfg.notify,
        capture_content=cfg.capture_content,
        # Budgets: the operator's ceiling, lowered (never raised) by the request.
        tenant=tenant,
        priority=narrowed_priority(opts.priority, cfg.tenant_max_priority.get(tenant)),
        budget_usd=run_budget(cfg.run_budget_usd, opts.max_cost_usd),
        budget_policy=cfg.budget_policy,
        budget_timeout_s=cfg.budget_timeout_s,
        **model_cost(cfg, request),
    )


def review_policy(
    defaults: PlanDefaults, request: RequestBase, *, pipeline: str
) -> tuple[ReviewMode, list[str] | None]:
    """The run's review level and reviewers: the operator's policy is the floor.

    A request may raise the level (``never`` < ``auto`` < ``always``) above the pipeline's
    floor (``REVIEW_MIN``, and ``DOCUMENT_REVIEW_MIN`` for documents) and narrow
    ``ALLOWED_REVIEWERS`` (to names it also allows; to any names when it allows anyone), never
    lower or widen them. ``None`` reviewers = anyone.

    Raises:
        ApplicationError: ``InvalidRequest`` when the request's reviewers leave nobody.
    """
    level = max(request.review, defaults.review_floor(pipeline), key=REVIEW_LEVELS.index)
    operator, asked = defaults.allowed_reviewers, request.options.allowed_reviewers
    if asked is None:
        return level, operator
    reviewers = [name for name in asked if operator is None or name in operator]
    if not reviewers:
        raise _invalid(
            "options.allowed_reviewers names nobody the operator allows (ALLOWED_REVIEWERS): "
            "a request may only narrow the set of reviewers"
        )
    return level, reviewers


def requester(defaults: PlanDefaults, request: RequestBase) -> tuple[str | None, str]:
    """Who asked for the run and whose budget it spends: with start authentication on
    (``REQUESTER_PUBLIC_KEYS``), the requester whose key signed the request's start claim for
    this run's pipeline and namespace (the activity's caller) and that key's tenant; off, what
    the request says.

    Raises:
        ApplicationError: ``InvalidRequest`` when the start claim does not vouch for the request,
            or the request names another requester or tenant than the key's.
    """
    if not defaults.requester_keys:
        return request.requested_by, request.tenant or DEFAULT_TENANT
    info = activity.info()
    found = start_claim_problem(
        request,
        keys=defaults.requester_keys,
        workflow_type=info.workflow_type or "",
        namespace=info.workflow_namespace or info.namespace,
        now=datetime.now(UTC),
    )
    if isinstance(found, str):
        raise _invalid(found)
    if request.requested_by not in (None, found.key_id):
        raise _invalid(
            "requested_by names another requester than the one whose key signed the start"
        )
    if request.tenant not in (None, found.tenant):
        raise _invalid(
            f"tenant {request.tenant!r} is not the tenant of the key that signed the start"
        )
    return found.key_id, found.tenant


def model_cost(defaults: PlanDefaults, request: RequestBase) -> dict[str, Any]:
    """How a run's model calls are made (docs/cost.md): the lane (the request's, else
    ``LLM_BATCH``'s default), how long a batched call waits for its submission and for its
    answer, whether the result cache may answer them (``LLM_RESULT_CACHE_TTL_S``, unless
    the request says no), and the capacity wait past which a synchronous call spills over to
    the batch lane (``SPILL_OVER_WAIT_S``, for a batch-eligible run where ``SPILL_OVER`` is on).

    Raises:
        ApplicationError: ``InvalidRequest`` when the request asks for the batch lane and the
            deployment has none.
    """
    asked = request.options.lane
    if asked == "batch" and defaults.batch == "off":
        raise _invalid(
            "options.lane is batch, and this deployment does not use the provider's batch API "
            "(LLM_BATCH=off): leave the lane out, or ask for sync"
        )
    lane = asked or ("batch" if defaults.batch == "default" else "sync")
    spills = request.options.batch_eligible and lane == "sync"
    return {
        "lane": lane,
        "batch_queue_s": defaults.batch_queue_s,
        "batch_wait_s": defaults.batch_wait_s,
        "result_cache": defaults.result_cache and request.options.result_cache is not False,
        "spill_after_s": defaults.spill_after_s if spills else None,
    }


def lowered(operator: Limit, requested: Limit | None) -> Limit:
    """The operator's limit, or the request's when it is lower: a request (which anyone who may
    start a run writes) may only lower the operator's limits, never raise them."""
    return operator if requested is None else min(operator, requested)


def run_budget(operator: float | None, requested: float | None) -> float | None:
    """A run's cost ceiling: ``RUN_BUDGET_USD`` lowered by ``options.max_cost_usd`` (without
    an operator's ceiling, the request's, if any)."""
    return requested if operator is None else lowered(operator, requested)


def _invalid(message: str) -> ApplicationError:
    return ApplicationError(message, type=errors.INVALID_REQUEST, non_retryable=True)
