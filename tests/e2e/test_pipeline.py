"""The pipeline end to end: real dev server, real worker process, real simulator over HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from tests.support.builders import new_request_id
from tests.support.live_runs import (
    llm_call_key,
    request,
    start,
    status_of,
    visible_state,
    wait_for_state,
)
from tests.support.live_stack import run_script, temporal_workflow_start
from tests.support.reviewing import signed
from tests.support.simulator import Simulator
from workflows import contract
from workflows.llm.graph import GRAPH
from workflows.payloads import PipelineResult, RunStatus

pytestmark = pytest.mark.e2e

EDGES = {(t.source, t.event, t.target) for t in GRAPH.transitions}


def assert_walks_the_graph(result: PipelineResult) -> None:
    steps = [(h.from_state, h.event, h.to_state) for h in result.history]
    assert set(steps) <= EDGES, steps
    for before, after in zip(result.history, result.history[1:], strict=False):
        assert before.to_state == after.from_state


async def test_happy_path_completes_with_content_and_embedding(
    client: Client, simulator: Simulator
) -> None:
    """A plain request runs fetch -> LLM -> embedding -> completed, visible as AiState."""
    handle = await start(client, request("What is durable execution?"))
    result = await finished(handle)
    assert result.state == "completed"
    assert result.content and "durable execution" in result.content
    assert result.embedding_id
    assert result.model == "sim-large"
    assert [h.to_state for h in result.history] == [
        "fetch_prompt",
        "invoke_llm",
        "generate_embedding",
        "completed",
    ]
    assert_walks_the_graph(result)
    assert await visible_state(client, handle.id, "completed")
    chats = simulator.chat_requests(handle.id)
    assert len(chats) == 1
    assert chats[0]["idempotency_key"] == await llm_call_key(handle, 1)


async def test_review_approve_via_signal(client: Client, reviewer_key: SigningKey) -> None:
    """needs_review parks the run in await_review (AiState too); the review signal approves."""
    handle = await start(client, request("Sensitive answer [sim:review]"))
    await wait_for_state(handle, "await_review")
    assert await visible_state(client, handle.id, "await_review")
    await handle.signal(
        contract.SIGNAL_REVIEW, await signed(handle, reviewer_key, "approve", "ann")
    )
    result = await finished(handle)
    assert result.state == "completed"
    approve = next(h for h in result.history if h.event == "approve")
    assert approve.detail == "approve by ann"


async def test_review_approve_via_update_returns_new_status(
    client: Client, reviewer_key: SigningKey
) -> None:
    """The submit_review update applies the decision and returns the status after it."""
    handle = await start(client, request("Check me", review="always"))
    await wait_for_state(handle, "await_review")
    after = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        await signed(handle, reviewer_key, "approve", "bob"),
        result_type=RunStatus,
    )
    assert after.state in ("generate_embedding", "completed")
    assert (await finished(handle)).state == "completed"


async def test_reedit_sends_feedback_to_the_llm(
    client: Client, simulator: Simulator, reviewer_key: SigningKey
) -> None:
    """reedit goes back to invoke_llm with the reviewer's feedback in the prompt."""
    handle = await start(client, request("Write a tagline", review="always"))
    await wait_for_state(handle, "await_review")
    await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        await signed(handle, reviewer_key, "reedit", "cy", "Make it rhyme"),
        result_type=RunStatus,
    )
    second = await wait_for_state(handle, "await_review")
    assert second.attempts == 2
    await handle.signal(contract.SIGNAL_REVIEW, await signed(handle, reviewer_key, "approve", "cy"))
    result = await finished(handle)
    assert result.state == "completed"
    chats = simulator.chat_requests(handle.id)
    assert len(chats) == 2
    first_prompt = json.dumps(chats[0]["messages"])
    second_prompt = json.dumps(chats[1]["messages"])
    assert "Make it rhyme" not in first_prompt
    assert "Reviewer feedback: Make it rhyme" in second_prompt
    assert "Make it rhyme" in (result.content or "")


async def test_reject_ends_failed(client: Client, reviewer_key: SigningKey) -> None:
    """reject ends the run in failed, naming the reviewer in the status."""
    handle = await start(client, request("Announce profits", review="always"))
    await wait_for_state(handle, "await_review")
    after = await handle.execute_update(
        contract.UPDATE_SUBMIT_REVIEW,
        await signed(handle, reviewer_key, "reject", "legal", "no"),
        result_type=RunStatus,
    )
    assert after.state == "failed"
    assert after.last_error == "rejected by legal"
    result = await finished(handle)
    assert result.state == "failed"
    assert await visible_state(client, handle.id, "failed")


async def test_update_refused_when_not_awaiting_review(
    client: Client, reviewer_key: SigningKey
) -> None:
    """While the LLM call runs, submit_review is refused at once and the state is unchanged."""
    handle = await start(client, request("Slow one [sim:hang=3]", review="always"))
    await wait_for_state(handle, "invoke_llm")
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update(
            contract.UPDATE_SUBMIT_REVIEW, {"decision": "approve", "reviewer": "dan"}
        )
    assert "not awaiting review (state: invoke_llm)" in str(info.value.cause)
    assert (await status_of(handle)).state == "invoke_llm"
    await wait_for_state(handle, "await_review", timeout=30)
    await handle.signal(
        contract.SIGNAL_REVIEW, await signed(handle, reviewer_key, "approve", "dan")
    )
    assert (await finished(handle)).state == "completed"


async def test_same_request_id_runs_once(client: Client, simulator: Simulator) -> None:
    """Starting the same request_id again is refused; the LLM is called once for it."""
    payload = request("Only once please")
    handle = await start(client, payload)
    with pytest.raises(WorkflowAlreadyStartedError):
        await start(client, payload)
    assert (await finished(handle)).state == "completed"
    assert len(simulator.chat_requests(handle.id)) == 1


def test_starter_cli_start_status_and_refused_review(stack: LocalStack) -> None:
    """starter.py start --wait prints the id and a UI link on stderr (stdout is the result);
    a refused review is one clear line."""
    env = {**stack.addresses.env(), "TEMPORAL_UI_URL": "http://ui.example"}
    run_id = new_request_id()
    started = run_script(
        "starter.py", "start", "Hello from the CLI", "--id", run_id, "--wait", env=env
    )
    assert started.returncode == 0, started.stderr
    assert f"started {run_id}" in started.stderr
    assert f"http://ui.example/namespaces/default/workflows/{run_id}" in started.stderr
    again = run_script("starter.py", "start", "again", "--id", run_id, env=env)
    assert again.returncode == 1
    assert "already started" in again.stderr
    assert "Traceback" not in again.stderr
    refused = run_script("starter.py", "review", run_id, "approve", env=env)
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert run_id in refused.stderr
    history = run_script("starter.py", "history", run_id, env={**env, "COLUMNS": "200"})
    assert history.returncode == 0, history.stderr
    for event in ("start", "prompt_ready", "llm_ok", "embedded"):
        assert event in history.stdout


async def test_bad_request_from_the_temporal_cli_fails_at_once(
    stack: LocalStack, client: Client
) -> None:
    """A bad request_id sent by the plain Temporal CLI fails the run within seconds, naming it."""
    workflow_id = f"cli-bad-{new_request_id()}"
    raw_input = json.dumps({"request_id": "NOT-HEX", "user_message": "hi"})
    started = temporal_workflow_start(stack, workflow_id, raw_input)
    assert started.returncode == 0, started.stderr
    handle = client.get_workflow_handle(workflow_id)
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), 10)
    assert isinstance(info.value.cause, ApplicationError)
    assert info.value.cause.type == "InvalidRequest"
    assert "request_id" in str(info.value.cause)
    description = await handle.describe()
    assert description.status is not None and description.status.name == "FAILED"


def test_second_worker_on_one_embedded_store_says_so(stack: LocalStack) -> None:
    """A second worker pointed at the running worker's embedded vector store stops at once with
    one line naming the store and what to do, not a claim that Temporal is unreachable."""
    env = {**stack.addresses.env(), "METRICS_PORT": "0", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    second = run_script("worker.py", env=env)
    assert second.returncode == 1
    assert "Traceback" not in second.stderr
    assert second.stderr.strip().splitlines()[-1] == (
        f"worker: the embedded vector store at {stack.addresses.vector_store_path} is in use by "
        "another process (another worker?); an embedded store serves one process: give each "
        "worker its own VECTOR_STORE_PATH, or point them all at a Qdrant server "
        "(VECTOR_STORE_URL)"
    )
    assert "cannot connect to Temporal" not in second.stderr


def starter(stack: LocalStack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_script("starter.py", *args, env={**stack.addresses.env(), **env})


async def test_starter_shows_results_and_lists_whole_ids(stack: LocalStack, client: Client) -> None:
    """`result` prints a finished run's result, a failed one's too (read from its failure,
    exit status 3 and one line saying why), and says in one line when a run has not
    finished; `list` never cuts a workflow id, even in a narrow terminal or a pipe, and `list
    --json` gives scripts every id; `start` prints the review inbox's link when INBOX_URL is
    set."""
    done = await start(client, request("Result please"))
    failed = await start(client, request("Give up [sim:status=400]"))
    waiting = await start(client, request("Wait for me", review="always"))
    await wait_for_state(waiting, "await_review")
    await finished(done)
    await finished(failed)

    shown = starter(stack, "result", done.id)
    assert shown.returncode == 0, shown.stderr
    assert PipelineResult.model_validate_json(shown.stdout).state == "completed"
    shown_failed = starter(stack, "result", failed.id)
    assert shown_failed.returncode == 3, shown_failed.stderr
    assert PipelineResult.model_validate_json(shown_failed.stdout).state == "failed"
    [failure] = shown_failed.stderr.splitlines()
    assert failure.startswith(f"error: run {failed.id} ended in failed: LlmPermanent")
    pending = starter(stack, "result", waiting.id)
    assert pending.returncode == 1
    assert f"run {waiting.id} has not finished (await_review)" in pending.stderr

    narrow = starter(stack, "list", "--limit", "500", COLUMNS="40")
    assert narrow.returncode == 0, narrow.stderr
    for handle in (done, failed, waiting):
        assert handle.id in narrow.stdout
    listed = json.loads(starter(stack, "list", "--json", "--limit", "500").stdout)
    by_id = {row["workflow_id"]: row for row in listed}
    assert by_id[waiting.id]["state"] == "await_review"
    assert by_id[failed.id]["temporal_status"] == "FAILED"

    inbox = starter(
        stack, "start", "Link please", "--id", new_request_id(), INBOX_URL="http://inbox.example"
    )
    assert inbox.returncode == 0, inbox.stderr
    assert "Review inbox: http://inbox.example/runs/" in inbox.stdout
    await waiting.cancel()
