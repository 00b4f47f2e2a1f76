"""What every run settles once, when it is planned, and the engine then applies
(``RunPolicy``), declared by concern: review deadlines, retries, content capture, review,
budgets and the batch lane. A pipeline's plan extends it.

Pydantic lays a model's fields out from its last base to its first, so ``RunPolicy`` lists
its concerns in reverse: a plan's JSON keeps the order it had when they were one flat list.
"""

from __future__ import annotations

from typing import Final

from pydantic import AliasChoices, ConfigDict, Field

from workflows.payloads._base import (
    DEFAULT_TENANT,
    MAX_FEEDBACK_CHARS,
    BudgetPolicy,
    ReviewMode,
    _Open,
)
from workflows.payloads.client import ReviewKey
from workflows.payloads.policy import AutoApproveRule, ReviewStage

__all__ = [
    "DEFAULT_PRIORITY",
    "BatchPlan",
    "BudgetPlan",
    "ContentCapture",
    "RetryPlan",
    "ReviewDeadlines",
    "ReviewPlan",
    "RunPolicy",
]


class ReviewDeadlines(_Open):
    """How long a review waits for a reviewer, then its escalation."""

    review_timeout_s: float
    escalation_timeout_s: float


class RetryPlan(_Open):
    """How often any step's failing call is tried (``max_attempts``, the worker's
    ``LLM_MAX_ATTEMPTS`` lowered by the request's ``options.llm_max_attempts``) and how it
    backs off in between.

    Plans recorded before the bound was named for any step call it ``llm_max_attempts``: both
    names are read, and it is written under that old name, so a plan's JSON is the same for a
    worker of either version (a rolling deploy, a run continued as new across it). Either name
    builds one in code."""

    # Written by alias only for this model: no other plan field has one.
    model_config = ConfigDict(serialize_by_alias=True)

    max_attempts: int = Field(
        validation_alias=AliasChoices("max_attempts", "llm_max_attempts"),
        serialization_alias="llm_max_attempts",
    )
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0


class ContentCapture(_Open):
    """``OTEL_CAPTURE_CONTENT`` of the worker that built the plan: prompt/reply text in spans."""

    capture_content: bool = False


class ReviewPlan(_Open):
    """The review policy, resolved from the request and the worker's floor (``REVIEW_MIN``,
    ``ALLOWED_REVIEWERS``, ``REVIEW_PUBLIC_KEYS``): who may review, whether review is required,
    and the public keys that authenticate reviewers (none = authentication off); and, where the
    operator set one for the pipeline (``REVIEW_POLICIES``), the review policy: the stages of
    its escalation chain (each a group and its quorum), how many rejections end a round, and
    the rules that approve a result without a reviewer."""

    review: ReviewMode = "auto"
    allowed_reviewers: list[str] | None = None
    requested_by: str | None = None
    review_keys: list[ReviewKey] = Field(default_factory=list)
    # Plans built since review tokens name the run chain: a token must name this chain's first
    # run (older plans, in recorded histories, took tokens naming the workflow id alone), and
    # may live at most review_token_ttl_s (REVIEW_TOKEN_TTL_S; None: any lifetime).
    review_token_binds_run: bool = False
    review_token_ttl_s: float | None = None
    # Plans built since budget decisions are signed: with review keys, a budget decision must
    # carry a token signed by a key allowed to sign for its operator (older plans took any).
    budget_decisions_signed: bool = False
    # Plans built since a quorum counts keys: a key that signs for named reviewers casts one
    # vote a round whichever of its names it signs (older plans counted each name).
    quorum_counts_keys: bool = False
    max_feedback_chars: int = MAX_FEEDBACK_CHARS
    # The operator's review policy (REVIEW_POLICIES) by name, and its two stages (the review,
    # then its escalation) resolved against REVIEW_GROUPS and the request. Plans without
    # stages (every plan before policies, and runs of a pipeline with none) keep the engine's
    # first rule: one decision from one reviewer the plan allows decides a round.
    review_policy: str | None = None
    review_stages: list[ReviewStage] = Field(default_factory=list, max_length=2)
    rejections: int = 1
    auto_approve: list[AutoApproveRule] = Field(default_factory=list)
    reedit_rounds_per_run: int = 50
    # REVIEW_WEBHOOK_URL is set on the worker that built the plan: tell reviewers (by webhook)
    # when the run starts waiting for review and when it escalates. Off = no extra activity.
    notify: bool = False


# The priority of a run that asks for none, as Temporal's task queues and the capacity store
# serve it: the middle of 1 (most urgent) to 5.
DEFAULT_PRIORITY: Final = 3


class BudgetPlan(_Open):
    """Capacity and budgets, resolved from the request and the worker's settings: whose daily
    budget the run spends, its cost ceiling (``RUN_BUDGET_USD`` lowered by
    ``options.max_cost_usd``; None = none), what a call that would cross a budget does, and how
    long an operator has to decide. ``priority``: how urgent the run's model calls are, 1 (most)
    to 5, narrowed by ``TENANT_MAX_PRIORITY`` (None: none asked, which is 3 and changes no
    command the run sends)."""

    tenant: str = DEFAULT_TENANT
    priority: int | None = None
    budget_usd: float | None = None
    budget_policy: BudgetPolicy = "wait"
    budget_timeout_s: float = 86400.0


class BatchPlan(_Open):
    """How long the run waits in ``await_batch`` for the provider's batch to answer its call
    (``LLM_BATCH_WAIT_S``), before it takes its retry path."""

    batch_wait_s: float = 180_000.0


class RunPolicy(
    BatchPlan, BudgetPlan, ReviewPlan, ContentCapture, RetryPlan, ReviewDeadlines, _Open
):
    """What every run settles once, when it is planned, and the engine then applies: review
    deadlines, retries, content capture, review, budgets and the batch lane (one base each)."""
