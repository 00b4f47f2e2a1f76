"""Connection settings from ``temporalio.envconfig`` (profile file + ``TEMPORAL_*`` variables),
resolved once in ``aiorch_runtime.config``, and the one-line errors of ``connect``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from aiorch.devstack.processes import free_port
from aiorch_runtime.config import ConfigError, Settings, load_settings
from aiorch_runtime.connection import (
    connect,
    connect_options,
    describe_target,
    failure_reason,
    refusal_reason,
    unreachable,
)
from aiorch_runtime.errors import TemporalUnreachable
from workflows.errors import OrchestratorError

PROFILE = """
[profile.default]
address = "default-host:7233"

[profile.prod]
address = "prod-host:7233"
namespace = "prod-ns"
api_key = "profile-key"

[profile.prod.tls]
server_name = "frontend.internal"
server_ca_cert_data = "CA-PEM"

[profile.prod.grpc_meta]
x-team = "ml"
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No TEMPORAL_* variable from outside, and a HOME without a Temporal CLI profile file."""
    for name in list(os.environ):
        if name.startswith("TEMPORAL_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "temporal.toml"
    path.write_text(PROFILE, encoding="utf-8")
    return path


def test_nothing_set_means_the_local_dev_server_in_plain_text() -> None:
    """Without a variable or a profile file: localhost:7233, namespace default, no TLS."""
    settings = load_settings()
    assert (settings.temporal_address, settings.temporal_namespace) == ("localhost:7233", "default")
    assert settings.temporal_tls is None and settings.temporal_api_key is None
    assert connect_options(settings) == {
        "target_host": "localhost:7233",
        "namespace": "default",
        "tls": False,
    }


def test_an_api_key_turns_tls_on_and_stays_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """TEMPORAL_API_KEY alone gives TLS with the system's roots and the key on every call;
    the key shows in no repr and no description."""
    monkeypatch.setenv("TEMPORAL_API_KEY", "very-secret-key")
    settings = load_settings()
    options = connect_options(settings)
    assert options["api_key"] == "very-secret-key"
    assert isinstance(options["tls"], TLSConfig) and options["tls"].server_root_ca_cert is None
    assert "very-secret-key" not in repr(settings)
    assert describe_target(settings) == "localhost:7233 (namespace default, TLS, API key)"


def test_tls_false_turns_tls_off_even_with_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """TEMPORAL_TLS=false wins over the API key's default (a plain-text proxy in front)."""
    monkeypatch.setenv("TEMPORAL_API_KEY", "k")
    monkeypatch.setenv("TEMPORAL_TLS", "false")
    assert connect_options(load_settings())["tls"] is False


def test_a_profile_gives_address_namespace_key_tls_and_metadata(
    monkeypatch: pytest.MonkeyPatch, profile_file: Path
) -> None:
    """TEMPORAL_CONFIG_FILE + TEMPORAL_PROFILE select a profile; everything it says is used."""
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(profile_file))
    monkeypatch.setenv("TEMPORAL_PROFILE", "prod")
    settings = load_settings()
    options = connect_options(settings)
    assert (options["target_host"], options["namespace"]) == ("prod-host:7233", "prod-ns")
    assert options["api_key"] == "profile-key"
    assert options["rpc_metadata"] == {"x-team": "ml"}
    tls = options["tls"]
    assert isinstance(tls, TLSConfig)
    assert (tls.domain, tls.server_root_ca_cert, tls.client_cert) == (
        "frontend.internal",
        b"CA-PEM",
        None,
    )


def test_variables_win_over_the_profile(
    monkeypatch: pytest.MonkeyPatch, profile_file: Path, tmp_path: Path
) -> None:
    """TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and the API key's file override the profile's."""
    key_file = tmp_path / "key"
    key_file.write_text("file-key\n", encoding="utf-8")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(profile_file))
    monkeypatch.setenv("TEMPORAL_PROFILE", "prod")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "other:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "other-ns")
    monkeypatch.setenv("TEMPORAL_API_KEY_FILE", str(key_file))
    options = connect_options(load_settings())
    assert (options["target_host"], options["namespace"]) == ("other:7233", "other-ns")
    assert options["api_key"] == "file-key"


def test_the_default_profile_of_the_cli_file_applies(
    monkeypatch: pytest.MonkeyPatch, profile_file: Path, tmp_path: Path
) -> None:
    """The Temporal CLI's own file (~/.config/temporalio/temporal.toml) is read, its default
    profile used, as the CLI does; code that names an address still wins."""
    cli_file = tmp_path / "home" / ".config" / "temporalio" / "temporal.toml"
    cli_file.parent.mkdir(parents=True)
    cli_file.write_text(profile_file.read_text(encoding="utf-8"), encoding="utf-8")
    assert load_settings().temporal_address == "default-host:7233"
    assert Settings(temporal_address="code:7233").temporal_address == "code:7233"


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"TEMPORAL_CONFIG_FILE": "/nowhere/temporal.toml"}, "TEMPORAL_CONFIG_FILE"),
        ({"TEMPORAL_PROFILE": "missing"}, "Profile 'missing' not found"),
        ({"TEMPORAL_TLS_CLIENT_CERT_PATH": "/nowhere/c.pem"}, "TEMPORAL_TLS_CLIENT_CERT_PATH"),
        ({"TEMPORAL_TLS_CLIENT_CERT_DATA": "PEM"}, "TEMPORAL_TLS_CLIENT_KEY_PATH"),
        ({"TEMPORAL_TLS_CLIENT_KEY_DATA": "PEM"}, "TEMPORAL_TLS_CLIENT_CERT_PATH"),
        ({"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/nowhere/ca"}, "TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
        ({"TEMPORAL_API_KEY": "a", "TEMPORAL_API_KEY_FILE": "/x"}, "TEMPORAL_API_KEY_FILE"),
    ],
)
def test_unusable_connection_settings_fail_at_start_with_one_line(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: str
) -> None:
    """A file that is not there, a profile the file lacks, half a client certificate: one
    ConfigError line that names what to fix, before any connection is tried."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert named in str(info.value)
    assert "\n" not in str(info.value)


def test_versioning_needs_a_build_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """WORKER_VERSIONING=true without WORKER_BUILD_ID is refused at start."""
    monkeypatch.setenv("WORKER_VERSIONING", "true")
    with pytest.raises(ConfigError, match="WORKER_BUILD_ID"):
        load_settings()


# What the SDK (Rust core) reported in tests/deploy against a real TLS frontend.
SDK_ERRORS = {
    "refused": "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
    'ConnectError(ConnectError("tcp connect error", 127.0.0.1:1, Os { code: 111, kind: '
    'ConnectionRefused, message: "Connection refused" })))',
    "dns": "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
    'ConnectError(ConnectError("dns error", Custom { kind: Uncategorized, error: "failed to '
    'lookup address information: Name or service not known" })))',
    "no key": "Failed client connect: `get_system_info` call error after connection: Status { "
    'code: Unauthenticated, message: "API key missing or invalid", metadata: MetadataMap { '
    'headers: {"content-type": "application/grpc"} }, source: None }',
    "closed": "Failed client connect: `get_system_info` call error after connection: Status { "
    'code: Cancelled, message: "operation was canceled", source: Some(tonic::transport::Error('
    'Transport, hyper::Error(Canceled, "connection closed"))) }',
    "closed early": "Failed client connect: `get_system_info` call error after connection: "
    'Status { code: Cancelled, message: "operation was canceled", source: Some(tonic::transport'
    '::Error(Transport, hyper::Error(Canceled, "connection was not ready"))) }',
    "mismatch": "Failed client connect: Server connection error: tonic::transport::Error("
    "Transport, InconsistentKeys(KeyMismatch))",
    "http": "Failed client connect: `get_system_info` call error after connection: Status { "
    'code: Unimplemented, message: "grpc-status header missing, mapped from HTTP status code '
    '404", metadata: MetadataMap { headers: {"server": "proxy"} }, source: None }',
}


@pytest.mark.parametrize(
    ("error", "says"),
    [
        ("refused", "nothing is listening there"),
        ("dns", "does not resolve; check TEMPORAL_ADDRESS"),
        ("no key", "refused the credentials (API key missing or invalid); set TEMPORAL_API_KEY"),
        ("closed", "refused the client certificate"),
        ("closed early", "refused the client certificate"),
        ("mismatch", "does not belong to the client certificate"),
        ("http", "something other than a Temporal frontend answered there"),
    ],
)
def test_sdk_connection_errors_become_one_actionable_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: str, says: str
) -> None:
    """Each raw SDK error (long, nested, Rust-flavoured) becomes one line with where, how and
    what to check."""
    cert = tmp_path / "c.pem"
    cert.write_text("CERT", encoding="utf-8")
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(cert))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(cert))
    settings = load_settings()
    line = str(unreachable(settings, failure_reason(settings, SDK_ERRORS[error])))
    assert says in line
    assert line.startswith("cannot connect to Temporal at localhost:7233 (namespace default, mTLS")
    assert "\n" not in line


def test_a_closed_connection_hints_by_what_was_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain text to a server that hangs up suggests TLS; TLS without a client certificate
    suggests mTLS."""
    assert "TEMPORAL_TLS=true" in failure_reason(load_settings(), SDK_ERRORS["closed"])
    monkeypatch.setenv("TEMPORAL_TLS", "true")
    reason = failure_reason(load_settings(), SDK_ERRORS["closed"])
    assert "may require a client certificate" in reason


def test_a_refusal_by_status_names_the_key() -> None:
    """An RPCError PERMISSION_DENIED at connect is a credentials refusal too."""
    err = RPCError("Request unauthorized.", RPCStatusCode.PERMISSION_DENIED, b"")
    reason = refusal_reason(load_settings(), err)
    assert "refused the credentials (Request unauthorized.)" in reason


async def test_connect_to_nothing_raises_temporal_unreachable() -> None:
    """A real connection attempt to a closed port raises the one typed error (an
    OrchestratorError, so the CLI and worker print it), with its one line."""
    settings = Settings(temporal_address=f"127.0.0.1:{free_port()}")
    with pytest.raises(TemporalUnreachable) as info:
        await connect(settings)
    assert isinstance(info.value, OrchestratorError)
    assert "nothing is listening there" in str(info.value)
