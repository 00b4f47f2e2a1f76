"""Recorded histories replay against today's workflow code: a determinism guard.

Each history replays twice, through the project's plugin as the worker uses it: with the
workflow modules re-imported by the sandbox for every run (every restriction enforced at run
time), and with the worker's pass-through of the ``workflows`` package
(`aiorch.runtime.sandbox`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from aiorch.runtime.temporal import AiOrchestratorPlugin
from workflows.batch.workflow import LlmBatch
from workflows.orchestrator import AiOrchestrator

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))
# pass_workflows by runner: the SDK's full sandbox, and the worker's pass-through.
RUNNERS = {"sdk-sandbox": False, "worker-runner": True}


def test_histories_are_recorded() -> None:
    """The replay set covers the main paths (re-record with `python -m tests.replay.record`)."""
    names = {path.stem for path in HISTORIES}
    assert {
        "happy_path",
        "reedit_then_approve",
        "dead_letter",
        "cancel_in_review",
        "continued_reedit_loop",
        "capacity_wait",
        "budget_approved",
        "batch_lane",
        "batch_lane_retry",
        "batch_group",
        "result_cache_hit",
    } <= names


def recorded(path: Path) -> WorkflowHistory:
    """The history at ``path``, under the workflow id it ran with (rules that name the run, such
    as a signed review's, judge it as they did)."""
    text = path.read_text(encoding="utf-8")
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    return WorkflowHistory.from_json(started["workflowId"], text)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_without_nondeterminism(path: Path, runner: str) -> None:
    """Replaying a recorded run raises no nondeterminism error (nor a sandbox restriction): the
    code still issues the same commands in the same order."""
    history = recorded(path)
    replayer = Replayer(
        workflows=[AiOrchestrator, LlmBatch],
        plugins=[AiOrchestratorPlugin(pass_workflows=RUNNERS[runner])],
    )
    # Raises on any replay failure (nondeterminism, a sandbox restriction): that is the check.
    await replayer.replay_workflow(history, raise_on_replay_failure=True)
