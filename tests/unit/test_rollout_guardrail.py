"""The ledger side of rollouts: each run's variant read from its plan, each variant's signals as
the ledger (a real SQLite one) holds them, and the stop rule over them: counted once per run
chain and only once it ended, the rule halting a variant clearly worse than the control and
sparing one that is not, or one with too few judged runs."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, inspect, text
from temporalio.client import WorkflowHistory

from aiorch.ops import ledger
from aiorch.ops.experiments import breaches, variant_signals
from aiorch.ops.ledger import _schema as schema
from aiorch_runtime.experiments import Experiment
from aiorch_runtime.temporal import DATA_CONVERTER

NOW = datetime(2026, 12, 1, tzinfo=UTC).replace(tzinfo=None)
REPLAYS = Path(__file__).parents[1] / "replay" / "histories"


def canary(**stop: Any) -> Experiment:
    return Experiment.model_validate(
        {
            "id": "prompt-v2",
            "variants": [{"name": "A", "weight": 90}, {"name": "B", "weight": 10, "model": "m"}],
            "stop": stop,
        }
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    opened = ledger.open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield opened
    opened.dispose()


class Runs:
    """Writes runs of an experiment into the ledger, as a sync would project them."""

    def __init__(self, engine: Engine) -> None:
        self.engine, self.count = engine, 0

    def add(
        self,
        variant: str,
        *,
        status: str = "completed",
        error: str | None = None,
        decision: str | None = None,
        corrected: bool = False,
        chain: str | None = None,
    ) -> str:
        self.count += 1
        run_id = f"run-{self.count}"
        chain_id = chain or run_id
        with self.engine.begin() as connection:
            connection.execute(
                ledger.runs.insert().values(
                    run_id=run_id,
                    workflow_id=chain_id,
                    chain_id=chain_id,
                    workflow_type="AiOrchestrator",
                    pipeline="llm",
                    tenant="default",
                    awaiting_review=False,
                    status=status,
                    started_at=NOW,
                    cost_usd=0.0,
                    prompt_tokens=0,
                    completion_tokens=0,
                    cached_tokens=0,
                    attempts=1,
                    review_rounds=0,
                    history_length=10,
                    experiment="prompt-v2",
                    variant=variant,
                )
            )
            ids = {"run_id": run_id, "workflow_id": chain_id}
            if error is not None:
                connection.execute(
                    ledger.model_calls.insert().values(
                        **ids,
                        event_id=5,
                        activity="invoke_llm",
                        attempt=1,
                        model="m",
                        lane="sync",
                        prompt_tokens=0,
                        completion_tokens=0,
                        cached_tokens=0,
                        cost_usd=0.0,
                        scheduled_at=NOW,
                        outcome="failed",
                        error=error,
                    )
                )
            if decision is not None:
                connection.execute(
                    ledger.review_decisions.insert().values(
                        **ids,
                        chain_id=chain_id,
                        entry_id=f"e-{self.count}",
                        kind="decision",
                        decision=decision,
                        state="await_review",
                        decided_at=NOW,
                        feedback_present=False,
                    )
                )
            if corrected:
                connection.execute(
                    ledger.corrections.insert().values(
                        **ids,
                        chain_id=chain_id,
                        review_round=1,
                        reviewer="ann",
                        kind="correct",
                        field_path="total",
                        at=NOW,
                        feedback_present=False,
                    )
                )
        return chain_id


def test_signals_count_each_ended_chain_once(engine: Engine) -> None:
    """A malformed reply or a failed run is a problem, a correction and a rejection count
    for their run, a continued chain counts once (judged when its last run ended), and a
    running run counts as planned, not judged."""
    runs = Runs(engine)
    runs.add("A")
    runs.add("A", decision="approve")
    runs.add("A", status="running")
    runs.add("B", error="LlmMalformedReply: not JSON")
    runs.add("B", status="failed", error="LlmRetryable: HTTP 503")
    runs.add("B", error="LlmRetryable: HTTP 503")
    chain = runs.add("B", status="continued_as_new", decision="reedit")
    runs.add("B", chain=chain, corrected=True, decision="approve")
    a, b = variant_signals(engine, canary())
    assert (a.runs, a.judged, a.problems, a.approvals) == (3, 2, 0, 1)
    assert (b.runs, b.judged, b.problems, b.corrections, b.rejections, b.approvals) == (
        4,
        4,
        2,
        1,
        1,
        1,
    )
    assert b.rate("problem") == 0.5


def test_the_rule_halts_a_worse_variant_once_enough_runs_are_judged(engine: Engine) -> None:
    """B's problem rate 40 points over A's halts B once B has ``min_judged`` judged runs, not
    before; a halted variant is not reported again."""
    runs = Runs(engine)
    for n in range(20):
        runs.add("A", error="LlmMalformedReply: x" if n == 0 else None)
    rule = canary(margin=0.2, min_judged=5)
    for n in range(4):
        runs.add("B", error="LlmMalformedReply: x" if n % 2 == 0 else None)
    assert breaches(rule, variant_signals(engine, rule), halted=()) == []
    runs.add("B", error="LlmMalformedReply: x")
    [breach] = breaches(rule, variant_signals(engine, rule), halted=())
    assert (breach.variant, breach.reason) == (
        "B",
        "problem rate 60% over 5 judged runs, A's 5% over 20: more than 20% above the control",
    )
    assert breaches(rule, variant_signals(engine, rule), halted={"B"}) == []


def test_the_rule_spares_a_variant_no_worse_than_the_control(engine: Engine) -> None:
    """A variant whose rate of the rule's signal is within the margin of the control's keeps
    running, and so does one worse on another signal than the rule's."""
    runs = Runs(engine)
    for n in range(20):
        runs.add("A", error="LlmMalformedReply: x" if n % 10 == 0 else None)
        runs.add("B", error="LlmMalformedReply: x" if n % 5 == 0 else None, corrected=True)
    assert breaches(canary(), variant_signals(engine, canary()), halted=()) == []
    by_corrections = canary(signal="correction", min_judged=20)
    [breach] = breaches(by_corrections, variant_signals(engine, by_corrections), halted=())
    assert breach.variant == "B"


def test_a_canary_seeded_worse_is_halted_within_fifty_judged_runs() -> None:
    """The issue's scenario with the default rule: a 10 % canary whose runs have a problem
    60 % of the time against the control's 5 % is halted before 50 of its runs are judged,
    in each of 10 seeded traffic mixes; with both at 5 %, no mix halts it. (An in-memory
    ledger: 20,000 runs written one by one.)"""
    rule = canary()
    engine = ledger.open_ledger("sqlite:///:memory:")
    try:
        for seed in range(10):
            assert (_judged_at_halt(engine, rule, seed, b_rate=0.6) or 1000) < 50
        for seed in range(10):
            assert _judged_at_halt(engine, rule, 100 + seed, b_rate=0.05) is None
    finally:
        engine.dispose()


def _judged_at_halt(engine: Engine, rule: Experiment, seed: int, *, b_rate: float) -> int | None:
    """B's judged runs when the rule first halts it over 1000 runs of traffic (checked after
    every 10), or None."""
    with engine.begin() as connection:
        for table in (ledger.model_calls, ledger.runs):
            connection.execute(table.delete())
    runs, pick = Runs(engine), random.Random(seed)
    for n in range(1, 1001):
        variant = "B" if pick.random() < 0.1 else "A"
        problem = pick.random() < (b_rate if variant == "B" else 0.05)
        runs.add(variant, error="LlmMalformedReply: x" if problem else None)
        if n % 10 == 0:
            signals = variant_signals(engine, rule)
            if breaches(rule, signals, halted=()):
                return signals[1].judged
    return None


def test_a_ledger_made_before_rollouts_gains_their_columns_and_table(tmp_path: Path) -> None:
    """A ledger at version 1 whose runs table predates rollouts gets the ``experiment`` and
    ``variant`` columns and the ``experiment_halts`` table, its rows kept."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = create_engine(url)
    with old.begin() as connection:
        schema.schema_version.create(connection)
        connection.execute(schema.schema_version.insert().values(version=1, applied_at=NOW))
        connection.execute(text("CREATE TABLE runs (run_id VARCHAR(64) PRIMARY KEY)"))
        connection.execute(text("INSERT INTO runs VALUES ('kept')"))
    old.dispose()
    engine = ledger.open_ledger(url)
    try:
        found = inspect(engine)
        columns = {column["name"] for column in found.get_columns("runs")}
        with engine.connect() as connection:
            kept = connection.execute(text("SELECT run_id, variant FROM runs")).all()
        assert {"experiment", "variant"} <= columns
        assert found.has_table("experiment_halts")
        assert [tuple(row) for row in kept] == [("kept", None)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("name", ["rollout_variant_b", "rollout_variant_b_continued"])
async def test_the_projection_reads_the_variant_from_the_plan(name: str) -> None:
    """A run's experiment and variant come from its plan: the first run's ``fetch_prompt``
    marker and the plan its continued run carried in; a run planned under no experiment has
    neither."""
    found = await projected(REPLAYS / f"{name}.json")
    plain = await projected(REPLAYS / "happy_path.json")
    assert (found.run["experiment"], found.run["variant"]) == ("prompt-v2", "B")
    assert (plain.run["experiment"], plain.run["variant"]) == (None, None)


async def projected(path: Path) -> ledger.Projection:
    history = WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))
    return await ledger.project(path.stem, path.stem, history.events, DATA_CONVERTER)
