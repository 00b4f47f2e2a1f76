"""The replay lab's report, built from a `LabRun`: per run, what the candidate changed against
the original and against the baseline, each outcome's problems, review and model use, and the
deltas candidate - baseline; in total, each kind's rates, sums and medians.

Rates are over every compared run: a fork that failed counts as one with a problem (and in
``error_rate``), and its output as changed. ``changed_rate`` is the share whose output differs
from the original's, so the baseline's is the model's own variance. Sums are rounded to what
they can mean (dollars to 1e-9, seconds to 1e-6), so a delta at a threshold compares as written.
`aiorch.ops.lab.report_markdown` and `report_html` render it; ``model_dump_json`` is its JSON.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from aiorch.ops.lab.outcomes import ForkKind, ForkOutcome, LabRun, RunComparison
from aiorch.ops.lab.report_diffs import OutputDiff, differs, output_diff
from aiorch.ops.lab.scores import KINDS, Score, ScoreRule
from workflows.payloads import Variant

_DOLLARS: Final = 9
_SECONDS: Final = 6


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ForkReport(_Report):
    """One outcome of a run: as the forks' driver gave it, whether its output differs from
    the original's, and its score (with ``--score``)."""

    outcome: ForkOutcome
    changed: bool
    score: Score | None = None

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens of its model calls."""
        return self.outcome.use.prompt_tokens + self.outcome.use.completion_tokens

    @property
    def has_problems(self) -> bool:
        """Validation found a problem, or it failed."""
        return bool(self.outcome.problems) or self.outcome.error is not None


class RunReport(_Report):
    """One recorded run: its three outcomes, the candidate's output against the original's and
    the baseline's, and its deltas candidate - baseline."""

    workflow_id: str
    pipeline: str
    original: ForkReport
    baseline: ForkReport
    candidate: ForkReport
    vs_original: OutputDiff
    vs_baseline: OutputDiff
    tokens_delta: int
    cost_delta_usd: float
    latency_delta_s: float


class KindTotals(_Report):
    """One kind of outcome (original, baseline or candidate) over every compared run: counts,
    rates (none without a run; ``score_rate`` none without a score), sums and medians."""

    runs: int
    failed: int
    with_problems: int
    needs_review: int
    changed: int
    scored: int
    passed: int
    problems_rate: float | None
    needs_review_rate: float | None
    error_rate: float | None
    changed_rate: float | None
    score_rate: float | None
    tokens: int
    cost_usd: float
    latency_s: float
    median_tokens: float | None
    median_cost_usd: float | None
    median_latency_s: float | None


class Deltas(_Report):
    """Candidate - baseline over every compared run: the sums' differences, and the medians of
    the runs' differences (none without a run)."""

    tokens_delta: int
    cost_delta_usd: float
    latency_delta_s: float
    median_tokens_delta: float | None
    median_cost_delta_usd: float | None
    median_latency_delta_s: float | None


class GateOutcome(_Report):
    """One ``--fail-if`` rule: whether it held, and the value of each metric it read."""

    rule: str
    held: bool
    values: dict[str, float]


class LabReport(_Report):
    """The whole report: what was forked onto what, each run, each kind's totals, the deltas,
    and the ``--fail-if`` rules' outcomes once checked (`aiorch.ops.lab.gates`)."""

    lab_id: str
    select: str
    from_state: str
    candidate: Variant
    score_rule: str | None = None
    spend_cap_usd: float | None = None
    runs: list[RunReport]
    skipped: dict[str, str] = Field(default_factory=dict)
    totals: dict[ForkKind, KindTotals]
    deltas: Deltas
    gates: list[GateOutcome] = Field(default_factory=list)

    @property
    def held(self) -> list[GateOutcome]:
        """The ``--fail-if`` rules that held: the lab run fails when there is one."""
        return [gate for gate in self.gates if gate.held]


def _rate(count: int, runs: int) -> float | None:
    return None if runs == 0 else count / runs


def _median(values: Sequence[float], digits: int | None = None) -> float | None:
    if not values:
        return None
    middle = statistics.median(values)
    return middle if digits is None else round(middle, digits)


def _fork(comparison: RunComparison, kind: ForkKind, rule: ScoreRule | None) -> ForkReport:
    outcome: ForkOutcome = getattr(comparison, kind)
    return ForkReport(
        outcome=outcome,
        changed=kind != "original" and differs(outcome, comparison.original),
        score=None if rule is None else rule.score(comparison, kind),
    )


def run_report(comparison: RunComparison, rule: ScoreRule | None = None) -> RunReport:
    """One run's part of the report."""
    original, baseline, candidate = (_fork(comparison, kind, rule) for kind in KINDS)
    use, base = candidate.outcome.use, baseline.outcome.use
    return RunReport(
        workflow_id=comparison.original.workflow_id,
        pipeline=comparison.pipeline,
        original=original,
        baseline=baseline,
        candidate=candidate,
        vs_original=output_diff(comparison.original, comparison.candidate),
        vs_baseline=output_diff(comparison.baseline, comparison.candidate),
        tokens_delta=candidate.tokens - baseline.tokens,
        cost_delta_usd=round(use.cost_usd - base.cost_usd, _DOLLARS),
        latency_delta_s=round(use.latency_s - base.latency_s, _SECONDS),
    )


def kind_totals(forks: Sequence[ForkReport]) -> KindTotals:
    """One kind's totals over its outcomes in every run."""
    runs = len(forks)
    scores = [fork.score for fork in forks if fork.score is not None]

    def count(test: Callable[[ForkReport], bool]) -> int:
        return sum(1 for fork in forks if test(fork))

    failed = count(lambda fork: fork.outcome.error is not None)
    with_problems = count(lambda fork: fork.has_problems)
    review = count(lambda fork: fork.outcome.needs_review)
    changed = count(lambda fork: fork.changed)
    passed = sum(1 for score in scores if score.passed)
    costs = [fork.outcome.use.cost_usd for fork in forks]
    latencies = [fork.outcome.use.latency_s for fork in forks]
    tokens = [fork.tokens for fork in forks]
    return KindTotals(
        runs=runs,
        failed=failed,
        with_problems=with_problems,
        needs_review=review,
        changed=changed,
        scored=len(scores),
        passed=passed,
        problems_rate=_rate(with_problems, runs),
        needs_review_rate=_rate(review, runs),
        error_rate=_rate(failed, runs),
        changed_rate=_rate(changed, runs),
        score_rate=_rate(passed, len(scores)),
        tokens=sum(tokens),
        cost_usd=round(sum(costs), _DOLLARS),
        latency_s=round(sum(latencies), _SECONDS),
        median_tokens=_median(tokens),
        median_cost_usd=_median(costs, _DOLLARS),
        median_latency_s=_median(latencies, _SECONDS),
    )


def deltas(runs: Sequence[RunReport], totals: dict[ForkKind, KindTotals]) -> Deltas:
    """Candidate - baseline, in sum and as the median run's."""
    candidate, baseline = totals["candidate"], totals["baseline"]
    return Deltas(
        tokens_delta=candidate.tokens - baseline.tokens,
        cost_delta_usd=round(candidate.cost_usd - baseline.cost_usd, _DOLLARS),
        latency_delta_s=round(candidate.latency_s - baseline.latency_s, _SECONDS),
        median_tokens_delta=_median([run.tokens_delta for run in runs]),
        median_cost_delta_usd=_median([run.cost_delta_usd for run in runs], _DOLLARS),
        median_latency_delta_s=_median([run.latency_delta_s for run in runs], _SECONDS),
    )


def build_report(lab: LabRun, rule: ScoreRule | None = None) -> LabReport:
    """The report of ``lab``, each outcome scored by ``rule`` when one is given."""
    runs = [run_report(comparison, rule) for comparison in lab.comparisons]
    totals = {kind: kind_totals([getattr(run, kind) for run in runs]) for kind in KINDS}
    return LabReport(
        lab_id=lab.lab_id,
        select=lab.select,
        from_state=lab.from_state,
        candidate=lab.candidate,
        score_rule=None if rule is None else rule.text,
        spend_cap_usd=lab.spend_cap_usd,
        runs=runs,
        skipped=lab.skipped,
        totals=totals,
        deltas=deltas(runs, totals),
    )
