"""A rollout end to end, on the real dev server with a worker, the LLM simulator, the capacity
store (Valkey) and a SQLite ledger: variant B (another model, which the simulator answers with
a malformed reply once per run) is seeded worse than A. ``experiments watch`` halts B from
the ledger's signals, every run planned after the halt gets A, and the halt shows in
``experiments status`` and the ledger. A run planned with B before the halt keeps B across a
worker restart, a continue-as-new and a replay, and ``status`` names its variant."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis
from sqlalchemy import Engine, create_engine, select
from temporalio.client import Client
from temporalio.worker import Replayer

from aiorch.devstack.stack import LocalStack
from aiorch.ops import ledger
from aiorch.ops.reviews import submit_review
from aiorch.ops.visibility import start_run
from aiorch_runtime.experiment_halts import HaltStore
from aiorch_runtime.experiments import Experiment
from aiorch_runtime.temporal import AiOrchestratorPlugin
from tests.support.builders import new_request_id
from tests.support.live_runs import wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, run_script, stack_with_worker
from tests.support.webhooks import running_receiver
from workflows import contract
from workflows.batch.workflow import LlmBatch
from workflows.orchestrator import EngineWorkflow
from workflows.payloads import PipelineRequest, ReviewDecision

pytestmark = pytest.mark.e2e

B_MODEL = "sim-small"
EXPERIMENTS = {
    "llm": {
        "id": "canary",
        "variants": [{"name": "A", "weight": 50}, {"name": "B", "weight": 50, "model": B_MODEL}],
        "stop": {"signal": "problem", "margin": 0.3, "min_judged": 4},
    }
}
EXPERIMENT = Experiment.model_validate(EXPERIMENTS["llm"])
# B's model gets one malformed reply per run (a problem the ledger records); A's never does.
MESSAGE = f"Summarise the report [sim:malformed:model={B_MODEL}:times=1]"


def ids_for(variant: str, count: int) -> list[str]:
    """Fresh request ids the experiment gives ``variant`` (by its weights alone)."""
    found: list[str] = []
    while len(found) < count:
        request_id = new_request_id()
        if EXPERIMENT.choose(request_id).variant.name == variant:
            found.append(request_id)
    return found


@dataclass
class Rollout:
    stack: LocalStack
    ledger_url: str

    def starter(self, *args: str, **extra: str) -> Any:
        env = {
            **os.environ,
            **self.stack.addresses.env(),
            "EXPERIMENTS": json.dumps(EXPERIMENTS),
            "LEDGER_URL": self.ledger_url,
            "COLUMNS": "200",
            **extra,
        }
        return run_script("starter.py", *args, env=env)

    def synced(self) -> None:
        done = self.starter("ledger", "sync")
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A reedit continues the run as new (one round per run)."""
    yield from stack_with_worker(
        tmp_path_factory.mktemp("stack"),
        {**E2E_WORKER_ENV, "EXPERIMENTS": json.dumps(EXPERIMENTS), "REEDIT_ROUNDS_PER_RUN": "1"},
        with_capacity_store=True,
    )


async def start(client: Client, request_id: str, **fields: Any) -> str:
    request = PipelineRequest(request_id=request_id, user_message=MESSAGE, **fields)
    return await start_run(client, request, task_queue=contract.DEFAULT_TASK_QUEUE)


async def closed(client: Client, workflow_ids: list[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    for workflow_id in workflow_ids:
        handle = client.get_workflow_handle(workflow_id)
        while (await handle.describe()).close_time is None:
            assert time.monotonic() < deadline, f"{workflow_id} did not close"
            await asyncio.sleep(0.2)
    # Visibility shows a close a moment after it.
    await asyncio.sleep(2)


def ledger_rows(url: str, table: Any) -> list[dict[str, Any]]:
    engine: Engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [dict(row._mapping) for row in connection.execute(select(table))]
    finally:
        engine.dispose()


async def decide(stack: LocalStack, client: Client, workflow_id: str, **fields: Any) -> None:
    outcome = await submit_review(
        client, workflow_id, ReviewDecision(**fields), signer=stack.reviewer_key.signer()
    )
    assert outcome.applied, outcome.describe(workflow_id)


async def test_the_watcher_halts_a_worse_canary_and_new_runs_get_the_control(
    stack: LocalStack, tmp_path: Path
) -> None:
    """B's runs each meet a malformed reply, A's none: after four judged runs each, ``watch
    --once`` halts B (in the store, the ledger's ``experiment_halts`` and a notice to the review
    webhook), ``status`` shows it,
    and runs whose ids would get B are planned with A. The run parked in review with B before
    the halt keeps B through a worker restart and a reedit that continues it as new, its
    every model call made with B's model, and its histories replay."""
    client = await connect(stack)
    rollout = Rollout(stack, f"sqlite:///{tmp_path / 'ledger.db'}")
    [parked] = ids_for("B", 1)
    await start(client, parked, review="always")
    await wait_for_state(client.get_workflow_handle(parked), "await_review", timeout=60)
    early_a, early_b = ids_for("A", 4), ids_for("B", 4)
    for request_id in [*early_a, *early_b]:
        await start(client, request_id)
    await closed(client, [*early_a, *early_b])

    rollout.synced()
    shown = rollout.starter("status", parked)
    assert shown.returncode == 0, shown.stderr
    assert "variant" in shown.stdout and "canary/B" in shown.stdout
    async with running_receiver() as receiver:
        watched = await asyncio.to_thread(
            rollout.starter, "experiments", "watch", "--once", REVIEW_WEBHOOK_URL=receiver.url
        )
    assert watched.returncode == 0, watched.stderr
    reason = "problem rate 100% over 4 judged runs, A's 0% over 4: more than 30% above the control"
    assert f"halted canary/B: {reason}" in watched.stderr
    [notice] = receiver.bodies
    assert {key: notice[key] for key in ("event", "experiment", "variant", "reason")} == {
        "event": "experiment_halted",
        "experiment": "canary",
        "variant": "B",
        "reason": reason,
    }

    stack.stop_worker()
    stack.start_worker()
    await decide(stack, client, parked, decision="reedit", reviewer="ann", feedback="shorter")
    await wait_for_state(client.get_workflow_handle(parked), "await_review", timeout=60)
    await decide(stack, client, parked, decision="approve", reviewer="bob")
    late_b = ids_for("B", 4)
    for request_id in late_b:
        await start(client, request_id)
    await closed(client, [parked, *late_b])
    rollout.synced()

    runs = ledger_rows(rollout.ledger_url, ledger.runs)
    variant = {row["workflow_id"]: row["variant"] for row in runs}
    assert {variant[i] for i in early_a} == {"A"} and {variant[i] for i in early_b} == {"B"}
    assert {variant[i] for i in late_b} == {"A"}
    chain = [row for row in runs if row["workflow_id"] == parked]
    assert sorted(row["status"] for row in chain) == ["completed", "continued_as_new"]
    assert {(row["experiment"], row["variant"]) for row in chain} == {("canary", "B")}
    calls = ledger_rows(rollout.ledger_url, ledger.model_calls)
    parked_runs = {row["run_id"] for row in chain}
    late_runs = {row["run_id"] for row in runs if row["workflow_id"] in late_b}
    assert {c["model"] for c in calls if c["run_id"] in parked_runs} == {B_MODEL}
    assert B_MODEL not in {c["model"] for c in calls if c["run_id"] in late_runs}
    [halt] = ledger_rows(rollout.ledger_url, ledger.experiment_halts)
    assert (halt["experiment"], halt["variant"], halt["halted_by"]) == ("canary", "B", "watcher")

    status = rollout.starter("experiments", "status", "--json")
    assert status.returncode == 0, status.stderr
    rows = {row["variant"]: row for row in json.loads(status.stdout)}
    assert (rows["B"]["state"], rows["B"]["problem_rate"], rows["B"]["judged"]) == (
        "halted",
        1.0,
        5,
    )
    assert (rows["A"]["state"], rows["A"]["problem_rate"], rows["A"]["judged"]) == (
        "running",
        0.0,
        8,
    )
    assert rows["B"]["halted_by"] == "watcher"
    table = rollout.starter("experiments", "status")
    assert "canary/B halted" in table.stdout

    replayer = Replayer(workflows=[EngineWorkflow, LlmBatch], plugins=[AiOrchestratorPlugin()])
    async for execution in client.list_workflows(f"WorkflowId = '{parked}'"):
        handle = client.get_workflow_handle(parked, run_id=execution.run_id)
        await replayer.replay_workflow(await handle.fetch_history(), raise_on_replay_failure=True)


async def test_an_operator_halts_promotes_and_resumes_with_one_line_each(
    stack: LocalStack, tmp_path: Path
) -> None:
    """``halt``, ``promote`` and ``resume`` change what the store holds for the experiment,
    each confirmed in one line; halting the control, an unknown experiment or an unknown
    variant is refused with one line naming what exists."""
    rollout = Rollout(stack, f"sqlite:///{tmp_path / 'ledger.db'}")
    store_url = stack.addresses.capacity_store_url
    assert store_url is not None
    client = redis.Redis.from_url(store_url)
    store = HaltStore(client)
    try:
        await store.resume("canary")
        halted = rollout.starter("experiments", "halt", "canary", "B", "--operator", "alice")
        assert halted.returncode == 0, halted.stderr
        assert halted.stdout.strip() == "canary/B halted: new runs get A"
        again = rollout.starter("experiments", "halt", "canary", "B", "--operator", "alice")
        assert again.stdout.strip() == "canary/B was halted already"
        assert (await store.state("canary")).halted["B"].by == "alice"
        promoted = rollout.starter("experiments", "promote", "canary", "B")
        assert promoted.stdout.strip() == "canary/B promoted: every new run gets it"
        state = await store.state("canary")
        assert (state.promoted, set(state.halted)) == ("B", set())
        resumed = rollout.starter("experiments", "resume", "canary")
        assert resumed.stdout.strip() == "lifted canary's halts and promotion"
        assert await store.state("canary") == type(state)()
        refusals = {
            ("halt", "canary", "A", "--operator", "alice"): "A is the control",
            ("halt", "other", "B", "--operator", "alice"): "no experiment 'other'",
            ("promote", "canary", "C"): "experiment canary has no variant 'C': it has A, B",
        }
        for args, line in refusals.items():
            refused = rollout.starter("experiments", *args)
            assert refused.returncode != 0
            assert refused.stderr.startswith("error: ") and line in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1
    finally:
        await client.aclose()
