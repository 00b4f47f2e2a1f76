"""The CLI's exit status for a finished run (docs/cli.md, "Exit codes"): ``aiorch result`` of a
run that completed exits 0; of one that ended failed or dead_letter it prints the result and
exits 3, so a script tells a failed run from a failed command (1). The command runs as a user
runs it, against the time-skipping server's address."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from typer.testing import CliRunner, Result

from aiorch.cli.app import build_app
from aiorch.ops.results import finished
from tests.support.orchestration import Orchestration
from tests.support.scripted_activities import Reply, server_error
from workflows import contract
from workflows.payloads import RunStatus


async def result_command(orch: Orchestration, workflow_id: str) -> Result:
    """``aiorch result WORKFLOW_ID`` with TEMPORAL_ADDRESS naming the test's server (in a
    thread: the command runs its own event loop)."""
    address = orch.client.service_client.config.target_host
    env = {"TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": orch.client.namespace}
    runner = CliRunner()
    return await asyncio.to_thread(
        lambda: runner.invoke(build_app(), ["result", workflow_id], env=env)
    )


async def ended(orch: Orchestration, handle: WorkflowHandle[Any, Any], state: str) -> str:
    assert (await finished(handle)).state == state
    return handle.id


@pytest.fixture(autouse=True)
def no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)


async def test_a_completed_run_exits_0(orch: Orchestration) -> None:
    """A completed run's result is printed and the command succeeds."""
    run = await ended(orch, await orch.start(), "completed")
    done = await result_command(orch, run)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["state"] == "completed"


async def test_a_failed_run_exits_3_after_its_result(orch: Orchestration) -> None:
    """A run a reviewer rejected (failed): its result as JSON, the line saying where it ended,
    exit status 3."""
    orch.fakes.llm_script = [Reply(content="a draft", needs_review=True)]
    handle = await orch.start(review="auto")
    await orch.wait_for_state(handle, "await_review")
    rejection = {"decision": "reject", "reviewer": "legal"}
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, rejection, result_type=RunStatus)
    run = await ended(orch, handle, "failed")
    done = await result_command(orch, run)
    assert done.exit_code == 3, done.output  # docs/cli.md: not 1, a failed command's
    assert json.loads(done.stdout)["state"] == "failed"
    assert f"error: run {run} ended in failed" in done.stderr


async def test_a_dead_lettered_run_exits_3_after_its_result(orch: Orchestration) -> None:
    """A run dead-lettered after its LLM attempts: its result, the line, exit status 3."""
    orch.fakes.llm_script = [server_error()] * 3
    handle = await orch.start(options={"llm_max_attempts": 3})
    run = await ended(orch, handle, "dead_letter")
    done = await result_command(orch, run)
    assert done.exit_code == 3, done.output
    assert json.loads(done.stdout)["state"] == "dead_letter"
    assert f"error: run {run} ended in dead_letter" in done.stderr
