"""Each variant's runs and signals, read from the ledger (its ``runs`` rows carry the
experiment and variant a run was planned with).

A run is counted once per chain (a continued run's rows share its chain), and judged once its
chain ended. Its signals, each counted once per judged run:

- **problem**: a model reply could not be used (``LlmMalformedReply``, ``LlmReplyTooLarge``,
  ``LlmRefused``) or the run failed;
- **correction**: a reviewer corrected a field of its result;
- **rejection**: a reviewer rejected it or sent it back for a reedit;
- **approval**: a reviewer approved it.

and, for an experiment with a judge, per run its judge judged (``scored``): **score_fail**,
the judgement failed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from sqlalchemy import Engine, case, func, or_, select

from aiorch.ops import ledger as tables
from aiorch_runtime.experiments import Experiment, Signal
from workflows import errors

ENDED: Final = frozenset({"completed", "failed", "cancelled", "terminated", "timed_out"})
UNUSABLE_REPLIES: Final = (
    errors.LLM_MALFORMED_REPLY,
    errors.LLM_REPLY_TOO_LARGE,
    errors.LLM_REFUSED,
)
REJECTIONS: Final = ("reject", "reedit")


@dataclass(frozen=True)
class VariantSignals:
    """One variant's runs (``runs``: planned, ``judged``: ended) and how many of its judged
    runs had each signal; ``scored``: its runs the experiment's judge judged, ``score_fails``:
    how many of those failed."""

    experiment: str
    variant: str
    runs: int = 0
    judged: int = 0
    problems: int = 0
    corrections: int = 0
    rejections: int = 0
    approvals: int = 0
    scored: int = 0
    score_fails: int = 0

    def judged_for(self, signal: Signal | str) -> int:
        """The runs ``signal`` is counted over: the judge's for ``score_fail``, else the
        ended ones."""
        return self.scored if signal == "score_fail" else self.judged

    def rate(self, signal: Signal | str) -> float:
        """The share of its runs (`judged_for`) with ``signal`` (``problem``,
        ``correction``, ``rejection``, ``approval``, ``score_fail``); 0 before any."""
        count: int = getattr(self, f"{signal}s")
        over = self.judged_for(signal)
        return count / over if over else 0.0

    @property
    def pass_rate(self) -> float | None:
        """The share of its judge's judgements that passed; None before any."""
        return 1 - self.score_fails / self.scored if self.scored else None


def _chains(engine: Engine, experiment: str) -> dict[str, tuple[str, bool]]:
    """The experiment's run chains: their variant and whether they ended."""
    runs = tables.runs
    query = select(runs.c.chain_id, runs.c.variant, runs.c.status).where(
        runs.c.experiment == experiment
    )
    chains: dict[str, tuple[str, bool]] = {}
    with engine.connect() as connection:
        for chain_id, variant, status in connection.execute(query):
            _, ended = chains.get(chain_id, (variant, False))
            chains[chain_id] = (variant, ended or status in ENDED)
    return chains


def _flagged(engine: Engine, experiment: str) -> dict[str, set[str]]:
    """The experiment's chains with each signal."""
    runs, calls = tables.runs, tables.model_calls
    decisions, corrections = tables.review_decisions, tables.corrections
    mine = runs.c.experiment == experiment
    unusable = or_(*(calls.c.error.startswith(f"{kind}:") for kind in UNUSABLE_REPLIES))
    queries = {
        "problem": select(runs.c.chain_id)
        .join(calls, calls.c.run_id == runs.c.run_id)
        .where(mine, unusable),
        "failure": select(runs.c.chain_id).where(mine, runs.c.status == "failed"),
        "correction": select(corrections.c.chain_id)
        .join(runs, runs.c.run_id == corrections.c.run_id)
        .where(mine),
        "rejection": select(decisions.c.chain_id)
        .join(runs, runs.c.run_id == decisions.c.run_id)
        .where(mine, decisions.c.decision.in_(REJECTIONS)),
        "approval": select(decisions.c.chain_id)
        .join(runs, runs.c.run_id == decisions.c.run_id)
        .where(mine, decisions.c.decision == "approve"),
    }
    with engine.connect() as connection:
        found = {
            signal: set(connection.execute(query).scalars()) for signal, query in queries.items()
        }
    found["problem"] |= found.pop("failure")
    return found


def _scores(engine: Engine, experiment: Experiment) -> dict[str, tuple[int, int]]:
    """Each variant's judgements by the experiment's judge: how many, how many failed."""
    if experiment.judge is None:
        return {}
    judged = tables.judgements
    failed = func.sum(case((judged.c.passed.is_(False), 1), else_=0))
    query = (
        select(judged.c.variant, func.count(), failed)
        .where(judged.c.experiment == experiment.id, judged.c.judge == experiment.judge.name)
        .group_by(judged.c.variant)
    )
    with engine.connect() as connection:
        return {
            variant: (count, int(fails or 0)) for variant, count, fails in connection.execute(query)
        }


def variant_signals(engine: Engine, experiment: Experiment) -> list[VariantSignals]:
    """Each of ``experiment``'s variants' runs and signals (the configured variants first, in
    their order, then any the ledger holds that the experiment no longer names)."""
    chains = _chains(engine, experiment.id)
    flagged = _flagged(engine, experiment.id)
    scores = _scores(engine, experiment)
    names = [arm.name for arm in experiment.variants]
    names += sorted({variant for variant, _ in chains.values()} - set(names))
    return [
        replace(
            _count(experiment.id, name, chains, flagged),
            scored=scores.get(name, (0, 0))[0],
            score_fails=scores.get(name, (0, 0))[1],
        )
        for name in names
    ]


def _count(
    experiment: str,
    variant: str,
    chains: dict[str, tuple[str, bool]],
    flagged: dict[str, set[str]],
) -> VariantSignals:
    mine = [chain for chain, (name, _) in chains.items() if name == variant]
    judged = {chain for chain in mine if chains[chain][1]}
    return VariantSignals(
        experiment=experiment,
        variant=variant,
        runs=len(mine),
        judged=len(judged),
        problems=len(judged & flagged["problem"]),
        corrections=len(judged & flagged["correction"]),
        rejections=len(judged & flagged["rejection"]),
        approvals=len(judged & flagged["approval"]),
    )
