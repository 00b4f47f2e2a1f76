"""Lab runs built by hand, as the forks' driver returns them: the report's input."""

from __future__ import annotations

from typing import Any

from aiorch.ops.lab.outcomes import ForkKind, ForkOutcome, LabRun, ModelUse, RunComparison
from workflows.payloads import Variant


def outcome(kind: ForkKind, run: str = "run-1", **given: Any) -> ForkOutcome:
    """One run's ``kind`` outcome, ended in ``completed`` unless told otherwise."""
    return ForkOutcome(kind=kind, workflow_id=f"{run}-{kind}", **{"state": "completed", **given})


def spent(
    cost_usd: float = 0.0, tokens: tuple[int, int] = (0, 0), latency_s: float = 0.0
) -> ModelUse:
    """Model use of one call costing ``cost_usd`` over ``tokens`` (prompt, completion)."""
    return ModelUse(
        calls=1,
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
        cost_usd=cost_usd,
        latency_s=latency_s,
    )


def comparison(
    run: str = "run-1",
    *,
    pipeline: str = "documents",
    original: dict[str, Any] | None = None,
    baseline: dict[str, Any] | None = None,
    candidate: dict[str, Any] | None = None,
) -> RunComparison:
    """A run's three outcomes, each made of the keyword arguments given for it."""
    return RunComparison(
        pipeline=pipeline,
        from_state="analyze",
        original=outcome("original", run, **(original or {})),
        baseline=outcome("baseline", run, **(baseline or {})),
        candidate=outcome("candidate", run, **(candidate or {})),
    )


def lab_run(comparisons: list[RunComparison], **given: Any) -> LabRun:
    """A lab run over ``comparisons`` onto another model."""
    return LabRun(
        lab_id="lab-0123456789ab",
        select="SELECT run_id FROM runs WHERE pipeline = 'documents'",
        from_state="analyze",
        candidate=Variant(model="gpt-4o-mini"),
        comparisons=comparisons,
        **given,
    )
