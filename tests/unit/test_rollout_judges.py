"""Judges of rollouts, short of a live run: which run chains a judge samples, the rule over one
run's outcome (the lab's language), the ``judgements`` rows in a real SQLite ledger (one per
chain and judge), and the stop rule over them (``score_fail``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, select

from aiorch.ops import ledger
from aiorch.ops.experiments import (
    JudgeError,
    Judgement,
    breaches,
    judge_rules,
    record_judgement,
    sampled,
    variant_signals,
)
from aiorch.ops.lab.expressions import ExpressionError
from aiorch.ops.lab.outcomes import ForkOutcome
from aiorch.ops.lab.scores import parse_outcome_rule
from aiorch_runtime.experiments import Experiment

WORKFLOW_IDS = [f"req-{n:05d}" for n in range(4000)]


def judged(rule: str = "problems == 0", **stop: Any) -> Experiment:
    return Experiment.model_validate(
        {
            "id": "prompt-v2",
            "variants": [{"name": "A", "weight": 50}, {"name": "B", "weight": 50, "model": "m"}],
            "stop": {"signal": "score_fail", **stop},
            "judge": {"name": "polite", "rule": rule, "sample": 0.2},
        }
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    opened = ledger.open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield opened
    opened.dispose()


def judgement(chain: str, variant: str, *, passed: bool, judge: str = "polite") -> Judgement:
    return Judgement(
        run_id=f"{chain}-last",
        chain=chain,
        experiment="prompt-v2",
        variant=variant,
        judge=judge,
        passed=passed,
        reason=None if passed else "the rule gave false",
    )


def test_the_sample_is_the_same_every_time_and_near_its_fraction() -> None:
    """A run is in the sample or not the same way on every call; over 4000 runs a 20%
    sample takes 20% within two points, 0 takes none and 1 takes all."""
    first = [found for found in WORKFLOW_IDS if sampled(found, 0.2)]
    assert first == [found for found in WORKFLOW_IDS if sampled(found, 0.2)]
    assert abs(len(first) / len(WORKFLOW_IDS) - 0.2) < 0.02
    assert not any(sampled(workflow_id, 0.0) for workflow_id in WORKFLOW_IDS)
    assert all(sampled(workflow_id, 1.0) for workflow_id in WORKFLOW_IDS)


def test_the_sample_cuts_across_the_variants_alike() -> None:
    """The sample is hashed apart from the variant's choice: of a 10% canary's B runs, about
    as large a share is sampled as of A's."""
    canary = Experiment.model_validate(
        {"id": "c", "variants": [{"name": "A", "weight": 90}, {"name": "B", "weight": 10}]}
    )
    by_variant: dict[str, list[bool]] = {"A": [], "B": []}
    for workflow_id in WORKFLOW_IDS:
        by_variant[canary.choose(workflow_id).variant.name].append(sampled(workflow_id, 0.2))
    shares = {name: sum(found) / len(found) for name, found in by_variant.items()}
    assert abs(shares["A"] - 0.2) < 0.03 and abs(shares["B"] - 0.2) < 0.06


def test_a_judge_rule_reads_the_runs_own_outcome() -> None:
    """A judge's rule reads the outcome's fields, text, problems and review; a failed run
    fails it; naming another outcome (``original.text``) is refused as the rule is read."""
    rule = parse_outcome_rule('problems == 0 and not matches(text, "sorry") and fields.total > 1')
    good = ForkOutcome(
        kind="original", workflow_id="w", state="completed", text="ok", fields={"total": 2}
    )
    assert rule.judge(good).passed
    assert not rule.judge(good.model_copy(update={"problems": ["total: missing"]})).passed
    failed = rule.judge(good.model_copy(update={"error": "LlmRefused"}))
    assert (failed.passed, failed.error) == (False, "the original failed")
    with pytest.raises(ExpressionError, match="unknown name 'original'"):
        parse_outcome_rule("original.text == text")


def test_a_bad_judge_rule_is_refused_naming_its_experiment() -> None:
    """``judge_rules`` parses every judge's rule and refuses a bad one in one line naming the
    experiment."""
    bad = judged(rule="problems ==")
    with pytest.raises(JudgeError, match=r"^EXPERIMENTS: prompt-v2's judge: bad syntax"):
        judge_rules({"llm": bad})
    assert set(judge_rules({"llm": judged()})) == {"prompt-v2"}


def test_a_chain_is_judged_once_per_judge(engine: Engine) -> None:
    """The migration adds ``judgements``; a chain's judgement is written once: judging it
    again writes nothing and keeps the first row, while another judge may judge it too."""
    assert inspect(engine).has_table("judgements")
    assert record_judgement(engine, judgement("c1", "B", passed=False))
    assert not record_judgement(engine, judgement("c1", "B", passed=True))
    assert record_judgement(engine, judgement("c1", "B", passed=True, judge="other"))
    with engine.connect() as connection:
        rows = [dict(row._mapping) for row in connection.execute(select(ledger.judgements))]
    mine = [row for row in rows if row["judge"] == "polite"]
    assert [(r["chain"], r["run_id"], r["variant"], r["passed"]) for r in mine] == [
        ("c1", "c1-last", "B", False)
    ]
    assert mine[0]["reason"] == "the rule gave false" and mine[0]["at"] is not None


def test_the_stop_rule_halts_on_the_score_signal_over_judged_runs(engine: Engine) -> None:
    """Each variant's scored runs and pass rate count its judge's judgements (not another
    judge's); ``score_fail`` halts B once it has ``min_judged`` judgements failing more often
    than A's by the margin, and not before."""
    experiment = judged(margin=0.3, min_judged=4)
    for n in range(4):
        record_judgement(engine, judgement(f"a{n}", "A", passed=n != 0))
        record_judgement(engine, judgement(f"a{n}", "A", passed=False, judge="other"))
    for n in range(3):
        record_judgement(engine, judgement(f"b{n}", "B", passed=False))
    signals = {found.variant: found for found in variant_signals(engine, experiment)}
    assert (signals["A"].scored, signals["A"].pass_rate) == (4, 0.75)
    assert (signals["B"].scored, signals["B"].rate("score_fail")) == (3, 1.0)
    assert breaches(experiment, list(signals.values()), halted=()) == []

    record_judgement(engine, judgement("b3", "B", passed=False))
    [breach] = breaches(experiment, variant_signals(engine, experiment), halted=())
    assert breach.variant == "B"
    assert breach.reason == (
        "score_fail rate 100% over 4 judged runs, A's 25% over 4: more than 30% above the control"
    )
