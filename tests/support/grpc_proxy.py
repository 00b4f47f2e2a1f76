"""A gRPC-aware front for the dev server, standing in for a secured Temporal frontend, or for
a flaky network in front of it.

`mtls_proxy` terminates TLS (ALPN h2, as gRPC needs) and demands a client certificate signed by
its CA (mutual TLS), checks the API key (``authorization: Bearer KEY``) on every call, records
who made each call (the client certificate's common name) and forwards the call, bytes as they
are, to the plain-text dev server. A call without the key is refused with UNAUTHENTICATED, as
Temporal Cloud refuses it. `plain_proxy` forwards in plain text, failing the calls its `Faults`
name with the status given (UNAVAILABLE, DEADLINE_EXCEEDED), instead of forwarding them or
after (the answer lost), as a restarting server or a slow network fails them. Every Temporal
RPC the worker and the starter make is unary (long polls included), so one generic unary
handler forwards them all; errors come back with their status, message and details
(``grpc-status-details-bin``), so typed SDK errors still work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

# Metadata the proxy must not copy onto the upstream call (gRPC sets these itself).
_HOP_HEADERS = frozenset({"authorization", "user-agent", "content-type", "te"})


@dataclass(frozen=True)
class Call:
    """One call the proxy saw."""

    method: str
    client: str  # the client certificate's common name
    authorized: bool


@dataclass
class CallLog:
    """Every call the proxy saw, thread-safe."""

    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)


@dataclass(frozen=True)
class Fault:
    """A status to answer one call with; ``answer_lost``: after forwarding it (the server acted
    on the call, its answer never reached the caller), else instead."""

    status: grpc.StatusCode
    answer_lost: bool = False


@dataclass
class Faults:
    """What to answer the next calls of a method (its short name, ``QueryWorkflow``) with, one
    `Fault` a call, in order; thread-safe."""

    pending: dict[str, list[Fault]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, *faults: Fault) -> None:
        with self._lock:
            self.pending.setdefault(method, []).extend(faults)

    def take(self, method: str) -> Fault | None:
        with self._lock:
            queued = self.pending.get(method.rsplit("/", 1)[-1])
            return queued.pop(0) if queued else None


def _identity(data: bytes) -> bytes:
    return data


# grpcio ships no type information, so its classes are Any to mypy.
class _Forward(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(
        self, upstream: grpc.Channel, api_key: str | None, log: CallLog, faults: Faults
    ) -> None:
        self._upstream = upstream
        self._expected = None if api_key is None else f"Bearer {api_key}"
        self._log = log
        self._faults = faults

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = handler_call_details.method
        forward = self._upstream.unary_unary(
            method, request_serializer=_identity, response_deserializer=_identity
        )

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            metadata = list(context.invocation_metadata())
            authorized = self._expected in (None, dict(metadata).get("authorization"))
            names = context.auth_context().get("x509_common_name") or [b"?"]
            self._log.add(Call(method, names[0].decode(), authorized))
            if not authorized:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "API key missing or invalid")
            fault = self._faults.take(method)
            if fault is not None and not fault.answer_lost:
                context.abort(fault.status, f"{fault.status.name} from the test's front")
            passed = [(k, v) for k, v in metadata if k not in _HOP_HEADERS]
            try:
                response: bytes = forward(
                    request, metadata=passed, timeout=context.time_remaining()
                )
            except grpc.RpcError as err:
                call: Any = err  # an upstream failure is also a grpc.Call
                trailing = [
                    (k, v)
                    for k, v in call.trailing_metadata() or ()
                    if not k.startswith("grpc-") or k == "grpc-status-details-bin"
                ]
                context.set_trailing_metadata(trailing)
                context.abort(call.code(), call.details() or "")
            if fault is not None:
                context.abort(fault.status, f"{fault.status.name} from the test's front")
            return response

        return grpc.unary_unary_rpc_method_handler(handle)


@dataclass(frozen=True)
class Proxy:
    """A running proxy: where it listens and what it saw."""

    address: str
    log: CallLog
    faults: Faults = field(default_factory=Faults)


@contextmanager
def mtls_proxy(
    *,
    upstream: str,
    ca_cert: bytes,
    server_cert: bytes,
    server_key: bytes,
    api_key: str,
) -> Iterator[Proxy]:
    """Serve the proxy on a free port of 127.0.0.1 until the block ends."""
    log = CallLog()
    channel = grpc.insecure_channel(upstream)
    # Long polls hold a thread each for up to a minute: room for a few workers and clients.
    server = grpc.server(
        ThreadPoolExecutor(max_workers=128), handlers=[_Forward(channel, api_key, log, Faults())]
    )
    credentials = grpc.ssl_server_credentials(
        [(server_key, server_cert)], root_certificates=ca_cert, require_client_auth=True
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield Proxy(f"127.0.0.1:{port}", log)
    finally:
        server.stop(grace=None).wait(10)
        channel.close()


@contextmanager
def plain_proxy(*, upstream: str) -> Iterator[Proxy]:
    """Forward in plain text from a free port of 127.0.0.1 until the block ends, answering the
    calls its ``faults`` name with their status instead."""
    log, faults = CallLog(), Faults()
    channel = grpc.insecure_channel(upstream)
    server = grpc.server(
        ThreadPoolExecutor(max_workers=128), handlers=[_Forward(channel, None, log, faults)]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Proxy(f"127.0.0.1:{port}", log, faults)
    finally:
        server.stop(grace=None).wait(10)
        channel.close()


def methods(calls: Sequence[Call], where: Callable[[Call], bool] = lambda _: True) -> set[str]:
    """The short method names (``PollWorkflowTaskQueue``) of the calls that match."""
    return {call.method.rsplit("/", 1)[-1] for call in calls if where(call)}
