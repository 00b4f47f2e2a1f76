"""Data protection end to end: encrypted payloads, the codec server, key rotation, replay with
encryption and the claim check, against a real dev server, worker, SQS/S3
(moto), LLM simulator and OTLP receiver.

The stack of this module has payload encryption on (``PAYLOAD_KEYS`` in the worker's
environment, so the local stack also starts the codec server and wires the Web UI to it), a
canary API key, traces exported to a local OTLP receiver, and a reedit loop that continues as
new after two rounds, so the replay test covers continued runs too.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer
from typer.testing import CliRunner

import workflows.llm.pipeline as llm
from aiorch.cli import build_app
from aiorch.devstack.processes import free_port, temporal_cli_path
from aiorch.devstack.stack import LocalStack
from aiorch.ops.dead_runs import RedriveError, run_request
from aiorch.ops.results import finished
from aiorch.ops.signing import SigningKey
from aiorch_runtime.codec import METADATA_KEY_ID, KeyRing, PayloadUnreadable, new_key
from aiorch_runtime.temporal import DATA_CONVERTER, encrypted_converter
from tests.e2e.test_observability import OtlpReceiver
from tests.support.builders import new_request_id
from tests.support.live_runs import request, start, wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, post_json, run_script
from tests.support.reviewing import signed
from tests.support.simulator import Simulator
from workflows import contract
from workflows.orchestrator import EngineWorkflow
from workflows.payloads import DeadLetterMessage, PipelineRequest, RunStatus

pytestmark = pytest.mark.e2e

CANARY = f"canary-{uuid.uuid4().hex[:12]}"
API_KEY = f"sk-canary-{uuid.uuid4().hex}"
KEY_1, KEY_2 = new_key(), new_key()
KEYS = f"k1:{KEY_1},k2:{KEY_2}"
QUEUE = "ai-orchestrator-dlq"


@dataclass
class Protected:
    stack: LocalStack
    receiver: OtlpReceiver
    ui_port: int

    @property
    def address(self) -> str:
        return self.stack.addresses.temporal_address

    @property
    def codec_url(self) -> str:
        url = self.stack.addresses.codec_server_url
        assert url is not None
        return url

    def env(self, **extra: str) -> dict[str, str]:
        """What a starter process needs: the stack's addresses and the same keys."""
        return {
            **self.stack.addresses.env(),
            "PAYLOAD_KEYS": KEYS,
            "PAYLOAD_KEY_ID": self.stack.worker_env["PAYLOAD_KEY_ID"],
            "COLUMNS": "200",
            **extra,
        }


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Protected]:
    ui_port = free_port()
    with OtlpReceiver().running() as receiver:
        worker_env = {
            **E2E_WORKER_ENV,
            "PAYLOAD_KEYS": KEYS,
            "PAYLOAD_KEY_ID": "k1",
            "OPENAI_API_KEY": API_KEY,
            "REEDIT_ROUNDS_PER_RUN": "2",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        with LocalStack(
            tmp_path_factory.mktemp("protected"),
            with_worker=True,
            worker_env=worker_env,
            ui_port=ui_port,
        ) as stack:
            yield Protected(stack, receiver, ui_port)


def converter(current: str = "k1", spec: str = KEYS) -> Any:
    return encrypted_converter(KeyRing.parse(spec, current))


@pytest.fixture(scope="module")
async def client(protected: Protected) -> Client:
    """The project's client, with the same keys as the worker."""
    return await Client.connect(protected.address, data_converter=converter())


@pytest.fixture(scope="module")
async def plain_client(protected: Protected) -> Client:
    """A client without keys: what anyone with namespace access but no key has."""
    return await Client.connect(protected.address, data_converter=DATA_CONVERTER)


def workflow_show(protected: Protected, workflow_id: str, *codec: str, run_id: str = "") -> str:
    """``temporal workflow show --output json`` for a run, as an operator would run it."""
    args = [str(temporal_cli_path()), "workflow", "show", "--workflow-id", workflow_id]
    args += ["--output", "json", "--address", protected.address, *codec]
    if run_id:
        args += ["--run-id", run_id]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def revealed(text: str, secret: str) -> bool:
    """True when ``secret`` is readable in ``text``: as is, or inside any base64 value (proto
    JSON shows every payload's data and metadata as base64, so a plain search finds nothing)."""
    if secret in text:
        return True
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return False
    return any(secret.encode() in blob for blob in _base64_values(document))


def _base64_values(node: Any) -> Iterator[bytes]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _base64_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from _base64_values(value)
    elif isinstance(node, str) and len(node) >= 8:
        with contextlib.suppress(binascii.Error, ValueError):
            yield base64.b64decode(node, validate=True)


def dead_letter_bodies(protected: Protected) -> list[str]:
    sqs = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("sqs", endpoint_url=protected.stack.addresses.sqs_endpoint_url)
    url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    bodies: dict[str, str] = {}
    for _ in range(5):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        for message in got.get("Messages", []):
            bodies[message["MessageId"]] = message["Body"]
    return list(bodies.values())


def codec_post(
    protected: Protected, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, dict[str, str], dict[str, Any]]:
    return post_json(f"{protected.codec_url}{path}", body, headers)


def as_json_payloads(payloads: list[Payload]) -> dict[str, Any]:
    return {"payloads": [json.loads(json_format.MessageToJson(p)) for p in payloads]}


async def first_input(plain_client: Client, workflow_id: str) -> Payload:
    history = await plain_client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    payload: Payload = started.input.payloads[0]
    return payload


async def canary_run(client: Client, key: SigningKey) -> WorkflowHandle[Any, Any]:
    """A completed run whose request, metadata and reviewer feedback all carry the canary."""
    handle = await start(
        client,
        request(f"{CANARY} explain durable execution", review="always", metadata={"n": CANARY}),
    )
    await reedit_then_approve(handle, key, f"mention {CANARY}")
    return handle


async def reedit_then_approve(
    handle: WorkflowHandle[Any, Any], key: SigningKey, *feedback: str
) -> None:
    """One reedit round (through the update) per ``feedback``, then an approval (a signal)."""
    for text in feedback:
        await wait_for_state(handle, "await_review")
        await handle.execute_update(
            contract.UPDATE_SUBMIT_REVIEW,
            await signed(handle, key, "reedit", "ann", text),
            result_type=RunStatus,
        )
    await wait_for_state(handle, "await_review")
    await handle.signal(contract.SIGNAL_REVIEW, await signed(handle, key, "approve", "ann"))


async def test_canary_is_unreadable_in_history_dead_letters_spans_and_logs(
    protected: Protected, client: Client, plain_client: Client
) -> None:
    """With encryption on, a canary in the request, metadata, feedback and a failing run
    appears nowhere in `temporal workflow show --output json`, the dead-letter message, the
    exported spans or the worker's log, and the canary API key nowhere at all; the project's
    client reads the result (canary included) and a keyless client cannot."""
    done = await canary_run(client, protected.stack.reviewer_key)
    dead = await start(
        client,
        request(f"{CANARY} [sim:status=503]", options={"llm_max_attempts": 1}),
    )
    result = await finished(done)
    dead_result = await finished(dead)

    assert result.state == "completed" and CANARY in (result.content or "")
    assert dead_result.state == "dead_letter"
    for handle in (done, dead):
        shown = workflow_show(protected, handle.id)
        assert handle.id in shown and revealed(shown, "binary/encrypted")
        assert not revealed(shown, CANARY) and not revealed(shown, API_KEY)
    bodies = [b for b in dead_letter_bodies(protected) if dead.id in b]
    assert len(bodies) == 1
    assert CANARY not in bodies[0] and API_KEY not in bodies[0]
    letter = json.loads(bodies[0])
    assert (letter["failed_state"], letter["request"]["request_id"]) == ("invoke_llm", dead.id)
    await asyncio.sleep(1.0)  # the worker exports span batches every 100 ms
    spans = protected.receiver.snapshot()
    assert any(s.attributes.get("aiorch.workflow_id") == done.id for s in spans)
    assert not [s for s in spans if CANARY in repr(s) or API_KEY in repr(s)]
    for name in ("worker", "codec", "temporal"):
        log = protected.stack.processes[name].log_text()
        assert CANARY not in log and API_KEY not in log, name
    with pytest.raises(PayloadUnreadable, match=r"this payload is encrypted .*set PAYLOAD_KEYS"):
        await plain_client.get_workflow_handle(done.id).result()


async def test_codec_server_decodes_for_the_token_only(
    protected: Protected, client: Client, plain_client: Client
) -> None:
    """The codec server decodes with the bearer token (and for the CLI's --codec-auth), answers
    401 without it or with a wrong one, serves only its namespace (named in X-Namespace, as the
    CLI and the Web UI do; 400 without it), answers CORS preflight for the Web UI's origin only,
    and the local Web UI is wired to it."""
    handle = await start(client, request(f"{CANARY} codec check", review="never"))
    await handle.result()
    body = as_json_payloads([await first_input(plain_client, handle.id)])
    token = protected.stack.codec_token()
    namespace = {"X-Namespace": "default"}

    status, _, decoded = codec_post(
        protected, "/decode", body, {"Authorization": f"Bearer {token}", **namespace}
    )
    assert status == 200
    assert CANARY in base64.b64decode(decoded["payloads"][0]["data"]).decode()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
        status, reply_headers, reply = codec_post(
            protected, "/decode", body, {**headers, **namespace}
        )
        assert status == 401, headers
        assert CANARY not in json.dumps(reply)
        assert reply_headers.get("WWW-Authenticate", "").startswith("Bearer")
    status, _, _ = codec_post(protected, f"/{token}/decode", body, namespace)
    assert status == 200  # the Web UI's form: the token as path segment
    for other, expected in (({"X-Namespace": "other"}, 403), ({}, 400)):
        status, _, reply = codec_post(
            protected, "/decode", body, {"Authorization": f"Bearer {token}", **other}
        )
        assert status == expected, other
        assert CANARY not in json.dumps(reply)

    ui_origin = f"http://127.0.0.1:{protected.ui_port}"
    for origin, expected in ((ui_origin, 204), ("http://evil.example", 403)):
        preflight = urllib.request.Request(
            f"{protected.codec_url}/decode",
            method="OPTIONS",
            headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
        )
        try:
            with urllib.request.urlopen(preflight, timeout=10) as response:
                code, allow = response.status, response.headers.get("Access-Control-Allow-Origin")
        except urllib.error.HTTPError as err:
            code, allow = err.code, err.headers.get("Access-Control-Allow-Origin")
        assert code == expected
        assert allow == (ui_origin if expected == 204 else None)

    with urllib.request.urlopen(f"{ui_origin}/api/v1/settings", timeout=10) as response:
        ui_settings = json.load(response)
    assert ui_settings["Codec"]["Endpoint"] == f"{protected.codec_url}/{token}"

    assert token not in protected.stack.processes["codec"].log_text()
    codec_args = ("--codec-endpoint", protected.codec_url, "--codec-auth", f"Bearer {token}")
    assert revealed(workflow_show(protected, handle.id, *codec_args), CANARY)


async def test_key_rotation_keeps_old_runs_and_open_runs_readable(
    protected: Protected, client: Client, plain_client: Client
) -> None:
    """After the current key changes from k1 to k2 (worker restarted, k1 still configured), a
    run started under k1 and finished under k2 completes, new payloads name k2, runs written
    under k1 still decode, and a client that dropped k1 gets an error naming k1."""
    old = await start(client, request(f"{CANARY} before rotation", review="never"))
    await old.result()
    open_run = await start(client, request(f"{CANARY} across rotation", review="always"))
    await wait_for_state(open_run, "await_review")

    protected.stack.stop_worker()
    protected.stack.worker_env["PAYLOAD_KEY_ID"] = "k2"
    protected.stack.start_worker()
    rotated = await Client.connect(protected.address, data_converter=converter("k2"))
    rotated_run = rotated.get_workflow_handle(open_run.id)
    await rotated_run.signal(
        contract.SIGNAL_REVIEW,
        await signed(rotated_run, protected.stack.reviewer_key, "approve", "ann"),
    )
    across = await finished(rotated.get_workflow_handle(open_run.id))
    assert across.state == "completed" and CANARY in (across.content or "")

    history = await plain_client.get_workflow_handle(open_run.id).fetch_history()
    key_ids = {
        payload.metadata[METADATA_KEY_ID].decode()
        for event in history.events
        for payload in _payloads(event)
    }
    assert key_ids == {"k1", "k2"}  # started under k1, completed under k2
    before = await finished(rotated.get_workflow_handle(old.id))
    assert CANARY in (before.content or "")
    only_k2 = await Client.connect(protected.address, data_converter=converter("k2", f"k2:{KEY_2}"))
    with pytest.raises(Exception, match="key id 'k1'"):
        await only_k2.get_workflow_handle(old.id).result()


async def test_redrive_reads_the_request_from_encrypted_history(
    protected: Protected, client: Client, plain_client: Client
) -> None:
    """With encryption on, a dead letter carries no request, so `dlq redrive` reads it from
    the run's history (fetch_history, then a decode outside any run, which opens payloads bound
    to any run of the deployment): the request comes back whole; a client without keys gets
    one line telling it which keys to set."""
    dead = await start(
        client,
        request(f"{CANARY} [sim:status=503] redrive me", options={"llm_max_attempts": 1}),
    )
    assert (await finished(dead)).state == "dead_letter"
    [body] = [b for b in dead_letter_bodies(protected) if dead.id in b]
    letter = DeadLetterMessage.model_validate_json(body)
    assert CANARY not in body

    recovered = await run_request(client, letter.workflow_id, letter.run_id, llm.PIPELINE)
    assert isinstance(recovered, PipelineRequest)
    assert recovered.request_id == dead.id
    assert recovered.user_message.startswith(CANARY)
    with pytest.raises(RedriveError, match="PAYLOAD_KEYS"):
        await run_request(plain_client, letter.workflow_id, letter.run_id, llm.PIPELINE)


def _payloads(event: Any) -> list[Payload]:
    found: list[Payload] = []
    for attributes in (
        "workflow_execution_started_event_attributes",
        "workflow_execution_completed_event_attributes",
        "activity_task_scheduled_event_attributes",
        "activity_task_completed_event_attributes",
        "workflow_execution_signaled_event_attributes",
    ):
        if event.HasField(attributes):
            section = getattr(event, attributes)
            for field in ("input", "result"):
                if field in section.DESCRIPTOR.fields_by_name and section.HasField(field):
                    found.extend(getattr(section, field).payloads)
    return found


async def test_replay_with_encryption_passes(protected: Protected, client: Client) -> None:
    """Runs recorded with encryption on (here: one that continued as new after two reedits,
    plus every other run of this module: dead-lettered, rotated from k1 to k2) replay
    deterministically through the Replayer with the encrypting converter, in their namespace."""
    key = protected.stack.reviewer_key
    handle = await start(client, request("replay me", review="always"))
    await reedit_then_approve(handle, key, "1", "2")
    await handle.result()

    histories = []
    async for execution in client.list_workflows(f"WorkflowType = '{contract.WORKFLOW_TYPE}'"):
        run = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        histories.append(await run.fetch_history())
    assert any(
        e.HasField("workflow_execution_continued_as_new_event_attributes")
        for h in histories
        for e in h.events
    )
    # Payloads are bound to their namespace: a replayer must run in the runs' namespace (its
    # default, "ReplayNamespace", would refuse every payload and so replay another path).
    replayer = Replayer(
        workflows=[EngineWorkflow], data_converter=converter("k2"), namespace=client.namespace
    )
    failures = {}
    for history in histories:
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if replayed.replay_failure is not None:
            failures[history.run_id] = str(replayed.replay_failure)
    assert not failures
    print(f"replayed {len(histories)} encrypted histories")  # figures for the report


def test_five_mb_document_runs_through_the_claim_check(
    protected: Protected, tmp_path: Path
) -> None:
    """`starter.py start --file` with a 5 MB document stores it in S3 (moto) and only the
    s3:// reference enters history: the run completes, its decoded history is small and
    names the reference, and the LLM got the whole document."""
    doc = tmp_path / "big.txt"
    filler = "lorem ipsum dolor sit amet " * 100_000
    doc.write_text(f"{CANARY} big document. {filler} MIDDLE-OF-THE-DOCUMENT {filler}")
    assert doc.stat().st_size > 5_000_000
    run_id = new_request_id()
    done = run_script(
        "starter.py",
        "start",
        "--file",
        str(doc),
        "--id",
        run_id,
        "--wait",
        env=protected.env(),
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert f"as s3://ai-orchestrator-inputs/inputs/{run_id}/" in done.stderr
    assert json.loads(done.stdout)["state"] == "completed"
    token = protected.stack.codec_token()
    shown = workflow_show(
        protected,
        run_id,
        "--codec-endpoint",
        protected.codec_url,
        "--codec-auth",
        f"Bearer {token}",
    )
    assert len(shown) < 200_000
    assert revealed(shown, f"s3://ai-orchestrator-inputs/inputs/{run_id}/")
    assert not revealed(shown, "MIDDLE-OF-THE-DOCUMENT")
    [chat] = Simulator(protected.stack.addresses.openai_base_url).chat_requests(run_id)
    assert len(json.dumps(chat["messages"])) > 5_000_000
    assert "MIDDLE-OF-THE-DOCUMENT" in json.dumps(chat["messages"])


def test_five_mb_inline_message_is_refused_by_the_starter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 5 MB message given inline is refused before anything is sent, with one line that says
    to use --file (a message that size cannot even pass as a process argument on Linux, so the
    starter is called in-process here)."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")  # never reached
    outcome = CliRunner().invoke(build_app(), ["start", "x" * (5 * 1024 * 1024)])
    assert outcome.exit_code == 1
    text = " ".join((outcome.stderr or outcome.output).split())
    assert "the message is 5.0 MiB" in text
    assert "pass --file PATH instead" in text
    assert "Traceback" not in text
