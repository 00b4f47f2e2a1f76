"""Review policies as the operator writes them (``REVIEW_POLICIES``, ``REVIEW_GROUPS``): checked
when the settings load, and resolved into each run's plan when it is planned.

``REVIEW_POLICIES`` is a JSON object keyed by a pipeline's short name (``documents``), or by a
pipeline and a tenant (``documents@acme``, which wins for that tenant's runs)::

    {"documents": {"name": "two-of-finance",
                   "stages": [{"group": "finance", "approvals": 2, "timeout_s": 3600},
                              {"group": "finance-leads", "timeout_s": 7200}],
                   "rejections": 1,
                   "auto_approve": [{"name": "clean-small-invoice",
                                     "when": [{"fact": "problems", "op": "==", "value": 0},
                                              {"fact": "fields.total", "op": "<=",
                                               "value": 1000}]}]}}

``REVIEW_GROUPS`` names the members of each group: ``{"finance": ["alice", "bob", "carol"]}``.
Membership comes only from here, never from a request or a reviewer's payload.

A run's plan holds the policy resolved (`resolve`): each stage's reviewers are its group's
members that the run allows (``ALLOWED_REVIEWERS``, narrowed by the request), and a request that
leaves a stage fewer reviewers than its quorum, the requester not counted, is refused. A policy
with one stage escalates to the same group (today's escalation); each stage's ``timeout_s`` is
its own deadline (default ``REVIEW_TIMEOUT_S`` and ``ESCALATION_TIMEOUT_S``), which a request
may only lower.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workflows.payloads import (
    MAX_APPROVALS,
    MAX_REVIEWER_CHARS,
    POLICY_NAME_PATTERN,
    TENANT_PATTERN,
    AutoApproveRule,
    Condition,
    ReviewStage,
)

# A policy's key: a pipeline's short name, optionally @ a tenant.
POLICY_KEY: Final = re.compile(r"^(?P<pipeline>[a-z][a-z0-9_-]{0,63})(@(?P<tenant>[^@]+))?$")
MAX_DEADLINE_S: Final = 365 * 86400
_COMPARISONS: Final = ("<", "<=", ">", ">=")


class PolicyUnmet(ValueError):
    """A request leaves a review stage fewer reviewers than its quorum (one line)."""


class StageSpec(BaseModel):
    """One stage of a policy: the group that decides, how many distinct members approve, and
    its deadline (None: ``REVIEW_TIMEOUT_S`` for the first stage, ``ESCALATION_TIMEOUT_S`` for
    the escalation)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str | None = Field(default=None, pattern=POLICY_NAME_PATTERN)
    approvals: int = Field(default=1, ge=1, le=MAX_APPROVALS)
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_S)


class ConditionSpec(Condition):
    """An auto-approve test as the operator writes it: unknown keys are an error, and the value
    fits the operator (a list for ``in``/``not_in``, a number for comparisons)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _value_fits(self) -> ConditionSpec:
        listed = isinstance(self.value, list)
        if self.op in ("in", "not_in") and not listed:
            raise ValueError(f"{self.fact} {self.op}: the value must be a list")
        if self.op not in ("in", "not_in") and listed:
            raise ValueError(f"{self.fact} {self.op}: the value must be one value, not a list")
        number = isinstance(self.value, int | float) and not isinstance(self.value, bool)
        if self.op in _COMPARISONS and not number:
            raise ValueError(f"{self.fact} {self.op}: the value must be a number")
        return self


class RuleSpec(AutoApproveRule):
    """An auto-approve rule as the operator writes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: list[ConditionSpec] = Field(min_length=1, max_length=20)  # type: ignore[assignment]


class PolicySpec(BaseModel):
    """One review policy (a ``REVIEW_POLICIES`` value)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, pattern=POLICY_NAME_PATTERN)
    stages: list[StageSpec] = Field(
        default_factory=lambda: [StageSpec()], min_length=1, max_length=2
    )
    rejections: int = Field(default=1, ge=1, le=MAX_APPROVALS)
    auto_approve: list[RuleSpec] = Field(default_factory=list, max_length=20)

    @field_validator("auto_approve")
    @classmethod
    def _distinct_rules(cls, rules: list[RuleSpec]) -> list[RuleSpec]:
        names = [rule.name for rule in rules]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"rule names repeat: {', '.join(repeated)}")
        return rules


def pipeline_of(key: str) -> str:
    """The pipeline a policy key names (``documents@acme`` -> ``documents``)."""
    match = POLICY_KEY.match(key)
    return match["pipeline"] if match else key


def check_groups(groups: Mapping[str, Sequence[str]]) -> None:
    """Raises ValueError (one line) for a group name or member that cannot be one."""
    for name, members in groups.items():
        if not re.fullmatch(POLICY_NAME_PATTERN, name):
            raise ValueError(f"{name[:70]!r} is not a group name ({POLICY_NAME_PATTERN})")
        if not members:
            raise ValueError(f"group {name!r} has no members")
        for member in members:
            if not member.strip() or len(member) > MAX_REVIEWER_CHARS:
                raise ValueError(f"group {name!r} holds a member name that cannot be a reviewer")


def check_policies(policies: Mapping[str, PolicySpec], groups: Mapping[str, Sequence[str]]) -> None:
    """Raises ValueError (one line) for a key that names no pipeline and tenant, a group no
    ``REVIEW_GROUPS`` entry has, or a stage needing more approvals than its group has members.
    Whether the pipeline exists is the worker's check (it knows its pipelines)."""
    for key, policy in policies.items():
        match = POLICY_KEY.match(key)
        tenant = match["tenant"] if match else None
        if match is None or (tenant is not None and not re.fullmatch(TENANT_PATTERN, tenant)):
            raise ValueError(f"{key[:70]!r} is not PIPELINE or PIPELINE@TENANT")
        for number, stage in enumerate(policy.stages, start=1):
            if stage.group is None:
                continue
            if stage.group not in groups:
                raise ValueError(
                    f"{key}: stage {number} names group {stage.group!r}, which "
                    "REVIEW_GROUPS does not define"
                )
            size = len(set(groups[stage.group]))
            if size < stage.approvals:
                raise ValueError(
                    f"{key}: stage {number} needs {stage.approvals} approvals from group "
                    f"{stage.group!r}, which has {size} member(s)"
                )


def policy_for(
    policies: Mapping[str, PolicySpec], pipeline: str, tenant: str
) -> tuple[str, PolicySpec] | None:
    """The policy for ``pipeline``'s runs of ``tenant`` (its key and itself): the tenant's own,
    else the pipeline's, else None."""
    for key in (f"{pipeline}@{tenant}", pipeline):
        if key in policies:
            return key, policies[key]
    return None


def _lowered(operator: float, requested: float | None) -> float:
    return operator if requested is None else min(operator, requested)


@dataclass(frozen=True)
class ResolvedReview:
    """A run's review, as its plan holds it: the two deadlines, and the policy's fields
    (`plan_fields`; none without a policy)."""

    review_timeout_s: float
    escalation_timeout_s: float
    name: str | None = None
    stages: list[ReviewStage] = field(default_factory=list)
    rejections: int = 1
    rules: list[AutoApproveRule] = field(default_factory=list)

    def plan_fields(self) -> dict[str, Any]:
        """The plan's review-policy fields."""
        return {
            "review_policy": self.name,
            "review_stages": self.stages,
            "rejections": self.rejections,
            "auto_approve": self.rules,
        }


def resolve(
    found: tuple[str, PolicySpec] | None,
    groups: Mapping[str, Sequence[str]],
    *,
    allowed: list[str] | None,
    requested_by: str | None,
    review_timeout_s: float,
    escalation_timeout_s: float,
    asked_review_timeout_s: float | None = None,
    asked_escalation_timeout_s: float | None = None,
) -> ResolvedReview:
    """A run's review under the policy ``found`` (None: the engine's rule, with the operator's
    deadlines lowered by the request's).

    Raises:
        PolicyUnmet: a stage would have fewer reviewers who may decide than its quorum.
    """
    if found is None:
        return ResolvedReview(
            review_timeout_s=_lowered(review_timeout_s, asked_review_timeout_s),
            escalation_timeout_s=_lowered(escalation_timeout_s, asked_escalation_timeout_s),
        )
    key, policy = found
    specs = [*policy.stages, policy.stages[0]][:2]
    stages: list[ReviewStage] = []
    for number, spec in enumerate(specs, start=1):
        members = list(dict.fromkeys(groups[spec.group])) if spec.group is not None else None
        reviewers = members
        if allowed is not None:
            reviewers = [name for name in (members or allowed) if name in allowed]
        if reviewers is not None:
            deciding = [name for name in reviewers if name != requested_by]
            if len(deciding) < spec.approvals:
                where = f"group {spec.group}" if spec.group else "the allowed reviewers"
                raise PolicyUnmet(
                    f"review policy {policy.name or key}, stage {number}: {where} leaves "
                    f"{len(deciding)} reviewer(s) who may decide this run (within "
                    f"options.allowed_reviewers, the requester not counted); it needs "
                    f"{spec.approvals} approvals"
                )
        stages.append(ReviewStage(group=spec.group, reviewers=reviewers, approvals=spec.approvals))
    escalation = policy.stages[1].timeout_s if len(policy.stages) > 1 else None
    return ResolvedReview(
        review_timeout_s=_lowered(specs[0].timeout_s or review_timeout_s, asked_review_timeout_s),
        escalation_timeout_s=_lowered(
            escalation or escalation_timeout_s, asked_escalation_timeout_s
        ),
        name=policy.name or key,
        stages=stages,
        rejections=policy.rejections,
        rules=[AutoApproveRule.model_validate(rule.model_dump()) for rule in policy.auto_approve],
    )
