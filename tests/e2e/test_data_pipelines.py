"""Pipeline files on the real dev server: the support-triage file runs end to end with no
Python of its own (started and reviewed with the CLI, the real simulator answering), runs keep
the version they started with while the file changes, both versions' histories replay, and a
broken file keeps a worker from starting. (What a client may try against them:
tests/security/test_pipeline_files.py.)"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer

from activities.documents.store import StoreActivities, create_store_engine
from aiorch.devstack.stack import LocalStack
from aiorch_runtime.temporal import AiOrchestratorPlugin
from tests.support.builders import new_request_id
from tests.support.live_runs import status_of, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, connect, run_script, stack_with_worker
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, TRIAGE_V2, V2_PROMPT, write_pipeline
from tests.support.simulator import Simulator
from workflows.data import CATALOG, DataResult, compile_spec
from workflows.data.spec import PipelineSpec
from workflows.orchestrator import EngineWorkflow

pytestmark = [pytest.mark.e2e, pytest.mark.long]
BROKEN = Path(__file__).resolve().parents[1] / "unit" / "pipeline_files"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worker's PIPELINES_DIR, holding the triage file's version 1."""
    path = tmp_path_factory.mktemp("pipelines")
    write_pipeline(path, TRIAGE_V1)
    return path


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'documents.db'}"


@pytest.fixture(scope="module")
def data_stack(
    tmp_path_factory: pytest.TempPathFactory, folder: Path, store_url: str
) -> Iterator[LocalStack]:
    env = {**E2E_WORKER_ENV, "PIPELINES_DIR": str(folder), "DOCUMENT_STORE_URL": store_url}
    yield from stack_with_worker(tmp_path_factory.mktemp("stack"), env)


@pytest.fixture(scope="module")
async def data_client(data_stack: LocalStack) -> Client:
    return await connect(data_stack)


@pytest.fixture(scope="module")
def data_simulator(data_stack: LocalStack) -> Simulator:
    return Simulator(data_stack.addresses.openai_base_url)


def cli(stack: LocalStack, folder: Path, *args: str) -> Any:
    """``starter.py ARGS`` as an operator runs it, with the worker's PIPELINES_DIR."""
    env = {**stack.addresses.env(), "PIPELINES_DIR": str(folder), "COLUMNS": "200"}
    return run_script("starter.py", *args, env=env)


def start_ticket(stack: LocalStack, folder: Path, ticket: str) -> str:
    run_id = new_request_id()
    started = cli(
        stack,
        folder,
        "start",
        "--pipeline",
        TRIAGE,
        "--id",
        run_id,
        "--input",
        json.dumps({"ticket": ticket, "customer": "ACME"}),
    )
    assert started.returncode == 0, started.stderr
    assert f"started {run_id}" in started.stdout
    return run_id


def approve(stack: LocalStack, folder: Path, run_id: str) -> None:
    reviewed = cli(stack, folder, "review", run_id, "approve", "--reviewer", "rita")
    assert reviewed.returncode == 0, reviewed.stderr


async def progress_until(
    handle: WorkflowHandle[Any, Any], state: str, seen: list[int], timeout: float = 30.0
) -> None:
    """Poll ``status`` until the run is in ``state``, noting each progress figure."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        current = await status_of(handle)
        seen.append(current.progress)
        if current.state == state:
            return
        assert asyncio.get_running_loop().time() < deadline, f"stuck in {current.state}"
        await asyncio.sleep(0.05)


def graph() -> Any:
    return compile_spec(PipelineSpec.model_validate(yaml.safe_load(TRIAGE_V1)), CATALOG).graph


async def test_the_triage_file_runs_end_to_end_with_no_python_of_its_own(
    data_stack: LocalStack, data_client: Client, folder: Path, store_url: str
) -> None:
    """An urgent ticket: the simulator classifies it urgent, a person approves it, a reply is
    drafted and approved, the fields are stored. Progress only rises; the diagram is the
    file's graph; status and list name the version."""
    run_id = start_ticket(data_stack, folder, "Our production site is down since 9:00, urgent!")
    handle = data_client.get_workflow_handle(run_id, result_type=DataResult)
    seen: list[int] = []
    await progress_until(handle, "urgent_review", seen)
    approve(data_stack, folder, run_id)
    await progress_until(handle, "reply_review", seen)
    approve(data_stack, folder, run_id)
    await progress_until(handle, "completed", seen)
    assert all(a <= b for a, b in pairwise(seen)), seen
    assert seen[-1] == 100
    result = await handle.result()
    states = [entry.to_state for entry in result.history]
    assert states == [
        "classify",
        "route",
        "urgent_review",
        "draft",
        "reply_review",
        "store",
        "completed",
    ]
    figures = [graph().progress_of(state) for state in states]
    assert figures == sorted(figures)
    assert result.outputs["classify"] == {"category": "urgent"}
    stored = StoreActivities(create_store_engine(store_url))
    try:
        row = await stored.fetch(run_id)
    finally:
        stored.close()
    assert row is not None and row.pipeline == TRIAGE and row.reviewed_by == "rita"
    assert row.fields["category"] == "urgent"
    assert row.fields["reply"] == result.outputs["draft"]["content"]

    status = cli(data_stack, folder, "status", run_id)
    assert status.returncode == 0, status.stderr
    version = (await status_of(handle)).pipeline_version
    assert version is not None and version.startswith("1@") and version in status.stdout
    listed = cli(data_stack, folder, "list", "--pipeline", TRIAGE, "--json")
    assert listed.returncode == 0, listed.stderr
    [row_listed] = [r for r in json.loads(listed.stdout) if r["workflow_id"] == run_id]
    assert (row_listed["pipeline"], row_listed["version"]) == (TRIAGE, version)
    drawn = cli(data_stack, folder, "pipeline", "graph", TRIAGE, "--format", "mermaid")
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout == graph().to_mermaid()
    assert "urgent_review --> draft: approve" in drawn.stdout


async def test_runs_keep_their_version_while_the_file_changes(
    data_stack: LocalStack, data_client: Client, folder: Path, data_simulator: Simulator
) -> None:
    """Five runs wait for review on version 1; the file becomes version 2 (another prompt, one
    more step) while the worker runs: the five finish on version 1's steps, a new run takes
    version 2's, and both versions' histories replay without the file."""
    write_pipeline(folder, TRIAGE_V1)
    old = [
        start_ticket(data_stack, folder, f"Billing: invoice {n} was charged twice")
        for n in range(5)
    ]
    handles = [data_client.get_workflow_handle(run_id, result_type=DataResult) for run_id in old]
    for handle in handles:
        await wait_for_state(handle, "reply_review")
    v1 = (await status_of(handles[0])).pipeline_version
    try:
        write_pipeline(folder, TRIAGE_V2)
        new_id_ = start_ticket(data_stack, folder, "Billing: a refund for my invoice")
        new = data_client.get_workflow_handle(new_id_, result_type=DataResult)
        v2 = (await wait_for_state(new, "reply_review")).pipeline_version
        assert v1 is not None and v2 is not None
        assert (v1.split("@")[0], v2.split("@")[0]) == ("1", "2")
        classify = data_simulator.chat_requests(new_id_)[0]
        assert V2_PROMPT in classify["messages"][1]["content"]
        for run_id in old:
            assert (
                V2_PROMPT not in data_simulator.chat_requests(run_id)[0]["messages"][1]["content"]
            )
        for run_id in [*old, new_id_]:
            approve(data_stack, folder, run_id)
        for handle in handles:
            result = await handle.result()
            assert result.version == v1
            assert [e.to_state for e in result.history][-3:] == [
                "reply_review",
                "store",
                "completed",
            ]
        result = await new.result()
        assert result.version == v2
        assert [e.to_state for e in result.history][-4:] == [
            "reply_review",
            "check_reply",
            "store",
            "completed",
        ]
        # The folder no longer has version 1; the replayer has no folder at all.
        for handle in (handles[0], new):
            history = await handle.fetch_history()
            for pass_workflows in (True, False):
                replayer = Replayer(
                    workflows=[EngineWorkflow],
                    plugins=[AiOrchestratorPlugin(pass_workflows=pass_workflows)],
                )
                await replayer.replay_workflow(history, raise_on_replay_failure=True)
    finally:
        write_pipeline(folder, TRIAGE_V1)


async def test_a_broken_file_keeps_a_worker_from_starting_and_no_run_starts(
    data_stack: LocalStack, data_client: Client, tmp_path: Path
) -> None:
    """A worker whose PIPELINES_DIR holds a broken file exits at once with one line naming
    the file, line and rule; the CLI refuses to start a run of it: no run starts."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write_pipeline(folder, TRIAGE_V1.replace("name: SupportTriage", "name: BrokenTriage"))
    broken = BROKEN / "01_unknown_step_type.yaml"
    shutil.copy(broken, folder / broken.name)
    env = {**data_stack.addresses.env(), **E2E_WORKER_ENV, "PIPELINES_DIR": str(folder)}
    worker = run_script("worker.py", env=env, timeout=60)
    assert worker.returncode == 1
    assert "Traceback" not in worker.stderr
    assert f"{folder / broken.name}:31:5: unknown-step-type" in worker.stderr
    assert "worker started" not in worker.stdout
    started = cli(
        data_stack, folder, "start", "--pipeline", "BrokenTriage", "--input", '{"ticket": "t"}'
    )
    assert started.returncode == 2  # the --pipeline option is refused, naming the problem
    assert "unknown-step-type" in started.stderr and "Traceback" not in started.stderr
    count = await data_client.count_workflows("WorkflowType = 'BrokenTriage'")
    assert count.count == 0
