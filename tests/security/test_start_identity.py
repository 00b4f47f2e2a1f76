"""Who is asking: with start authentication on (REQUESTER_PUBLIC_KEYS), a run's requester and
tenant are those of the key that signed its start claim, never what the request says. Tried as
outsiders with a Temporal client and the CLI, against a real dev server and worker process."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.signing import SigningKey
from tests.support.builders import new_request_id
from tests.support.live_runs import request, start, status_of, wait_for_state
from tests.support.live_stack import (
    E2E_WORKER_ENV,
    starter,
    temporal_cli,
    temporal_workflow_start,
)
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, write_pipeline
from tests.support.reviewing import signed
from tests.support.simulator import Simulator
from workflows import contract, errors
from workflows.payloads import BudgetDecision, PipelineRequest, RunStatus

pytestmark = pytest.mark.e2e

ALICE = SigningKey.generate("alice")
BOB = SigningKey.generate("bob")


# A second pipeline file whose input has the triage file's shape: a claim for one must not
# start the other.
LOOKALIKE_PIPELINE = "TriageCopy"


@pytest.fixture(scope="module")
def pipelines_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pipelines")
    write_pipeline(folder, TRIAGE_V1)
    copy = TRIAGE_V1.replace(f"name: {TRIAGE}", f"name: {LOOKALIKE_PIPELINE}")
    write_pipeline(folder, copy, "triage_copy.yaml")
    return folder


@pytest.fixture(scope="module")
def worker_env(pipelines_dir: Path) -> dict[str, str]:
    keys = f"{ALICE.requester_entry('acme')},{BOB.requester_entry('bigco')}"
    return {
        **E2E_WORKER_ENV,
        "REQUESTER_PUBLIC_KEYS": keys,
        "PIPELINES_DIR": str(pipelines_dir),
    }


async def refused(client: Client, payload: dict[str, Any], words: str) -> None:
    """The run fails at once with InvalidRequest naming ``words``; no model is called."""
    handle = await start(client, payload)
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert errors.INVALID_REQUEST in cause.message, cause.message
    status = await status_of(handle)
    assert words in (status.last_error or ""), status.last_error
    assert status.attempts == 0


def signed_start(key: SigningKey, message: str, **fields: Any) -> dict[str, Any]:
    claimed = key.sign_start(
        PipelineRequest.model_validate(request(message, **fields)),
        workflow_type=contract.WORKFLOW_TYPE,
        namespace="default",
        now=datetime.now(UTC),
    )
    return claimed.model_dump(mode="json", exclude_none=True)


async def test_unsigned_or_tampered_starts_fail_before_any_call(client: Client) -> None:
    """A start without a claim, a claim moved onto another message, a claim of alice's naming
    another team's tenant or another requester, and a claim signed by a key the workers do not
    know each fail the run at once: the request names no one the workers trust."""
    await refused(client, request("who am I"), "the start is not signed")
    tampered = signed_start(ALICE, "a harmless question")
    tampered["user_message"] = "spend the budget on something else"
    await refused(client, tampered, "issued for another request")
    await refused(client, signed_start(ALICE, "x", tenant="bigco"), "not the tenant of the key")
    await refused(client, signed_start(ALICE, "x", requested_by="bob"), "another requester")
    stranger = SigningKey.generate("alice")
    await refused(client, signed_start(stranger, "x"), "signature does not verify")


async def test_a_claim_starts_one_run_only(client: Client) -> None:
    """A claim vouches for one request id and the run's id is its request id: replayed while
    the run is open, Temporal refuses the start; under a new request id the run fails."""
    original = signed_start(BOB, "once", review="always")
    handle = await start(client, original)
    assert (await wait_for_state(handle, "await_review")).tenant == "bigco"
    with pytest.raises(WorkflowAlreadyStartedError):
        await start(client, original)
    replayed = {**original, "request_id": new_request_id()}
    await refused(client, replayed, "issued for another request")
    await handle.cancel()


async def test_a_signed_start_names_its_requester_and_tenant(
    stack: LocalStack, client: Client
) -> None:
    """alice's CLI (REQUESTER_KEY) signs her start: the run spends acme's budget and names
    her as its requester, so her own approval is refused while another reviewer's is taken."""
    done = starter(
        stack,
        "start",
        "Review my own work",
        "--review",
        "always",
        env={"REQUESTER_KEY": ALICE.private_entry()},
    )
    assert done.returncode == 0, done.stderr
    workflow_id = done.stdout.split("started ", 1)[1].split()[0]
    handle = client.get_workflow_handle(workflow_id)
    waiting: RunStatus = await wait_for_state(handle, "await_review")
    assert waiting.tenant == "acme"
    own = await signed(handle, stack.reviewer_key, "approve", "alice")
    with pytest.raises(WorkflowUpdateFailedError) as refusal:
        await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, own, result_type=RunStatus)
    assert "requested this run" in str(refusal.value.cause)
    other = await signed(handle, stack.reviewer_key, "approve", "carol")
    await handle.execute_update(contract.UPDATE_SUBMIT_REVIEW, other, result_type=RunStatus)
    assert (await status_of(handle)).state in ("generate_embedding", "completed")


async def test_a_requester_cannot_approve_their_own_overspend(
    stack: LocalStack, client: Client
) -> None:
    """alice's signed run waits in await_budget; as its requester she sends ``decide_budget``
    unsigned as "cfo", with a token signed for her own name, and with one made for another
    run: each is refused and the run still waits; the operator's own approval, signed by
    `budget --print` (the stack's REVIEWER_KEY_FILE) and sent with the plain Temporal CLI,
    goes through."""
    payload = signed_start(ALICE, "Spend freely", options={"max_cost_usd": 0.000001})
    handle = await start(client, payload)
    await wait_for_state(handle, "await_budget")
    chain = (await handle.describe()).raw_description.workflow_execution_info.first_run_id
    now = datetime.now(UTC)
    key = stack.reviewer_key

    async def refused_budget(decision: BudgetDecision, words: str) -> None:
        with pytest.raises(WorkflowUpdateFailedError) as refusal:
            await handle.execute_update(
                contract.UPDATE_DECIDE_BUDGET,
                decision.model_dump(mode="json", exclude_none=True),
                result_type=RunStatus,
            )
        assert words in str(refusal.value.cause), refusal.value.cause
        assert (await status_of(handle)).state == "await_budget"

    cfo = BudgetDecision(decision="approve", operator="cfo")
    await refused_budget(cfo, "not signed")
    own = key.sign_budget(
        BudgetDecision(decision="approve", operator="alice"),
        workflow_id=handle.id,
        run_id=chain,
        now=now,
    )
    await refused_budget(own, "requested this run")
    elsewhere = key.sign_budget(cfo, workflow_id=new_request_id(), run_id=chain, now=now)
    await refused_budget(elsewhere, "issued for another run")
    printed = starter(
        stack,
        "budget",
        handle.id,
        "approve",
        "--operator",
        "cfo",
        "--print",
    )
    assert printed.returncode == 0, printed.stderr
    sent = temporal_cli(
        "workflow",
        "update",
        "execute",
        "--address",
        stack.addresses.temporal_address,
        "--workflow-id",
        handle.id,
        "--name",
        contract.UPDATE_DECIDE_BUDGET,
        "--input",
        printed.stdout.strip(),
    )
    assert sent.returncode == 0, sent.stderr
    await wait_for_state(handle, "completed", timeout=60)


async def test_the_temporal_cli_starts_a_run_the_cli_signed_for_it(
    stack: LocalStack, client: Client
) -> None:
    """`start --print` (with REQUESTER_KEY) prints the signed input; the plain Temporal CLI
    starts it under its request id and the run is bob's, spending bigco's budget. The same
    input without its claim fails at once."""
    request_id = new_request_id()
    printed = starter(
        stack,
        "start",
        "Started by another client",
        "--id",
        request_id,
        "--print",
        env={"REQUESTER_KEY": BOB.private_entry()},
    )
    assert printed.returncode == 0, printed.stderr
    payload = json.loads(printed.stdout)
    assert payload["request_id"] == request_id and payload["start_claim"]
    started = temporal_workflow_start(stack, request_id, printed.stdout.strip())
    assert started.returncode == 0, started.stderr
    handle = client.get_workflow_handle(request_id)
    assert (await wait_for_state(handle, "completed", timeout=60)).tenant == "bigco"
    unsigned = {key: value for key, value in payload.items() if key != "start_claim"}
    unsigned["request_id"] = new_request_id()
    await refused(client, unsigned, "the start is not signed")


async def test_a_claim_for_one_pipeline_or_namespace_starts_no_other(
    stack: LocalStack, client: Client, pipelines_dir: Path
) -> None:
    """alice's CLI signs a start of the SupportTriage pipeline (``start --print``). Started as
    TriageCopy, another pipeline file whose input has the same shape, under the same id, the
    run fails at once naming another pipeline, and no model is called; her claim for the same
    pipeline in another namespace fails too. Her claim started as she meant it runs as hers."""
    simulator = Simulator(stack.addresses.openai_base_url)

    def printed(request_id: str, **env: str) -> dict[str, Any]:
        done = starter(
            stack,
            "start",
            "--pipeline",
            TRIAGE,
            "--id",
            request_id,
            "--input",
            json.dumps({"ticket": "Refund order 42 to my new account"}),
            "--print",
            env={
                "REQUESTER_KEY": ALICE.private_entry(),
                "PIPELINES_DIR": str(pipelines_dir),
                **env,
            },
        )
        assert done.returncode == 0, done.stderr
        payload: dict[str, Any] = json.loads(done.stdout)
        return payload

    async def refused_as(workflow_type: str, payload: dict[str, Any], words: str) -> None:
        handle = await client.start_workflow(
            workflow_type,
            payload,
            id=payload["request_id"],
            task_queue=contract.DEFAULT_TASK_QUEUE,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError)
        assert errors.INVALID_REQUEST in f"{cause.type}: {cause.message}"
        assert words in cause.message, cause.message
        assert simulator.requests(handle.id) == []

    claim = printed(new_request_id())
    await refused_as(LOOKALIKE_PIPELINE, claim, "issued for another pipeline")
    elsewhere = printed(new_request_id(), TEMPORAL_NAMESPACE="elsewhere")
    await refused_as(TRIAGE, elsewhere, "issued for another namespace")
    meant = printed(new_request_id())
    handle = await client.start_workflow(
        TRIAGE, meant, id=meant["request_id"], task_queue=contract.DEFAULT_TASK_QUEUE
    )
    waiting = await wait_for_state(handle, "reply_review")
    assert waiting.tenant == "acme"
    await handle.terminate(reason="test over")
