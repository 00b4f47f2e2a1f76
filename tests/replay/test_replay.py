"""Recorded histories replay against today's workflow code: a determinism guard.

Each history replays twice, through the project's plugin as the worker uses it: with the
workflow modules re-imported by the sandbox for every run (every restriction enforced at run
time), and with the worker's pass-through of the ``workflows`` package
(`aiorch_runtime.sandbox`)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from aiorch_runtime.temporal import AiOrchestratorPlugin
from workflows.batch.workflow import LlmBatch
from workflows.data import DataPlan
from workflows.data.spec import file_digest
from workflows.engine.inbound import SIGNAL_SCREENED_PATCH
from workflows.engine.record import ROUND_REPUBLISHED_PATCH
from workflows.orchestrator import EngineWorkflow
from workflows.steps.llm_call import SPILL_OVER_PATCH

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
        "data_pipeline_v1",
        "data_pipeline_v2",
        "document_stored",
        "document_corrected",
        "quorum_two_approvals",
        "auto_approved",
        "batch_lane",
        "batch_lane_retry",
        "batch_group",
        "result_cache_hit",
        "document_approved_plan_run",
        "document_correction_still_wrong",
        "document_correction_still_wrong_unpatched",
        "reedit_signal_no_feedback",
        "reedit_signal_no_feedback_unpatched",
        "rollout_variant_b",
        "rollout_variant_b_continued",
        "spill_over",
    } <= names


def patches(path: Path) -> list[str]:
    """The patch ids a recorded run's markers name."""
    ids = []
    for event in json.loads(path.read_text(encoding="utf-8"))["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if marker is not None and marker["markerName"] == "core_patch":
            [payload] = marker["details"]["patch-data"]["payloads"]
            ids.append(json.loads(base64.b64decode(payload["data"]))["id"])
    return ids


@pytest.mark.parametrize(
    ("history", "patch"),
    [
        ("document_correction_still_wrong", ROUND_REPUBLISHED_PATCH),
        ("reedit_signal_no_feedback", SIGNAL_SCREENED_PATCH),
    ],
)
def test_histories_hold_both_sides_of_a_review_patch(history: str, patch: str) -> None:
    """Each review patch has a run recorded under it and one recorded before it (``_unpatched``,
    the same scenario): the replay set takes both branches."""
    folder = HISTORIES[0].parent
    assert patch in patches(folder / f"{history}.json")
    assert patch not in patches(folder / f"{history}_unpatched.json")


def test_histories_hold_a_spilled_run_and_a_waiting_one() -> None:
    """A batch-eligible run that spilled to the batch lane is recorded under the spill-over
    patch, and the run that waited for capacity without spilling holds no such marker: the
    replay set takes both branches of the decision."""
    folder = HISTORIES[0].parent
    assert SPILL_OVER_PATCH in patches(folder / "spill_over.json")
    assert SPILL_OVER_PATCH not in patches(folder / "capacity_wait.json")


def planned_by(path: Path) -> list[str]:
    """The local activities a recorded run's plan came from (their markers' activity types)."""
    types = []
    for event in json.loads(path.read_text(encoding="utf-8"))["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if marker is not None and marker["markerName"] == "core_local_activity":
            [payload] = marker["details"]["data"]["payloads"]
            types.append(json.loads(base64.b64decode(payload["data"]))["activity_type"])
    return types


@pytest.mark.parametrize(
    ("history", "plan"),
    [
        ("happy_path", "fetch_prompt"),
        ("document_stored", "plan_document"),
        ("document_approved_plan_run", "plan_run"),
    ],
)
def test_histories_hold_both_ways_of_planning(history: str, plan: str) -> None:
    """Document runs recorded before ``plan_run`` planned with ``plan_document`` and replay
    through it; those recorded since plan with ``plan_run`` (the LLM pipeline plans with
    ``fetch_prompt``): the replay set holds each way."""
    assert planned_by(HISTORIES[0].parent / f"{history}.json") == [plan]


def recorded_plan(path: Path) -> DataPlan:
    """The plan a pipeline file's run recorded: the result of its plan_pipeline marker."""
    for event in json.loads(path.read_text(encoding="utf-8"))["events"]:
        marker = event.get("markerRecordedEventAttributes")
        if marker is not None:
            [payload] = marker["details"]["result"]["payloads"]
            return DataPlan.model_validate_json(base64.b64decode(payload["data"]))
    raise AssertionError(f"{path.name} recorded no plan")


def test_a_pipeline_file_s_histories_hold_their_versions() -> None:
    """The two pipeline-file histories followed two versions of one file, each held whole in
    the run's recorded plan (text, hash, spec): the replay reads neither file."""
    v1, v2 = (recorded_plan(HISTORIES[0].parent / f"data_pipeline_v{n}.json") for n in (1, 2))
    assert (v1.pipeline.name, v2.pipeline.name) == ("SupportTriage", "SupportTriage")
    assert (v1.pipeline.version, v2.pipeline.version) == ("1", "2")
    assert v1.pipeline.sha256 == file_digest(v1.pipeline.text) != v2.pipeline.sha256
    assert "check_reply" in v2.pipeline.text and "check_reply" not in v1.pipeline.text


def test_a_rollout_runs_histories_hold_its_variant() -> None:
    """The run recorded under a rollout planned B (its model and system prompt) in its first
    run's ``fetch_prompt`` marker, and its continued run carried that plan: replaying either
    replays B."""
    folder = HISTORIES[0].parent
    events = json.loads((folder / "rollout_variant_b.json").read_text(encoding="utf-8"))["events"]
    [marker] = [
        e["markerRecordedEventAttributes"] for e in events if "markerRecordedEventAttributes" in e
    ]
    [payload] = marker["details"]["result"]["payloads"]
    planned = json.loads(base64.b64decode(payload["data"]))
    continued = json.loads((folder / "rollout_variant_b_continued.json").read_text("utf-8"))
    [start] = continued["events"][0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"]
    carried = json.loads(base64.b64decode(start["data"]))["carried"]["plan"]
    for plan in (planned, carried):
        assert plan["assignment"]["experiment"] == "prompt-v2"
        assert plan["assignment"]["variant"]["name"] == "B"
        assert (plan["model"], plan["system_prompt"]) == ("sim-small", "Answer tersely.")


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
        workflows=[EngineWorkflow, LlmBatch],
        plugins=[AiOrchestratorPlugin(pass_workflows=RUNNERS[runner])],
    )
    # Raises on any replay failure (nondeterminism, a sandbox restriction): that is the check.
    await replayer.replay_workflow(history, raise_on_replay_failure=True)
