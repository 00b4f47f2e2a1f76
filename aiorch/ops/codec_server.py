"""The codec server: Temporal's ``/encode`` and ``/decode`` endpoints, so an authorized operator
reads decrypted payloads in the Web UI and the ``temporal`` CLI, and nobody else does.

The protocol (Temporal's codec server contract): ``POST /encode`` or ``POST /decode`` with
``Content-Type: application/json`` and a body ``{"payloads": [{"metadata": {...}, "data":
"..."}]}`` in proto3 JSON (every metadata value and the data base64); the answer has the same
shape. The caller must name its namespace in ``X-Namespace`` (the Web UI and the ``temporal``
CLI do); this server serves only the configured ``TEMPORAL_NAMESPACE``: no header is 400,
another namespace 403, and ``/decode`` also refuses (403) a payload encrypted for another
namespace. ``/encode`` encrypts for this namespace and no run, so workers refuse what it makes
as a run's input (see ``aiorch_runtime.codec``): it serves display and round trips, not sending.

Access:

- every request needs the token (``CODEC_SERVER_TOKEN``, at least 32 characters and random:
  ``python -c 'import secrets; print(secrets.token_urlsafe(32))'``), either as ``Authorization:
  Bearer TOKEN`` (the CLI: ``--codec-endpoint http://HOST:PORT --codec-auth "Bearer TOKEN"``) or
  as the first path segment, ``http://HOST:PORT/TOKEN/decode`` (the Web UI, which cannot add
  headers of its own: configure ``http://HOST:PORT/TOKEN`` as its codec endpoint). Anything
  else is 401; a weak token stops the server at start.
- CORS answers only the Web UI's origin (from ``TEMPORAL_UI_URL``), preflight included, so no
  other web page can use an operator's browser to decode.
- the access log names method, endpoint, status and payload count, never a path (it may hold
  the token) or a payload.

Run it with ``aiorch codec-server`` (``python starter.py codec-server``); it needs
``PAYLOAD_KEYS`` (what would it decode otherwise?) and a token.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Literal
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from aiorch_runtime.codec import (
    Binding,
    EncryptionCodec,
    PayloadDecryptionError,
    is_encrypted,
    keyring_from_settings,
    payload_binding,
)
from aiorch_runtime.config import ConfigError, Settings
from aiorch_runtime.signals import stop_event

log = logging.getLogger("ai-orchestrator.codec-server")

READY_LINE = "codec server listening on"
# The UI batches a page of events into one request; payloads are at most 2 MB each.
MAX_BODY_BYTES = 16 * 1024 * 1024
ALLOWED_HEADERS = "authorization, content-type, x-namespace"
NAMESPACE_HEADER = "X-Namespace"
# A token anyone could guess or brute-force would open every payload: refuse it at start.
MIN_TOKEN_CHARS = 32
MIN_TOKEN_DISTINCT_CHARS = 8
TOKEN_ADVICE = "generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
Operation = Literal["encode", "decode"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def ui_origin(ui_url: str | None) -> str | None:
    """``scheme://host[:port]`` of the Web UI, the one origin CORS admits."""
    if not ui_url:
        return None
    parts = urlsplit(ui_url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


class CodecService:
    """The endpoints, bound to one codec, token, namespace and UI origin."""

    def __init__(
        self, codec: EncryptionCodec, *, token: str, namespace: str, origin: str | None
    ) -> None:
        check_token(token)
        # Decodes any run's payloads (it is context-free); encodes for this namespace, no run.
        self._decoder = codec.bound(None)
        self._encoder = codec.bound(Binding(namespace=namespace))
        self._token = token.encode()
        self._namespace = namespace
        self._origin = origin

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._cors])
        for operation in ("encode", "decode"):
            handler = self._handler(operation)
            app.router.add_post(f"/{operation}", handler)
            app.router.add_post(f"/{{prefix}}/{operation}", handler)
            app.router.add_route(hdrs.METH_OPTIONS, f"/{operation}", self._preflight)
            app.router.add_route(hdrs.METH_OPTIONS, f"/{{prefix}}/{operation}", self._preflight)
        return app

    @web.middleware
    async def _cors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            response = exc
        if self._origin is not None and request.headers.get(hdrs.ORIGIN) == self._origin:
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = self._origin
            response.headers[hdrs.VARY] = "Origin"
        return response

    async def _preflight(self, request: web.Request) -> web.Response:
        origin = request.headers.get(hdrs.ORIGIN)
        if self._origin is None or origin != self._origin:
            log.info("OPTIONS %s -> 403 (origin not allowed)", _endpoint(request))
            return web.Response(status=403, text="origin not allowed\n")
        return web.Response(
            status=204,
            headers={
                hdrs.ACCESS_CONTROL_ALLOW_METHODS: "POST, OPTIONS",
                hdrs.ACCESS_CONTROL_ALLOW_HEADERS: ALLOWED_HEADERS,
                hdrs.ACCESS_CONTROL_MAX_AGE: "600",
            },
        )

    def _handler(self, operation: Operation) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            response, count = await self._apply(operation, request)
            shown = f" ({count} payloads)" if response.status == 200 else ""
            log.info("POST %s -> %s%s", operation, response.status, shown)
            return response

        return handle

    async def _apply(self, operation: Operation, request: web.Request) -> tuple[web.Response, int]:
        """The response, and how many payloads it converted."""
        if not self._authorized(request):
            return _error(
                "missing or wrong bearer token",
                401,
                {hdrs.WWW_AUTHENTICATE: 'Bearer realm="ai-orchestrator codec"'},
            )
        namespace = request.headers.get(NAMESPACE_HEADER)
        if not namespace:
            return _error(f"send {NAMESPACE_HEADER}: the namespace the payloads belong to", 400)
        if namespace != self._namespace:
            return _error(f"this codec server serves namespace {self._namespace!r} only", 403)
        if request.content_type != "application/json":
            return _error("send Content-Type: application/json", 415)
        try:
            payloads = json_format.Parse(await request.read(), Payloads())
        except (json_format.ParseError, ValueError) as err:  # ValueError: not UTF-8
            return _error(f"not a payloads body: {err}", 400)
        if operation == "encode":
            converted = await self._encoder.encode(payloads.payloads)
        else:
            foreign = self._foreign_payloads(payloads)
            if foreign:
                return _error(f"payloads {foreign} are encrypted for another namespace", 403)
            try:
                # Strict: the operator is told why a payload does not open, not handed a marker.
                converted = [self._decoder.decrypt(payload) for payload in payloads.payloads]
            except PayloadDecryptionError as err:
                return _error(str(err), 422)
        body = json_format.MessageToJson(Payloads(payloads=converted))
        return web.Response(text=body, content_type="application/json"), len(converted)

    def _foreign_payloads(self, payloads: Payloads) -> list[int]:
        """Indexes of encrypted payloads that name another namespace than this server's (one
        encrypted without any context names none, and is served)."""
        foreign = []
        for index, payload in enumerate(payloads.payloads):
            if not is_encrypted(payload):
                continue
            try:
                bound = payload_binding(payload).namespace
            except ValueError:  # not UTF-8: decrypt refuses it with 422
                continue
            if bound not in ("", self._namespace):
                foreign.append(index)
        return foreign

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get(hdrs.AUTHORIZATION, "")
        scheme, _, credential = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            credential.strip().encode(), self._token
        ):
            return True
        prefix = request.match_info.get("prefix")
        return prefix is not None and hmac.compare_digest(prefix.encode(), self._token)


def check_token(token: str) -> None:
    """Refuse a token that is missing or weak (short, or few distinct characters).

    Raises:
        ConfigError: one line; never shows the token.
    """
    if not token:
        raise ConfigError("the codec server needs CODEC_SERVER_TOKEN (or its _FILE)")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"CODEC_SERVER_TOKEN is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            f"random ones ({TOKEN_ADVICE})"
        )
    if len(set(token)) < MIN_TOKEN_DISTINCT_CHARS:
        raise ConfigError(
            f"CODEC_SERVER_TOKEN has only {len(set(token))} distinct characters; it does not "
            f"look random ({TOKEN_ADVICE})"
        )


def _error(
    message: str, status: int, headers: dict[str, str] | None = None
) -> tuple[web.Response, int]:
    return web.json_response({"error": message}, status=status, headers=headers), 0


def _endpoint(request: web.Request) -> str:
    # The last path segment only: a prefix segment may be the token.
    return request.path.rsplit("/", 1)[-1]


def service_from_settings(settings: Settings) -> CodecService:
    """The service for this deployment's keys, token, namespace and Web UI.

    Raises:
        ConfigError: no keys or no token configured, or the keys are unusable.
    """
    keyring = keyring_from_settings(settings)
    if keyring is None:
        raise ConfigError(
            "the codec server needs PAYLOAD_KEYS (or PAYLOAD_KEYS_FILE): without keys payloads "
            "are not encrypted and there is nothing to decode"
        )
    token = settings.codec_server_token.get_secret_value() if settings.codec_server_token else ""
    return CodecService(
        EncryptionCodec(keyring),
        token=token,
        namespace=settings.temporal_namespace,
        origin=ui_origin(settings.temporal_ui_url),
    )


async def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Serve until SIGTERM or SIGINT, printing the ready line once listening."""
    service = service_from_settings(settings)
    runner = web.AppRunner(service.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    stop = stop_event()
    try:
        bind_host = host or settings.codec_server_host
        bind_port = settings.codec_server_port if port is None else port
        await web.TCPSite(runner, bind_host, bind_port).start()
        actual = runner.addresses[0][1]
        print(
            f"{READY_LINE} http://{bind_host}:{actual} (namespace {settings.temporal_namespace}, "
            f"CORS origin {ui_origin(settings.temporal_ui_url) or 'none'})",
            flush=True,
        )
        await stop.wait()
    finally:
        await runner.cleanup()
