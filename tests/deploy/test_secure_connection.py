"""A worker and the starter reach a secured Temporal frontend: mutual TLS with certificates made
here, and an API key on every call (``tests.support.grpc_proxy`` in front of the dev server,
verifying client certificates against its CA). The worker reads a TOML profile
(``TEMPORAL_CONFIG_FILE``/``TEMPORAL_PROFILE``), the starter the ``TEMPORAL_*`` variables: the
two ways ``temporalio.envconfig`` offers. What a user gets wrong (a certificate from another
CA, no API key, a key file that is not there) ends in one line and exit status 1.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aiorch.devstack.processes import free_port
from aiorch.devstack.stack import LocalStack
from tests.deploy.processes import error_lines, probe, process_env, run_command, start_worker
from tests.support.certs import SERVER_NAME, Authority, Pem, issue, make_authority
from tests.support.grpc_proxy import Proxy, methods, mtls_proxy

pytestmark = pytest.mark.e2e

API_KEY = "test-api-key-" + uuid.uuid4().hex


@dataclass(frozen=True)
class Pki:
    """The test's certificates: one CA the proxy trusts, one it does not."""

    ca: Authority
    server: Pem
    worker: Pem
    starter: Pem
    intruder: Pem  # signed by the untrusted CA


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, rogue = make_authority(directory, "trusted-ca"), make_authority(directory, "rogue-ca")
    return Pki(
        ca=ca,
        server=issue(directory, ca, "frontend", server=True),
        worker=issue(directory, ca, "worker", server=False),
        starter=issue(directory, ca, "starter", server=False),
        intruder=issue(directory, rogue, "intruder", server=False),
    )


@pytest.fixture(scope="module")
def proxy(bare_stack: LocalStack, pki: Pki) -> Iterator[Proxy]:
    with mtls_proxy(
        upstream=bare_stack.addresses.temporal_address,
        ca_cert=pki.ca.pem.cert,
        server_cert=pki.server.cert,
        server_key=pki.server.key,
        api_key=API_KEY,
    ) as running:
        yield running


def mtls_variables(proxy: Proxy, pki: Pki, client: Pem, *, api_key: bool = True) -> dict[str, str]:
    """The standard variables for mTLS (and an API key) to the proxy."""
    env = {
        "TEMPORAL_ADDRESS": proxy.address,
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(client.cert_path),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(client.key_path),
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca.pem.cert_path),
    }
    return {**env, "TEMPORAL_API_KEY": API_KEY} if api_key else env


def profile_file(directory: Path, proxy: Proxy, pki: Pki, key_file: Path) -> Path:
    """A Temporal CLI profile ``secure`` for the worker: address, TLS files, the server's name.
    The API key stays out of it (it comes from ``TEMPORAL_API_KEY_FILE``)."""
    path = directory / "temporal.toml"
    path.write_text(
        f"""
[profile.secure]
address = "{proxy.address}"
namespace = "default"

[profile.secure.tls]
client_cert_path = "{pki.worker.cert_path}"
client_key_path = "{pki.worker.key_path}"
server_ca_cert_path = "{pki.ca.pem.cert_path}"
server_name = "{SERVER_NAME}"
""",
        encoding="utf-8",
    )
    key_file.write_text(API_KEY + "\n", encoding="utf-8")
    key_file.chmod(0o600)
    return path


def test_worker_and_starter_run_a_pipeline_over_mtls_with_an_api_key(
    bare_stack: LocalStack, proxy: Proxy, pki: Pki, tmp_path: Path
) -> None:
    """A worker configured by a TOML profile and a starter configured by variables both reach
    Temporal only through the mTLS proxy; a run completes; the proxy saw every call carry the
    API key and a client certificate of its CA (the worker's and the starter's), and the
    worker's readiness probe says ready. SIGTERM then drains it and it exits 0."""
    health_port = free_port()
    key_file = tmp_path / "api-key"
    worker_env = process_env(
        bare_stack,
        {
            "TEMPORAL_CONFIG_FILE": str(profile_file(tmp_path, proxy, pki, key_file)),
            "TEMPORAL_PROFILE": "secure",
            "TEMPORAL_API_KEY_FILE": str(key_file),
            "HEALTH_PORT": str(health_port),
        },
    )
    worker = start_worker(bare_stack, "worker-mtls", worker_env)
    try:
        assert "mTLS, API key" in worker.log_text()
        assert probe(health_port, "/readyz") == (200, {"status": "ready", "detail": "polling"})
        request_id = uuid.uuid4().hex[:24]
        starter_env = process_env(bare_stack, mtls_variables(proxy, pki, pki.starter))
        done = run_command(
            [
                "starter.py",
                "start",
                "hello over mutual TLS",
                "--id",
                request_id,
                "--review",
                "never",
                "--wait",
            ],
            starter_env,
        )
        assert done.returncode == 0, done.stderr
        assert "completed" in done.stdout
    finally:
        worker.stop(timeout=60)
    assert worker.returncode == 0, worker.log_text()[-2000:]

    calls = proxy.log.snapshot()
    assert calls and all(call.authorized for call in calls), "a call without the API key"
    assert {call.client for call in calls} == {"worker", "starter"}
    worker_calls = methods(calls, lambda call: call.client == "worker")
    assert {"PollWorkflowTaskQueue", "PollActivityTaskQueue", "RespondWorkflowTaskCompleted"} <= (
        worker_calls
    )
    assert "StartWorkflowExecution" in methods(calls, lambda call: call.client == "starter")


@pytest.mark.parametrize("command", ["worker", "starter"])
def test_a_certificate_from_another_ca_fails_with_one_line(
    bare_stack: LocalStack, proxy: Proxy, pki: Pki, command: str
) -> None:
    """A client certificate the frontend does not trust stops the worker and the starter with
    one line that names the client certificate, exit status 1, no traceback."""
    env = process_env(bare_stack, mtls_variables(proxy, pki, pki.intruder))
    done = run_command(_argv(command), env)
    line = _one_error_line(done)
    assert line.startswith(_prefix(command))
    assert "refused the client certificate" in line
    assert "TEMPORAL_TLS_CLIENT_CERT_PATH" in line


@pytest.mark.parametrize("command", ["worker", "starter"])
def test_a_missing_api_key_fails_with_one_line(
    bare_stack: LocalStack, proxy: Proxy, pki: Pki, command: str
) -> None:
    """Without the API key the frontend refuses the first call (the proxy saw it, without the
    key); the worker and the starter say so in one line that names TEMPORAL_API_KEY."""
    seen_before = len(proxy.log.snapshot())
    client = pki.worker if command == "worker" else pki.starter
    env = process_env(bare_stack, mtls_variables(proxy, pki, client, api_key=False))
    done = run_command(_argv(command), env)
    line = _one_error_line(done)
    assert line.startswith(_prefix(command))
    assert "refused the credentials" in line
    assert "TEMPORAL_API_KEY" in line
    refused = proxy.log.snapshot()[seen_before:]
    assert refused and not any(call.authorized for call in refused), refused


@pytest.mark.parametrize("command", ["worker", "starter"])
def test_a_missing_client_key_file_fails_with_one_line(
    bare_stack: LocalStack, proxy: Proxy, pki: Pki, tmp_path: Path, command: str
) -> None:
    """A client key file that is not there is a configuration error: one line naming the
    variable and the path, before any connection is tried."""
    missing = tmp_path / "nowhere.key"
    variables = mtls_variables(proxy, pki, pki.worker)
    env = process_env(bare_stack, {**variables, "TEMPORAL_TLS_CLIENT_KEY_PATH": str(missing)})
    done = run_command(_argv(command), env)
    line = _one_error_line(done)
    assert line.startswith(_prefix(command))
    assert "TEMPORAL_TLS_CLIENT_KEY_PATH" in line and str(missing) in line


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a command that failed with exit status 1 (else the whole
    output, to say why not)."""
    lines = error_lines(done)
    assert done.returncode == 1 and len(lines) == 1, f"rc={done.returncode}\n{done.stderr}"
    return lines[0]


def _argv(command: str) -> list[str]:
    return ["worker.py"] if command == "worker" else ["starter.py", "list"]


def _prefix(command: str) -> str:
    return "worker: " if command == "worker" else "error: "
