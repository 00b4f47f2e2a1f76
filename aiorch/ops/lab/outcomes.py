"""What the replay lab learns of one recorded run: how the original ended, and how its two
forks did from the fork state (the baseline re-runs the original's own settings, so the report
can tell the candidate's change from the model's own variance). The forks' driver fills these
in; the report reads nothing else."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workflows.payloads import Variant

ForkKind = Literal["original", "baseline", "candidate"]


class _Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelUse(_Outcome):
    """The model calls a run (or a fork, from its fork state) made."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


class ForkOutcome(_Outcome):
    """How one run or fork ended, as the report compares them.

    ``text`` is a reply (the LLM pipeline), ``fields`` extracted data (documents and pipeline
    files that extract); ``problems`` what validation found; ``needs_review`` whether the run
    went (or, for a fork, would have gone) to a reviewer, ``waits`` where a fork would have
    waited and why (a fork never waits). ``error`` is a fork that failed, or could not start.
    """

    kind: ForkKind
    workflow_id: str
    run_id: str | None = None
    state: str
    model: str | None = None
    text: str | None = None
    fields: dict[str, Any] | None = None
    problems: list[str] = Field(default_factory=list)
    needs_review: bool = False
    waits: list[str] = Field(default_factory=list)
    use: ModelUse = Field(default_factory=ModelUse)
    error: str | None = None


class RunComparison(_Outcome):
    """One recorded run and its forks: the original as recorded, the baseline, the candidate."""

    pipeline: str
    from_state: str
    original: ForkOutcome
    baseline: ForkOutcome
    candidate: ForkOutcome


class LabRun(_Outcome):
    """A lab run as a whole: what it forked, onto what, and every run's comparison."""

    lab_id: str
    select: str
    from_state: str
    candidate: Variant
    comparisons: list[RunComparison]
    skipped: dict[str, str] = Field(
        default_factory=dict, description="Selected runs not forked, by run id, with why"
    )
    spend_cap_usd: float | None = None
