"""The bench's profile phase (``bench.profile``): py-spy's raw stacks sorted into components and
turned into GIL-held milliseconds per run. The stacks below are lines of a real ``py-spy record
--gil --format raw`` of both workers, shortened to the frames that decide."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.profile import (
    OTHER,
    ProfilerFailed,
    component_of,
    report_json,
    samples_by_component,
    sampling,
)

LOOP = "<module> (worker.py:6);run (asyncio/runners.py:190);Handle._run (asyncio/events.py:80)"
ACTIVATE = (
    "_RunningWorkflow.activate (temporalio/worker/_workflow.py:869);"
    "_Instance.activate (temporalio/worker/workflow_sandbox/_runner.py:176);"
    "_Instance._run_code (temporalio/worker/workflow_sandbox/_runner.py:193)"
)
CHAT = (
    "LlmActivities.invoke_llm (activities/llm.py:254);"
    "AsyncCompletions.create (openai/resources/chat/completions/completions.py:3416);"
    "ClientSession._request (aiohttp/client.py:900)"
)
CONTEXT = (
    "_WorkflowWorker._handle_activation (temporalio/worker/_workflow.py:500);"
    "encode_completion (temporalio/bridge/worker.py:352);"
    "_Instance.get_serialization_context (temporalio/worker/workflow_sandbox/_runner.py:213)"
)
OUR_WORKFLOW = f"{ACTIVATE};AiOrchestrator.run (workflows/orchestrator.py:155)"
BASELINE_WORKFLOW = f"{ACTIVATE};BenchBaseline.run (bench/baseline.py:73)"
BASELINE_ACTIVITY = (
    "_ActivityInboundImpl.execute_activity (temporalio/worker/_activity.py:921);"
    "bench_llm (bench/baseline.py:45)"
)


@pytest.mark.parametrize(
    ("stack", "component"),
    [
        # The openai client's HTTP under our activity is the client's, not the activity's.
        (f"{LOOP};{CHAT}", "openai client (HTTP to the LLM)"),
        # Entering the sandbox for a payload context, under the completion's visitor.
        (f"{LOOP};{CONTEXT}", "SDK sandbox: payload contexts"),
        (f"{LOOP};{OUR_WORKFLOW}", "workflow code"),
        (f"{LOOP};{BASELINE_WORKFLOW}", "workflow code"),
        # The same file outside an activation is the baseline's activity, not its workflow.
        (f"{LOOP};{BASELINE_ACTIVITY}", "activity code"),
        (f"{LOOP};{ACTIVATE}", "SDK sandbox: activations"),
        (LOOP, "event loop"),
        ("Thread.run (threading.py:982)", OTHER),
    ],
)
def test_each_sample_goes_to_the_first_component_its_frames_match(
    stack: str, component: str
) -> None:
    assert component_of(stack) == component


def test_raw_lines_become_milliseconds_per_run_and_ours_excess() -> None:
    """100 Hz: a sample is 10 ms; over 4 runs, 8 samples are 20 ms per run."""
    baseline = samples_by_component(
        [f"{LOOP};{CONTEXT} 4\n", f"{LOOP};{BASELINE_WORKFLOW} 2\n", "\n", "garbage\n"]
    )
    ours = samples_by_component(
        [f"{LOOP};{CONTEXT} 8\n", f"{LOOP};{CHAT} 6\n", f"{LOOP};{CHAT} 2\n"]
    )
    report = report_json(4, {"baseline": baseline, "ours": ours})
    assert report["samples"] == {"baseline": 6, "ours": 16}
    assert report["gil_ms_per_run"] == {
        "baseline": {"SDK sandbox: payload contexts": 10.0, "workflow code": 5.0},
        "ours": {"openai client (HTTP to the LLM)": 20.0, "SDK sandbox: payload contexts": 20.0},
    }
    # In the components' order, each present on either side.
    assert report["ours_minus_baseline_ms_per_run"] == {
        "openai client (HTTP to the LLM)": 20.0,
        "SDK sandbox: payload contexts": 10.0,
        "workflow code": -5.0,
    }


def test_a_profiler_refused_at_attach_stops_before_the_batch(tmp_path: Path) -> None:
    """py-spy without the right to trace the worker exits at once with an ``Error:`` line and a
    backtrace: the phase is told that line, and the batch is not run for nothing."""
    refusing = tmp_path / "py-spy"
    refusing.write_text(
        "#!/bin/sh\n"
        "echo 'Error: Failed to attach: Operation not permitted (os error 1)' >&2\n"
        "echo 'Stack backtrace:' >&2\n"
        "echo '   0: anyhow::error' >&2\n"
        "exit 1\n"
    )
    refusing.chmod(0o755)
    with (
        pytest.raises(ProfilerFailed, match=r"^Error: Failed to attach: Operation not permitted"),
        sampling(refusing, os.getpid(), tmp_path / "stacks.txt"),
    ):
        pytest.fail("the batch ran although the profiler had refused")
