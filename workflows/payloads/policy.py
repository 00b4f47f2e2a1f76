"""Review policies as a run carries them: the stages of its review (who decides, how many
approvals), the rules that approve a result without a reviewer, the votes a round has counted,
what a run shows of its progress, and the corrections its reviewers made (kept as data).

The operator writes policies (``REVIEW_POLICIES``, ``REVIEW_GROUPS``); the worker resolves them
into the run's plan when it is planned (``RunPolicy``), so a run keeps the policy it started
with and a request can only narrow it. A plan without stages keeps the engine's first rule: one
decision from one allowed reviewer decides a round (docs/reviews.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import Field

from workflows.payloads._base import Decision, _Open

__all__ = [
    "FACT_PATTERN",
    "MAX_APPROVALS",
    "POLICY_NAME_PATTERN",
    "AutoApproveRule",
    "Condition",
    "Correction",
    "CorrectionKind",
    "FactValue",
    "Operator",
    "ReviewProgress",
    "ReviewStage",
    "Vote",
    "changed_fields",
]

# A policy's, a group's or a rule's name: a metric label and a history detail, so short and plain.
POLICY_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# A fact's name: ``problems``, ``confidence``, ``fields.total``.
FACT_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$"
# More approvals than this in one round is no review policy anyone needs.
MAX_APPROVALS: Final = 20

FactValue = str | int | float | bool | None
Operator = Literal["==", "!=", "<", "<=", ">", ">=", "in", "not_in"]
CorrectionKind = Literal["reedit", "correct"]


class Condition(_Open):
    """One test of an auto-approve rule: ``fact`` (something the pipeline says about the result
    under review) compared with ``value`` by ``op``. A fact the result does not have never
    passes a test."""

    fact: str = Field(pattern=FACT_PATTERN, max_length=128)
    op: Operator = "=="
    value: FactValue | list[FactValue] = None


class AutoApproveRule(_Open):
    """Approves a result whose facts pass every test in ``when``, with no reviewer; the history
    says ``approved by rule <name>``. A rule can only approve."""

    name: str = Field(pattern=POLICY_NAME_PATTERN)
    when: list[Condition] = Field(min_length=1, max_length=20)


class ReviewStage(_Open):
    """One stage of a review's escalation chain as the plan holds it (stage 0: the review;
    stage 1: its escalation): the group whose members decide (None: no group), who may decide
    (the group's members the run allows, resolved when the run was planned; None: anyone the
    plan allows) and how many distinct reviewers must approve."""

    group: str | None = None
    reviewers: list[str] | None = None
    approvals: int = Field(default=1, ge=1, le=MAX_APPROVALS)


class Vote(_Open):
    """A reviewer's approval or rejection that the round counted without deciding it (a quorum
    not reached yet), and the key that signed it (so a revoked key's votes stop counting)."""

    reviewer: str
    decision: Decision
    at: datetime
    key_id: str | None = None


class ReviewProgress(_Open):
    """Where a waiting round stands under its policy: the stage (and its group), who may decide
    now, who approved and rejected so far, and how many of each end the round."""

    policy: str | None = None
    stage: int = 0
    stages: int = 2
    group: str | None = None
    reviewers: list[str] | None = None
    approvals: list[str] = Field(default_factory=list)
    approvals_needed: int = 1
    rejections: list[str] = Field(default_factory=list)
    rejections_needed: int = 1

    def describe(self) -> str:
        """``1 of 2 approvals: alice`` (and the rejections, when a reject needs a quorum and
        one came)."""
        text = f"{len(self.approvals)} of {self.approvals_needed} approvals"
        if self.approvals:
            text += ": " + ", ".join(self.approvals)
        if self.rejections_needed > 1 and self.rejections:
            text += (
                f"; {len(self.rejections)} of {self.rejections_needed} rejections: "
                + ", ".join(self.rejections)
            )
        return text

    def voted(self, reviewer: str) -> Decision | None:
        """What ``reviewer`` already voted this round, if anything."""
        if reviewer in self.approvals:
            return "approve"
        if reviewer in self.rejections:
            return "reject"
        return None


class Correction(_Open):
    """A reviewer's correction, kept as evaluation data: a reedit (the feedback, the result
    before and the one the model gave after it) or corrected fields (before and after), with the
    reviewer, the round, and the pipeline (its short name, ``llm``) and its version. A reedit is
    ``answered`` once the run has a new result, its ``after`` (a run that ended without one
    leaves it unanswered). Texts and fields too large to keep are left out (``cut``)."""

    kind: CorrectionKind
    reviewer: str
    review_round: int
    at: datetime
    pipeline: str
    pipeline_version: str
    feedback: str | None = None
    before: str | dict[str, Any] | None = None
    after: str | dict[str, Any] | None = None
    answered: bool = False
    cut: bool = False


def changed_fields(before: object, after: object) -> list[str]:
    """The top-level fields whose values differ between two objects, in ``before``'s order
    then ``after``'s new ones (none unless both are objects): what a correction changed, as
    its history entry counts it and ``aiorch reviews export`` lists it."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    names = [*before, *(name for name in after if name not in before)]
    return [name for name in names if before.get(name) != after.get(name)]
