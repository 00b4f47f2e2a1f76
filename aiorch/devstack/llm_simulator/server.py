"""The simulator's HTTP server: its state (request log, counters, global faults), its routes,
and serving it in this event loop or until a stop signal."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from aiorch.devstack.llm_simulator.batches import BatchApi
from aiorch.devstack.llm_simulator.embeddings import embedding_inputs, embedding_result
from aiorch.devstack.llm_simulator.faults import (
    EndpointPath,
    FaultSpec,
    GlobalFault,
    InvalidRequestError,
    error_response,
    fault_response,
    parse_directives,
)
from aiorch.devstack.llm_simulator.planning import CallPlanner
from aiorch.devstack.llm_simulator.prompt_cache import PromptCache
from aiorch.devstack.llm_simulator.ratelimit import RateLimits, RateLimitSpec
from aiorch.devstack.llm_simulator.replies import (
    completion,
    message_text,
    user_texts,
)
from aiorch_runtime.signals import stop_event

DEFAULT_MODELS = ("sim-large", "sim-small", "sim-embed")
MAX_REQUEST_BYTES = 64 * 1024 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_LOG_LIMIT = 100_000  # bounds memory of a long-running demo server; far above any benchmark
# aiohttp waits this twice on shutdown; a hanging request must not hold SIGTERM for 2 x 60 s.
_SHUTDOWN_GRACE_S = 0.5
_LISTEN_BACKLOG = 4096  # a benchmark connects ~1000 clients at once; aiohttp's 128 resets them


class Simulator:
    """The simulator's state (request log, counters, global faults, prompt cache, files and
    batches) and its handlers."""

    def __init__(
        self, embedding_dim: int = 64, *, rpm: int | None = None, tpm: int | None = None
    ) -> None:
        self._embedding_dim = embedding_dim
        self._limits = RateLimits()
        if rpm or tpm:
            self._limits.configure(RateLimitSpec(rpm=rpm, tpm=tpm))
        self._log: deque[dict[str, Any]] = deque(maxlen=_LOG_LIMIT)
        self._seq = 0
        self._planner = CallPlanner()
        self._models: set[str] = set(DEFAULT_MODELS)
        self._prompt_cache = PromptCache()
        self._batches = BatchApi(self._answer_line)

    def routes(self) -> list[web.RouteDef]:
        """The HTTP routes this simulator serves: each path with its handler per method."""
        resources: dict[str, dict[str, Handler]] = {
            "/v1/chat/completions": {"POST": self.chat},
            "/v1/embeddings": {"POST": self.embeddings},
            "/v1/models": {"GET": self.models},
            "/healthz": {"GET": self.healthz},
            "/_sim/requests": {"GET": self.list_requests, "DELETE": self.clear_requests},
            "/_sim/faults": {
                "GET": self.list_faults,
                "POST": self.add_fault,
                "DELETE": self.clear_faults,
            },
            "/_sim/ratelimits": {
                "GET": self.list_ratelimits,
                "PUT": self.set_ratelimit,
                "DELETE": self.clear_ratelimits,
            },
            **self._batches.routes(),
        }
        return [
            web.route(method, path, handler)
            for path, handlers in resources.items()
            for method, handler in handlers.items()
        ]

    async def chat(self, request: web.Request) -> web.Response:
        """``POST /v1/chat/completions``."""
        return await self._handle(request, "chat")

    async def embeddings(self, request: web.Request) -> web.Response:
        """``POST /v1/embeddings``."""
        return await self._handle(request, "embeddings")

    async def _handle(self, request: web.Request, path: EndpointPath) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        run_id = request.headers.get("X-Run-Id")
        entry = self._record(
            path,
            body if isinstance(body, dict) else {},
            run_id=run_id,
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        return await self._answer(run_id, path, body, entry, limited=True)

    async def _answer(
        self,
        run_id: str | None,
        path: EndpointPath,
        body: object,
        entry: dict[str, Any],
        *,
        limited: bool,
    ) -> web.Response:
        try:
            response = await self._respond(run_id, path, body, entry, limited=limited)
        except InvalidRequestError as exc:
            entry["fault"] = exc.fault
            response = error_response(400, str(exc), "invalid_request_error", exc.fault)
        entry["status"] = response.status
        return response

    async def _answer_line(
        self, body: dict[str, Any], custom_id: str, batch_id: str
    ) -> tuple[int, dict[str, Any]]:
        """A batch's request line, answered as a chat call (logged with its batch and
        ``custom_id``; batches are not held to the synchronous rate limits)."""
        entry = self._record("chat", body, batch_id=batch_id, custom_id=custom_id)
        response = await self._answer(None, "chat", body, entry, limited=False)
        assert isinstance(response.body, bytes)
        return response.status, json.loads(response.body)

    def _record(
        self,
        path: EndpointPath,
        body: dict[str, Any],
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        batch_id: str | None = None,
        custom_id: str | None = None,
    ) -> dict[str, Any]:
        self._seq += 1
        entry = {
            "seq": self._seq,
            "at": time.time(),
            "path": path,
            "model": body.get("model"),
            "run_id": run_id,
            "idempotency_key": idempotency_key,
            "messages": body.get("messages" if path == "chat" else "input"),
            "status": None,
            "fault": None,
            "temperature": body.get("temperature"),
            "response_format": body.get("response_format"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "batch_id": batch_id,
            "custom_id": custom_id,
            "usage": None,
        }
        self._log.append(entry)
        return entry

    async def _respond(
        self,
        run_id: str | None,
        path: EndpointPath,
        body: object,
        entry: dict[str, Any],
        *,
        limited: bool,
    ) -> web.Response:
        if not isinstance(body, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequestError("'model' must be a non-empty string")
        texts = _chat_texts(body) if path == "chat" else embedding_inputs(body)
        directives = parse_directives(texts)
        self._models.add(model)
        first = (user_texts(body["messages"]) or texts) if path == "chat" else texts
        run_key = run_id or hashlib.sha256(first[0].encode()).hexdigest()
        plan = await self._planner.plan(run_key, path, model, directives, entry)
        if plan.error is not None and plan.error.status is not None:
            return fault_response(plan.error, plan.error.status)
        if path == "chat":
            cached = self._prompt_cache.cached(model, texts)
            answer = completion(entry["seq"], model, body["messages"], texts, plan, cached)
            return self._limited(model, answer, entry, limited=limited)
        result = embedding_result(model, body, texts, self._embedding_dim)
        return self._limited(model, result, entry, limited=limited)

    def _limited(
        self, model: str, answer: dict[str, Any], entry: dict[str, Any], *, limited: bool
    ) -> web.Response:
        """The answer, if the model's rate limits admit its tokens (with the limit headers);
        else a 429 with Retry-After. ``limited`` False: the answer (a batch's line)."""
        if not limited:
            entry["usage"] = answer["usage"]
            return web.json_response(answer)
        verdict = self._limits.admit(model, int(answer["usage"]["total_tokens"]))
        if verdict is None:
            entry["usage"] = answer["usage"]
            return web.json_response(answer)
        if not verdict.admitted:
            entry["fault"] = "rate_limit"
            wait_ms = max(1, math.ceil(verdict.retry_after_s * 1000))
            headers = {
                **verdict.headers,
                "Retry-After": str(math.ceil(wait_ms / 1000)),
                "retry-after-ms": str(wait_ms),
            }
            message = f"Rate limit reached for {model}; try again in {wait_ms}ms"
            return error_response(429, message, "rate_limit_error", "rate_limit_exceeded", headers)
        entry["usage"] = answer["usage"]
        return web.json_response(answer, headers=verdict.headers)

    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``: the default models plus every model requested so far."""
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "llm-simulator"}
            for name in sorted(self._models)
        ]
        return web.json_response({"object": "list", "data": data})

    async def healthz(self, request: web.Request) -> web.Response:
        """``GET /healthz``."""
        return web.json_response({"ok": True})

    async def list_requests(self, request: web.Request) -> web.Response:
        """``GET /_sim/requests``: the request log, oldest first."""
        return web.json_response(list(self._log))

    async def clear_requests(self, request: web.Request) -> web.Response:
        """``DELETE /_sim/requests``: clear the log, every fault counter and the prompt
        cache."""
        self._log.clear()
        self._planner.reset()
        self._prompt_cache.clear()
        return web.json_response({"ok": True})

    async def list_faults(self, request: web.Request) -> web.Response:
        """``GET /_sim/faults``: the global faults with their hit counts."""
        faults = [{**fault.spec.model_dump(), "hits": fault.hits} for fault in self._planner.faults]
        return web.json_response(faults)

    async def add_fault(self, request: web.Request) -> web.Response:
        """``POST /_sim/faults``: add a global fault (see FaultSpec)."""
        try:
            spec = FaultSpec.model_validate_json(await request.read())
        except ValidationError as exc:
            return error_response(400, str(exc), "invalid_request_error", None)
        self._planner.faults.append(GlobalFault(spec))
        return await self.list_faults(request)

    async def clear_faults(self, request: web.Request) -> web.Response:
        """``DELETE /_sim/faults``: remove every global fault."""
        self._planner.faults.clear()
        return web.json_response({"ok": True})

    async def list_ratelimits(self, request: web.Request) -> web.Response:
        """``GET /_sim/ratelimits``: the limits, and each model's buckets and counters."""
        return web.json_response(self._limits.state())

    async def set_ratelimit(self, request: web.Request) -> web.Response:
        """``PUT /_sim/ratelimits``: set a model's (or the default) limits (RateLimitSpec)."""
        try:
            spec = RateLimitSpec.model_validate_json(await request.read())
        except ValidationError as exc:
            return error_response(400, str(exc), "invalid_request_error", None)
        self._limits.configure(spec)
        return await self.list_ratelimits(request)

    async def clear_ratelimits(self, request: web.Request) -> web.Response:
        """``DELETE /_sim/ratelimits``: remove every limit."""
        self._limits.clear()
        return web.json_response({"ok": True})


def _chat_texts(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("'messages' must be a non-empty list")
    return [message_text(message) for message in messages]


def build_app(
    embedding_dim: int = 64, *, rpm: int | None = None, tpm: int | None = None
) -> web.Application:
    """Build the simulator's aiohttp application with fresh state (``rpm``/``tpm``: every
    model's shared rate limits, see ``ratelimit``)."""
    # Large prompts (documents given by reference, loaded by invoke_llm) must reach it whole.
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.add_routes(Simulator(embedding_dim, rpm=rpm, tpm=tpm).routes())
    return app


@asynccontextmanager
async def running_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    embedding_dim: int = 64,
    *,
    rpm: int | None = None,
    tpm: int | None = None,
) -> AsyncIterator[str]:
    """Serve a fresh simulator in this event loop; yield its root URL (``http://HOST:PORT``).

    ``port=0`` picks a free port. The OpenAI base URL is the yielded URL plus ``/v1``.
    """
    runner = web.AppRunner(
        build_app(embedding_dim, rpm=rpm, tpm=tpm),
        access_log=None,
        handler_cancellation=True,  # a client that gives up on a hang frees the handler
        shutdown_timeout=_SHUTDOWN_GRACE_S,
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, backlog=_LISTEN_BACKLOG).start()
        yield f"http://{host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def serve(
    host: str, port: int, embedding_dim: int, *, rpm: int | None = None, tpm: int | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, printing the ready line once listening."""
    stop = stop_event()
    async with running_simulator(host, port, embedding_dim, rpm=rpm, tpm=tpm) as url:
        print(f"llm-simulator listening on {url}", flush=True)
        await stop.wait()
