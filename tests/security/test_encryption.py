"""Payload encryption under attack, tried as an attacker who holds only a Temporal client (no
payload keys, no codec), against a real dev server and a real worker process.

The worker runs as the compose stack does: ``PAYLOAD_KEYS`` set and ``REQUIRE_ENCRYPTION=true``.
The attacker can start runs, signal and update them and read their (encrypted) histories. She
copies an encrypted payload out of one run's history into another run, sends plaintext where
ciphertext is required, and calls the codec server without naming a namespace or with a payload
of another namespace; what the codec server itself encodes is no run's input either. The test
reads outcomes with the deployment's own keys.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from aiorch.devstack.stack import LocalStack
from aiorch.ops.results import finished
from aiorch_runtime.codec import Binding, EncryptionCodec, KeyRing, new_key
from aiorch_runtime.temporal import encrypted_converter
from tests.support.builders import new_request_id
from tests.support.history_events import refused_at_once
from tests.support.live_runs import request, start, status_of, wait_for_state
from tests.support.live_stack import CLOSES_WITHIN_S, E2E_WORKER_ENV, connect, post_json, run_script
from tests.support.reviewing import signed
from workflows import contract
from workflows.payloads import RunStatus

pytestmark = pytest.mark.e2e

KEYS = f"k1:{new_key()}"
WORKER_ENV = {**E2E_WORKER_ENV, "PAYLOAD_KEYS": KEYS, "REQUIRE_ENCRYPTION": "true"}
NAMESPACE = "default"


@pytest.fixture(scope="module")
def worker_env() -> dict[str, str]:
    return WORKER_ENV


@pytest.fixture(scope="module")
async def client(stack: LocalStack) -> Client:
    """The deployment's own client: same keys, same rules as the worker."""
    return await connect(stack, encrypted_converter(KeyRing.parse(KEYS), require_encryption=True))


@pytest.fixture(scope="module")
async def attacker(stack: LocalStack) -> Client:
    """A client with namespace access and no keys: sends what it likes, as it is."""
    return await connect(stack)


async def start_payload(attacker: Client, workflow_id: str) -> Payload:
    """The (encrypted) start input of a run, as anyone with namespace access reads it."""
    history = await attacker.get_workflow_handle(workflow_id).fetch_history()
    payload: Payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[
        0
    ]
    return payload


async def refused_start(client: Client, handle: WorkflowHandle[Any, Any], began: float) -> str:
    """The run's failure message (read with the keys), checked to be a non-retryable
    InvalidRequest reached within 10 s, without a failed workflow task, a scheduled activity or
    a local activity."""
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(
            client.get_workflow_handle(handle.id).result(follow_runs=False), CLOSES_WITHIN_S
        )
    assert time.monotonic() - began < CLOSES_WITHIN_S
    return await refused_at_once(info.value, handle)


async def refusals_reach(handle: WorkflowHandle[Any, Any], count: int) -> RunStatus:
    """Poll the status until ``count`` reviews were refused (signals are processed async)."""
    deadline = time.monotonic() + CLOSES_WITHIN_S
    while (status := await status_of(handle)).reviews_refused < count:
        assert time.monotonic() < deadline, f"refused {status.reviews_refused}, want {count}"
        await asyncio.sleep(0.1)
    return status


async def refused_raw_start(client: Client, attacker: Client, payload: Payload) -> str:
    """Start a run with ``payload`` sent as it is (not re-encoded), as the attacker can, and
    return its failure message, checked by ``refused_start``."""
    began = time.monotonic()
    handle = await attacker.start_workflow(
        contract.WORKFLOW_TYPE,
        RawValue(payload),
        id=new_request_id(),
        task_queue=contract.DEFAULT_TASK_QUEUE,
    )
    return await refused_start(client, handle, began)


async def test_a_start_payload_copied_from_another_run_fails_the_run(
    client: Client, attacker: Client
) -> None:
    """Run A's encrypted request, copied from its history into a new start for run B (sent as
    it is, not re-encoded), fails run B within 10 s with InvalidRequest naming the binding:
    the ciphertext is bound to A's workflow id. No activity runs for B, no workflow task
    fails; run A is unaffected."""
    run_a = await start(client, request("Summarise the board minutes", review="always"))
    await wait_for_state(run_a, "await_review")
    copied = await start_payload(attacker, run_a.id)
    assert copied.metadata["encoding"] == b"binary/encrypted"

    message = await refused_raw_start(client, attacker, copied)

    assert message.startswith("invalid request: payload refused: ")
    assert "encrypted for another workflow id" in message
    assert "Summarise" not in message
    assert (await status_of(run_a)).state == "await_review"


async def test_a_plaintext_start_fails_the_run_naming_the_reason(
    client: Client, attacker: Client
) -> None:
    """A well-formed request sent in plaintext to a worker with REQUIRE_ENCRYPTION=true fails
    within 10 s with InvalidRequest saying it is not encrypted; the same request from the
    deployment's client (encrypted) completes, so the worker refuses plaintext, not work."""
    began = time.monotonic()
    plaintext = await start(attacker, request("Explain durable execution", review="never"))
    message = await refused_start(client, plaintext, began)
    assert message == (
        "invalid request: payload refused: not encrypted: this deployment accepts encrypted "
        "payloads only (REQUIRE_ENCRYPTION=true)"
    )

    encrypted = await start(client, request("Explain durable execution", review="never"))
    result = await asyncio.wait_for(finished(encrypted), 60)
    assert result.state == "completed"


async def signal_payload(attacker: Client, workflow_id: str) -> Payload:
    """The (encrypted) argument of the first signal a run received, read from its history."""
    history = await attacker.get_workflow_handle(workflow_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            payload: Payload = event.workflow_execution_signaled_event_attributes.input.payloads[0]
            return payload
    raise AssertionError(f"{workflow_id} received no signal")


async def test_plaintext_or_moved_reviews_are_not_applied(
    stack: LocalStack, client: Client, attacker: Client
) -> None:
    """On a run waiting for review, a review that would be accepted on its content (signed by
    the deployment's identity provider for this run and round) is not applied when it arrives
    as an encrypted payload copied from another run's history (bound to that run), nor when it
    arrives in plaintext: each signal is counted as refused, and the update is refused saying
    it is not encrypted. The run stays in review, and the same review sent encrypted by the
    deployment's client approves it."""
    other = await start(client, request("Another run", review="always"))
    waiting = await start(client, request("Review me", review="always"))
    await wait_for_state(other, "await_review")
    await wait_for_state(waiting, "await_review")
    review = await signed(waiting, stack.reviewer_key, "approve", "ann")
    # The review, encrypted for the other run, lands in that run's history (which refuses it).
    await other.signal(contract.SIGNAL_REVIEW, review)
    moved = await signal_payload(attacker, other.id)
    assert moved.metadata["encoding"] == b"binary/encrypted"
    exposed = attacker.get_workflow_handle(waiting.id)
    before = (await status_of(waiting)).reviews_refused

    await exposed.signal(contract.SIGNAL_REVIEW, RawValue(moved))
    await refusals_reach(waiting, before + 1)
    await exposed.signal(contract.SIGNAL_REVIEW, review)
    status = await refusals_reach(waiting, before + 2)
    assert status.state == "await_review"

    with pytest.raises(WorkflowUpdateFailedError) as info:
        await exposed.execute_update(contract.UPDATE_SUBMIT_REVIEW, review, result_type=RunStatus)
    assert isinstance(info.value.cause, ApplicationError)
    encoded = info.value.cause.failure
    assert encoded is not None  # its message is encrypted: the attacker cannot read it
    readable = Failure()
    readable.CopyFrom(encoded)
    refusal = await client.data_converter.decode_failure(readable)
    assert "not encrypted" in str(refusal) and "REQUIRE_ENCRYPTION=true" in str(refusal)
    assert (await status_of(waiting)).state == "await_review"

    await waiting.signal(contract.SIGNAL_REVIEW, review)
    result = await asyncio.wait_for(finished(waiting), 60)
    assert result.state == "completed"


def codec_post(
    stack: LocalStack, payloads: list[Payload], headers: dict[str, str], endpoint: str = "decode"
) -> tuple[int, dict[str, Any]]:
    url = stack.addresses.codec_server_url
    assert url is not None
    body = {"payloads": [json_format.MessageToDict(p) for p in payloads]}
    status, _, reply = post_json(f"{url}/{endpoint}", body, headers)
    return status, reply


async def test_codec_server_needs_the_namespace_and_refuses_another(
    stack: LocalStack, client: Client, attacker: Client
) -> None:
    """With the token, the codec server decodes this namespace's payloads only when the
    request names the namespace: without X-Namespace it is 400, and a payload encrypted for
    another namespace with the same keys is 403, alone or in a batch with a good one."""
    handle = await start(client, request("Codec server check", review="always"))
    ours = await start_payload(attacker, handle.id)
    [theirs] = await EncryptionCodec(
        KeyRing.parse(KEYS), binding=Binding("other-namespace", handle.id)
    ).encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"their data"')])
    token = {"Authorization": f"Bearer {stack.codec_token()}"}

    status, reply = codec_post(stack, [ours], {**token, "X-Namespace": NAMESPACE})
    assert status == 200
    assert b"Codec server check" in json_format.ParseDict(reply["payloads"][0], Payload()).data
    status, reply = codec_post(stack, [ours], token)
    assert status == 400 and "payloads" not in reply
    for batch in ([theirs], [ours, theirs]):
        status, reply = codec_post(stack, batch, {**token, "X-Namespace": NAMESPACE})
        assert status == 403 and "payloads" not in reply
        assert "another namespace" in reply["error"]


async def test_codec_server_encodings_are_no_runs_input(
    stack: LocalStack, client: Client, attacker: Client
) -> None:
    """What the codec server's /encode makes (as the Web UI or `temporal workflow start
    --codec-endpoint` would send it) is encrypted for the namespace and no run: the worker
    refuses it as a start, within 10 s, saying to use the project's client."""
    plain = Payload(
        metadata={"encoding": b"json/plain"},
        data=json.dumps(request("From the Web UI", review="never")).encode(),
    )
    token = {"Authorization": f"Bearer {stack.codec_token()}", "X-Namespace": NAMESPACE}
    status, reply = codec_post(stack, [plain], token, endpoint="encode")
    assert status == 200
    encoded = json_format.ParseDict(reply["payloads"][0], Payload())

    message = await refused_raw_start(client, attacker, encoded)
    assert "encrypted for no run" in message and "starter.py" in message


async def test_cli_without_keys_says_which_keys_to_set(stack: LocalStack, client: Client) -> None:
    """`starter.py status` and `history` without the deployment's keys print one line telling
    the operator to set PAYLOAD_KEYS or use the codec server, exit 1, and show no traceback."""
    handle = await start(client, request("CLI check", review="always"))
    await wait_for_state(handle, "await_review")
    env = {**stack.addresses.env(), "COLUMNS": "200"}
    for command in ("status", "history"):
        done = run_script("starter.py", command, handle.id, env=env)
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: this payload is encrypted"), lines
        assert "set PAYLOAD_KEYS (or PAYLOAD_KEYS_FILE)" in lines[0]
        assert "or use the codec server" in lines[0]
        assert "Traceback" not in done.stderr + done.stdout
