"""One way to reach Temporal for every process: the worker, the starter and operator commands,
the bench and the demo all call `connect`.

Where and how to connect comes from the settings (``aiorch_runtime.config``, which reads the
``temporalio.envconfig`` profile and the ``TEMPORAL_*`` variables): address, namespace, API key,
TLS with or without a client certificate, gRPC metadata. What the SDK needs from the project
(converter, sandbox, failure types, tracing) comes with the client as `AiOrchestratorPlugin`,
so workers built on the client get it too. A connection that fails for any reason (nothing
listening, TLS refused either way, credentials refused) raises `TemporalUnreachable` with one
line that says which and what to set.

The worker also registers the search attributes it needs (`ensure_search_attributes`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from aiorch_runtime.config import Settings
from aiorch_runtime.errors import TemporalUnreachable
from aiorch_runtime.plugin import AiOrchestratorPlugin
from workflows import contract

log = logging.getLogger(__name__)

SEARCH_ATTRIBUTES = {
    contract.SEARCH_ATTRIBUTE_STATE: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    contract.SEARCH_ATTRIBUTE_STATE_SINCE: IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
    contract.SEARCH_ATTRIBUTE_REVIEW_ROUND: IndexedValueType.INDEXED_VALUE_TYPE_INT,
    contract.SEARCH_ATTRIBUTE_PIPELINE_VERSION: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}

# What the SDK's connection errors (Rust tonic/rustls text) mean, first match wins; each says
# what to check. The raw text is long, nested and differs by cause, so it is only a fallback.
_CAUSES: tuple[tuple[str, str], ...] = (
    (
        r"InconsistentKeys|KeyMismatch",
        "the TLS client key does not belong to the client certificate "
        "(TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_CLIENT_CERT_PATH)",
    ),
    (
        r"PrivateKeyParseError|no private key|private key",
        "the TLS client key is not a PEM private key (TEMPORAL_TLS_CLIENT_KEY_PATH)",
    ),
    (
        r"UnknownIssuer|BadSignature|certificate verify failed",
        "TLS: the server's certificate is not signed by a trusted CA; set "
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA that signed it",
    ),
    (
        r"NotValidForName|not valid for name",
        "TLS: the server's certificate is not valid for this name; set "
        "TEMPORAL_TLS_SERVER_NAME to a name the certificate holds",
    ),
    (
        r"CertificateRequired|certificate required",
        "TLS: the server requires a client certificate; set TEMPORAL_TLS_CLIENT_CERT_PATH and "
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
    ),
    (
        r"(?i)alert.*(BadCertificate|UnknownCA|DecryptError|AccessDenied|CertificateUnknown)",
        "TLS: the server refused the client certificate (not signed by a CA it trusts, or "
        "revoked); check TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH",
    ),
    (
        r"InvalidContentType|CorruptMessage|wrong version number|frame with invalid",
        "the server and this client disagree on TLS (TLS to a plain-text port, or plain text "
        "to a TLS port); set TEMPORAL_TLS=true or false to match the server",
    ),
    (
        r"grpc-status header missing|mapped from HTTP status code",
        "something other than a Temporal frontend answered there (an HTTP server or proxy); "
        "check TEMPORAL_ADDRESS and its port (the frontend's gRPC port, 7233 by default, not "
        "the Web UI's)",
    ),
    (
        r"dns error|failed to lookup|Name or service not known",
        "the host name does not resolve; check TEMPORAL_ADDRESS",
    ),
    (
        r"Connection refused|ConnectionRefused",
        "nothing is listening there; is the server running? (locally: `make dev`)",
    ),
    (r"(?i)timed? ?out|deadline", "the server did not answer in time"),
)
# The server hung up during or right after the TLS handshake: under TLS 1.3 a client learns
# that its certificate was refused only this way, so the hint depends on what it sent. When the
# hang-up comes before the first call is sent, hyper says the connection "was not ready".
_CLOSED = (
    r"connection closed|connection was not ready|peer closed connection|UnexpectedEof|"
    r"Connection reset|broken pipe"
)
# A server that refused the first call's credentials, as the SDK words it at connect.
_REFUSED = re.compile(r'code: (Unauthenticated|PermissionDenied), message: "([^"]*)"')
_REFUSED_CREDENTIALS = {RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED}


def connect_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``Client.connect`` that say where and how to connect."""
    options: dict[str, Any] = {
        "target_host": settings.temporal_address,
        "namespace": settings.temporal_namespace,
        "tls": settings.temporal_tls.to_tls_config() if settings.temporal_tls else False,
    }
    if settings.temporal_api_key is not None:
        options["api_key"] = settings.temporal_api_key.get_secret_value()
    if settings.temporal_grpc_meta:
        options["rpc_metadata"] = dict(settings.temporal_grpc_meta)
    return options


def describe_target(settings: Settings) -> str:
    """Where and how this process connects, for logs and error lines (never a secret)."""
    tls = settings.temporal_tls
    transport = "plain text" if tls is None else "mTLS" if tls.mutual else "TLS"
    key = ", API key" if settings.temporal_api_key is not None else ""
    namespace = settings.temporal_namespace
    return f"{settings.temporal_address} (namespace {namespace}, {transport}{key})"


async def connect(
    settings: Settings,
    *,
    runtime: Runtime | None = None,
    plugin: AiOrchestratorPlugin | None = None,
) -> Client:
    """A client for the configured server and namespace, with the project's plugin.

    Args:
        settings: where and how to connect, and what the plugin wires (payload keys, tracing).
        runtime: the worker's metrics runtime (`aiorch_runtime.telemetry.worker_runtime`);
            None means the SDK's default.
        plugin: a plugin to use instead of ``AiOrchestratorPlugin(settings)``.

    Raises:
        TemporalUnreachable: no connection (one line: where, why, what to set).
    """
    try:
        return await Client.connect(
            **connect_options(settings),
            plugins=[plugin or AiOrchestratorPlugin(settings)],
            runtime=runtime,
        )
    except RPCError as err:
        raise unreachable(settings, refusal_reason(settings, err)) from None
    except RuntimeError as err:  # the SDK reports transport and TLS failures as RuntimeError
        raise unreachable(settings, failure_reason(settings, str(err))) from None


def unreachable(settings: Settings, reason: str) -> TemporalUnreachable:
    """The error for this deployment's target (address, namespace, transport) and ``reason``."""
    return TemporalUnreachable(describe_target(settings), reason)


def failure_reason(settings: Settings, raw: str) -> str:
    """Why a connection failed, below gRPC (TCP, DNS, TLS) or at its first call, in words."""
    if refused := _REFUSED.search(raw):
        return _refused_reason(settings, refused.group(2))
    for pattern, meaning in _CAUSES:
        if re.search(pattern, raw):
            return meaning
    if re.search(_CLOSED, raw):
        return _closed_reason(settings)
    return _one_line(raw.removeprefix("Failed client connect: "))


def refusal_reason(settings: Settings, err: RPCError) -> str:
    """Why a server that answered the connection's first call with an error refused it."""
    if err.status in _REFUSED_CREDENTIALS:
        return _refused_reason(settings, err.message)
    return f"{err.status.name} ({_one_line(err.message)})"


def _refused_reason(settings: Settings, message: str) -> str:
    fix = (
        "check TEMPORAL_API_KEY (or the profile's api_key)"
        if settings.temporal_api_key is not None
        else "set TEMPORAL_API_KEY (or the profile's api_key)"
    )
    return f"the server refused the credentials ({_one_line(message)}); {fix}"


def _closed_reason(settings: Settings) -> str:
    tls = settings.temporal_tls
    if tls is None:
        return (
            "the server closed the connection; it may require TLS: set TEMPORAL_TLS=true (and "
            "a client certificate or an API key)"
        )
    if tls.mutual:
        return (
            "the server closed the connection during TLS setup: it refused the client "
            "certificate (TEMPORAL_TLS_CLIENT_CERT_PATH is not signed by a CA it trusts), or "
            "it does not speak TLS on this port"
        )
    return (
        "the server closed the connection during TLS setup: it may require a client "
        "certificate (set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH), "
        "or it does not speak TLS on this port"
    )


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


async def ensure_search_attributes(client: Client) -> list[str]:
    """Register the project's search attributes where missing; returns the names added.

    Servers that refuse (Temporal Cloud without the permission, for example) are logged, not
    fatal: the operator can register them by hand, and the log says how.
    """
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError as err:
        # Temporal Cloud keys often may not use the operator service at all.
        _log_unregistered(SEARCH_ATTRIBUTES, err)
        return []
    missing = {
        name: kind
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name not in existing.custom_attributes
    }
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    except RPCError as err:
        _log_unregistered(missing, err)
        return []
    return sorted(missing)


def _log_unregistered(names: dict[str, IndexedValueType.ValueType], err: RPCError) -> None:
    commands = "; ".join(
        f"temporal operator search-attribute create --name {name} --type "
        f"{_TYPE_NAMES.get(kind, 'Keyword')}"
        for name, kind in names.items()
    )
    log.warning(
        "could not check or register search attributes %s (%s); register them by hand: %s "
        "(Temporal Cloud: tcld namespace search-attributes add)",
        ", ".join(names),
        err.message,
        commands,
    )


_TYPE_NAMES = {
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
    IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: "Datetime",
    IndexedValueType.INDEXED_VALUE_TYPE_INT: "Int",
}
