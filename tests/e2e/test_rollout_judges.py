"""Live evaluation of a rollout end to end, on the real dev server with a worker, the LLM
simulator, the capacity store (Valkey) and a SQLite ledger: a rule judge on 20% of the runs
judges exactly the sampled ones, once each, from their histories; with B's answers failing the
rule, ``experiments watch`` halts B on the ``score_fail`` signal and runs planned after the
halt get A."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from temporalio.client import Client, WorkflowFailureError

from aiorch.devstack.stack import LocalStack
from aiorch.ops import ledger
from aiorch.ops.experiments import sampled
from aiorch.ops.visibility import start_run
from aiorch_runtime.experiments import Experiment
from tests.support.builders import new_request_id
from tests.support.live_stack import E2E_WORKER_ENV, connect, run_script, stack_with_worker
from workflows import contract
from workflows.payloads import PipelineRequest

pytestmark = pytest.mark.e2e

B_MODEL = "sim-small"
# The simulator's answer names the model that wrote it: the rule stands in for a quality
# check that every answer of B's model fails and every answer of A's passes.
RULE = f'problems == 0 and not matches(text, "{B_MODEL}")'
EXPERIMENTS = {
    "llm": {
        "id": "judged",
        "variants": [{"name": "A", "weight": 50}, {"name": "B", "weight": 50, "model": B_MODEL}],
        "stop": {"signal": "score_fail", "margin": 0.3, "min_judged": 3},
        "judge": {"name": "quality", "rule": RULE, "sample": 0.2},
    }
}
EXPERIMENT = Experiment.model_validate(EXPERIMENTS["llm"])


def ids_for(variant: str, count: int, *, in_sample: bool) -> list[str]:
    """Fresh request ids the experiment gives ``variant`` (by its weights alone), in the
    judge's sample or out of it."""
    found: list[str] = []
    while len(found) < count:
        request_id = new_request_id()
        chosen = EXPERIMENT.choose(request_id).variant.name
        if chosen == variant and sampled(request_id, 0.2) == in_sample:
            found.append(request_id)
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"),
        {**E2E_WORKER_ENV, "EXPERIMENTS": json.dumps(EXPERIMENTS)},
        with_capacity_store=True,
    )


class Operator:
    """The operator's commands against the stack and one SQLite ledger."""

    def __init__(self, stack: LocalStack, ledger_url: str) -> None:
        self.stack, self.ledger_url = stack, ledger_url

    def run(self, *args: str) -> Any:
        env = {
            **os.environ,
            **self.stack.addresses.env(),
            "EXPERIMENTS": json.dumps(EXPERIMENTS),
            "LEDGER_URL": self.ledger_url,
            "COLUMNS": "200",
        }
        done = run_script("starter.py", *args, env=env)
        assert done.returncode == 0, done.stderr
        return done

    def judgements(self) -> dict[str, dict[str, Any]]:
        """The ledger's judgements, by the workflow id of the run judged."""
        engine = create_engine(self.ledger_url)
        try:
            with engine.connect() as connection:
                workflow = {
                    row.run_id: row.workflow_id for row in connection.execute(select(ledger.runs))
                }
                return {
                    workflow[row.run_id]: dict(row._mapping)
                    for row in connection.execute(select(ledger.judgements))
                }
        finally:
            engine.dispose()


async def run_all(client: Client, request_ids: list[str]) -> None:
    """Start a run for each id and wait until every one completed."""
    handles = []
    for request_id in request_ids:
        request = PipelineRequest(request_id=request_id, user_message="Summarise the report")
        workflow_id = await start_run(client, request, task_queue=contract.DEFAULT_TASK_QUEUE)
        handles.append(client.get_workflow_handle(workflow_id))
    await asyncio.wait_for(asyncio.gather(*(handle.result() for handle in handles)), 90)
    # Visibility shows a close a moment after it.
    await asyncio.sleep(2)


async def test_a_sampled_judge_scores_its_runs_once_and_halts_the_worse_variant(
    stack: LocalStack, tmp_path: Path
) -> None:
    """Of ten completed runs, ``watch --once`` judges exactly the four in the 20% sample (B's
    failing the rule, A's passing), and a second check judges none again; with two judged
    runs each B is spared (``min_judged`` 3). Once one more sampled run of each is judged, B's
    score_fail rate (100%) is more than 30 points over A's (0%): the same check halts B,
    ``status`` shows each variant's scored runs and pass rate, and runs planned after the
    halt get A."""
    client = await connect(stack)
    operator = Operator(stack, f"sqlite:///{tmp_path / 'ledger.db'}")
    first_a, first_b = ids_for("A", 2, in_sample=True), ids_for("B", 2, in_sample=True)
    unsampled = ids_for("A", 3, in_sample=False) + ids_for("B", 3, in_sample=False)
    await run_all(client, [*first_a, *first_b, *unsampled])
    operator.run("ledger", "sync")

    watched = operator.run("experiments", "watch", "--once")
    assert "judged 4 run(s) of judged: 2 failed" in watched.stderr
    assert "halted" not in watched.stderr
    first = operator.judgements()
    assert set(first) == {*first_a, *first_b}
    assert {wid: row["passed"] for wid, row in first.items()} == {
        **dict.fromkeys(first_a, True),
        **dict.fromkeys(first_b, False),
    }
    assert {row["variant"] for wid, row in first.items() if wid in first_b} == {"B"}
    assert {(row["experiment"], row["judge"]) for row in first.values()} == {("judged", "quality")}
    again = operator.run("experiments", "watch", "--once")
    assert "run(s) of judged" not in again.stderr
    assert operator.judgements() == first

    more_a, more_b = ids_for("A", 1, in_sample=True), ids_for("B", 1, in_sample=True)
    await run_all(client, [*more_a, *more_b])
    operator.run("ledger", "sync")
    halting = operator.run("experiments", "watch", "--once")
    reason = (
        "score_fail rate 100% over 3 judged runs, A's 0% over 3: more than 30% above the control"
    )
    assert f"halted judged/B: {reason}" in halting.stderr
    assert set(operator.judgements()) == {*first_a, *first_b, *more_a, *more_b}

    status = json.loads(operator.run("experiments", "status", "--json").stdout)
    shown = {row["variant"]: row for row in status}
    assert (shown["B"]["state"], shown["B"]["scored"], shown["B"]["pass_rate"]) == (
        "halted",
        3,
        0.0,
    )
    assert (shown["A"]["state"], shown["A"]["scored"], shown["A"]["pass_rate"]) == (
        "running",
        3,
        1.0,
    )

    late_b = ids_for("B", 3, in_sample=False)
    await run_all(client, late_b)
    operator.run("ledger", "sync")
    engine = create_engine(operator.ledger_url)
    try:
        with engine.connect() as connection:
            late = connection.execute(
                select(ledger.runs.c.variant).where(ledger.runs.c.workflow_id.in_(late_b))
            ).scalars()
            assert sorted(late) == ["A", "A", "A"]
    finally:
        engine.dispose()


async def test_a_sampled_run_that_failed_is_judged_and_fails_the_rule(
    stack: LocalStack, tmp_path: Path
) -> None:
    """A sampled run that failed (the model refused) is judged like one that completed, once,
    and fails the rule: a variant whose runs fail is not spared by leaving them out."""
    client = await connect(stack)
    operator = Operator(stack, f"sqlite:///{tmp_path / 'ledger.db'}")
    [request_id] = ids_for("A", 1, in_sample=True)
    request = PipelineRequest(request_id=request_id, user_message="Say it. [sim:refusal]")
    workflow_id = await start_run(client, request, task_queue=contract.DEFAULT_TASK_QUEUE)
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), 90)
    await asyncio.sleep(2)  # visibility shows a close a moment after it
    operator.run("ledger", "sync")

    operator.run("experiments", "watch", "--once")

    judged = operator.judgements()[workflow_id]
    assert (judged["variant"], judged["passed"], judged["reason"]) == ("A", False, "the run failed")
    again = operator.run("experiments", "watch", "--once")
    assert "run(s) of judged" not in again.stderr
