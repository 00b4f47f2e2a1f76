"""Judges of live runs: an experiment's rule (the lab's score language, `parse_outcome_rule`)
applied after the run to a sample of its ended runs (completed or failed).

A run is sampled when a hash of its workflow id (the id it was started with, which its
continued runs keep) falls below the judge's ``sample``, so every check samples the same runs;
the hash is salted apart from the one that chooses a variant, so the sample cuts across the
variants alike. A sampled chain's last run that completed is read from its history as the lab
reads an original (`read_outcome`, decoded with the workers' keys) and scored by the rule; one
that failed fails the rule without being read. The judgement is written to the ledger's
``judgements`` once per chain: a chain judged already is not read again. Nothing of this is
on a run's path: it reads histories of runs that have ended.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from temporalio.client import Client
from temporalio.service import RPCError

from aiorch.ops import ledger
from aiorch.ops.lab.expressions import ExpressionError
from aiorch.ops.lab.recorded import NotForkable, read_outcome
from aiorch.ops.lab.scores import Score, ScoreRule, parse_outcome_rule
from aiorch_runtime.experiments import Experiment, Judge

log = logging.getLogger("ai-orchestrator.experiments")

# Set apart from the variant's hash, which is keyed by the experiment id and the workflow id.
_SALT: Final = "judge"
_SCALE: Final = 2**64


class JudgeError(ValueError):
    """An experiment's judge rule that does not parse (the message names the experiment)."""


@dataclass(frozen=True)
class Judgement:
    """One run chain's judgement by an experiment's judge."""

    run_id: str
    chain: str
    experiment: str
    variant: str
    judge: str
    passed: bool
    reason: str | None = None


def sampled(workflow_id: str, fraction: float) -> bool:
    """Whether the run ``workflow_id`` is in a judge's sample of ``fraction`` (0 to 1): the
    same answer for the same run every time."""
    digest = hashlib.sha256(f"{_SALT}\x00{workflow_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE < fraction


def judge_rules(experiments: Mapping[str, Experiment]) -> dict[str, ScoreRule]:
    """Each judged experiment's rule, parsed, by experiment id.

    Raises:
        JudgeError: a rule does not parse, or reads what a run's outcome has not.
    """
    rules: dict[str, ScoreRule] = {}
    for experiment in experiments.values():
        if experiment.judge is None:
            continue
        try:
            rules[experiment.id] = parse_outcome_rule(experiment.judge.rule)
        except ExpressionError as err:
            raise JudgeError(f"EXPERIMENTS: {experiment.id}'s judge: {err}") from None
    return rules


@dataclass(frozen=True)
class _Unjudged:
    workflow_id: str
    run_id: str
    chain: str
    variant: str
    status: str


def _unjudged(engine: Engine, experiment: str, judge: Judge) -> list[_Unjudged]:
    """The experiment's sampled chains whose run completed or failed and that ``judge`` has not
    judged."""
    runs, judged = ledger.runs, ledger.judgements
    done = select(judged.c.chain).where(
        judged.c.experiment == experiment, judged.c.judge == judge.name
    )
    query = (
        select(runs.c.workflow_id, runs.c.run_id, runs.c.chain_id, runs.c.variant, runs.c.status)
        .where(
            runs.c.experiment == experiment,
            # A failed run fails the rule: leaving it out would spare a variant that fails.
            runs.c.status.in_(("completed", "failed")),
            runs.c.chain_id.not_in(done),
        )
        .order_by(runs.c.chain_id)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [_Unjudged(*row) for row in rows if sampled(row.workflow_id, judge.sample)]


def record_judgement(engine: Engine, judgement: Judgement) -> bool:
    """Write ``judgement`` to the ledger; False when its judge judged the chain already
    (nothing is written again)."""
    try:
        with engine.begin() as connection:
            connection.execute(
                ledger.judgements.insert().values(
                    chain=judgement.chain,
                    judge=judgement.judge,
                    run_id=judgement.run_id,
                    experiment=judgement.experiment,
                    variant=judgement.variant,
                    passed=judgement.passed,
                    reason=judgement.reason,
                    at=datetime.now(UTC).replace(tzinfo=None),
                )
            )
    except IntegrityError:
        return False
    return True


async def judge_runs(
    client: Client,
    engine: Engine,
    experiments: Mapping[str, Experiment],
    rules: Mapping[str, ScoreRule],
) -> list[Judgement]:
    """Judge every judged experiment's sampled ended runs not judged yet (see the module
    docstring); returns the judgements written. A run whose history cannot be read now is
    left for the next check."""
    made: list[Judgement] = []
    for experiment in experiments.values():
        rule = rules.get(experiment.id)
        if experiment.judge is None or rule is None:
            continue
        name = experiment.judge.name
        for run in _unjudged(engine, experiment.id, experiment.judge):
            if run.status == "failed":
                score = Score(passed=False, error="the run failed")
            else:
                try:
                    outcome = await read_outcome(client, run.workflow_id, run.run_id)
                except (RPCError, NotForkable) as err:
                    log.warning(
                        "experiment %s: cannot judge %s yet: %s", experiment.id, run.run_id, err
                    )
                    continue
                score = rule.judge(outcome)
            judgement = Judgement(
                run_id=run.run_id,
                chain=run.chain,
                experiment=experiment.id,
                variant=run.variant,
                judge=name,
                passed=score.passed,
                reason=score.error,
            )
            if record_judgement(engine, judgement):
                made.append(judgement)
    return made
