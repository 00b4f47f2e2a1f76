"""Where settings come from besides their own variables, for `aiorch_runtime.config`:
``<NAME>_FILE`` secrets files (Docker and Kubernetes secrets) and the Temporal envconfig
profile (a TOML file and the standard ``TEMPORAL_*`` variables)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiorch_runtime.errors import ConfigError
from aiorch_runtime.temporal_profile import load_temporal_profile, temporal_tls

SECRET_FILE_FIELDS = (
    "openai_api_key",
    "payload_keys",
    "codec_server_token",
    "reviewer_key",
    "requester_key",
    "inbox_signing_key",
    "review_webhook_url",
    "temporal_api_key",
    "capacity_store_url",
    "document_store_url",
    "ledger_url",
    "vector_store_api_key",
)
# Settings that may also be given as a file (<NAME>_FILE); only the secrets are masked.
FILE_BACKED_FIELDS = (*SECRET_FILE_FIELDS, "review_public_keys", "requester_public_keys")


def secrets_from_files(data: dict[str, Any]) -> dict[str, Any]:
    """<NAME>_FILE holds the value of <NAME> (Docker/Kubernetes secrets); never both."""
    for name in FILE_BACKED_FIELDS:
        path = data.get(f"{name}_file")
        if not path:
            data = {**data, f"{name}_file": None}  # set but empty = unset
            continue
        if data.get(name):
            raise ConfigError(f"set {name.upper()} or {name.upper()}_FILE, not both")
        data = {**data, name: read_secret_file(Path(path), f"{name.upper()}_FILE").strip()}
    return data


def temporal_from_profile(data: dict[str, Any]) -> dict[str, Any]:
    """Fill the Temporal connection fields from the envconfig profile.

    Address, namespace and API key given directly (a variable of that name, or a keyword in
    code) win over the profile; TLS and gRPC metadata come from the profile and its variables
    unless given in code as values.
    """
    config_file = data.get("temporal_config_file") or None
    profile = load_temporal_profile(
        data.get("temporal_profile") or None,
        Path(config_file) if config_file else None,
        environ=dict(os.environ),
    )
    resolved = dict(data)
    for field, value in (
        ("temporal_address", profile.address),
        ("temporal_namespace", profile.namespace),
        ("temporal_api_key", profile.api_key),
    ):
        if not resolved.get(field) and value:
            resolved[field] = value
    # A variable named like these fields (TEMPORAL_TLS is envconfig's on/off switch) arrives as
    # a string: envconfig has already read it, so the profile's result replaces it.
    if _from_environment(resolved, "temporal_tls"):
        has_key = bool(resolved.get("temporal_api_key"))
        resolved["temporal_tls"] = temporal_tls(profile.tls, api_key=has_key)
    if _from_environment(resolved, "temporal_grpc_meta"):
        resolved["temporal_grpc_meta"] = dict(profile.grpc_meta)
    return resolved


def _from_environment(data: Mapping[str, Any], field: str) -> bool:
    """True unless code passed this field a value (a model, a mapping or None)."""
    return field not in data or isinstance(data[field], str)


def split_list(value: str) -> list[str]:
    """A comma-separated variable as its non-empty, stripped items."""
    return [item.strip() for item in value.split(",") if item.strip()]


def read_secret_file(path: Path, variable: str) -> str:
    """The text of a secrets file; an unreadable one is a one-line ConfigError."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise ConfigError(f"{variable}={str(path)!r}: cannot read it ({reason})") from None
