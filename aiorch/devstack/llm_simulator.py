"""A local OpenAI-compatible LLM server with deterministic fault injection.

The worker talks to it with the real ``openai`` client where no model API is reachable (local
stack, tests, benchmarks). It serves ``POST /v1/chat/completions``, ``POST /v1/embeddings``,
``GET /v1/models`` and ``GET /healthz``. Run it with
``python -m aiorch.devstack.llm_simulator --host 127.0.0.1 --port 8700 [--embedding-dim 64]``.

A chat reply is the JSON text ``{"content": "...", "needs_review": false}`` built from the last
user message; ``Reviewer feedback: ...`` lines in any message are echoed into the content, so a
re-edit visibly changes the answer. Embeddings are unit vectors hashed from the input text.

Directives, written anywhere in a chat message or embedding input and stripped from echoed
content: ``[sim:NAME]``, ``[sim:NAME=VALUE]``, ``[sim:NAME=VALUE:key=value:...]``.

- ``review``: the reply has ``needs_review: true``.
- ``status=CODE``: answer HTTP CODE (400-599) with an OpenAI error body; options
  ``retry_after=S`` (``Retry-After`` header), ``retry_after_ms=MS`` (``retry-after-ms``) and
  ``code=CODE`` (e.g. ``insufficient_quota``; 429 defaults to ``rate_limit_exceeded``),
  ``delay_ms=MS`` (wait before answering).
- ``hang`` (until the client disconnects), ``hang=SECONDS``, ``delay_ms=MS``: wait first.
- ``malformed`` (not JSON), ``fenced`` (JSON in a Markdown fence), ``badjson`` (JSON of the
  wrong shape), ``truncated`` (``finish_reason: "length"``, JSON cut in half), ``refusal``
  (``message.refusal`` set, content null), ``content_filter`` (that finish_reason, no content).

Every directive takes ``times=N`` (only the first N matching calls; default all),
``model=NAME`` and ``path=chat|embeddings`` (default ``chat``; only ``status``, ``hang`` and
``delay_ms`` may target embeddings). An unknown name or option is answered with HTTP 400.

Counters are keyed by (run key, directive text); the run key is the ``X-Run-Id`` header, else
a hash of the first user message (first embedding input), so each run sees its own N faults.
Directives are evaluated in order; a call counts against a directive only when it is reached
and its filters match. An error status ends evaluation and the first shape that fires wins, so
``[sim:status=429:times=2][sim:malformed:times=1]`` gives 429, 429, malformed, then success.

Control endpoints: ``GET /_sim/requests`` lists every request (``seq``, ``at``, ``path``,
``model``, ``run_id``, ``idempotency_key``, ``messages``, ``status`` (null while unanswered),
``fault`` (fired directives joined by ``+``), ``temperature``, ``response_format``, ``usage``
(the usage block of the answer, null for errors));
``DELETE`` clears the log and every counter. ``POST /_sim/faults`` with a FaultSpec JSON adds
a global fault checked before any directive (``path``/``model``/``times`` null = any/any/
forever): an error ``status``, a ``delay_ms`` before answering, or both (a delay alone lets the
call go on to the directives, e.g. to slow every embeddings call, whose input carries no
directives); ``GET`` lists them with hit counts, ``DELETE`` removes them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import math
import re
import signal
import struct
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

EndpointPath = Literal["chat", "embeddings"]

# aiorch.runtime.config.DEFAULT_LLM_PORT; not imported so the simulator stands alone.
DEFAULT_PORT = 8700
DEFAULT_MODELS = ("sim-large", "sim-small", "sim-embed")
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
MAX_REQUEST_BYTES = 64 * 1024 * 1024
_LOG_LIMIT = 100_000  # bounds memory of a long-running demo server; far above any benchmark
# aiohttp waits this twice on shutdown; a hanging request must not hold SIGTERM for 2 x 60 s.
_SHUTDOWN_GRACE_S = 0.5
_LISTEN_BACKLOG = 4096  # a benchmark connects ~1000 clients at once; aiohttp's 128 resets them
_DIRECTIVE = re.compile(r"\[sim:([^\[\]]*)\]")
_FEEDBACK_PREFIX = "Reviewer feedback:"
_SHAPES = frozenset({"malformed", "fenced", "badjson", "truncated", "refusal", "content_filter"})
_FLAGS = _SHAPES | {"review"}
_KNOWN = sorted(_FLAGS | {"status", "hang", "delay_ms"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}
_DEFAULT_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


class FaultFilter(BaseModel):
    """Which calls a fault or directive applies to, and how many times."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    path: EndpointPath | None = None
    times: int | None = Field(default=None, ge=1)

    def matches(self, path: EndpointPath, model: str) -> bool:
        """Return whether a call to ``path`` for ``model`` passes the filters."""
        return self.path in (None, path) and self.model in (None, model)


class FaultSpec(FaultFilter):
    """An HTTP error answer, a delay or both: the body of ``POST /_sim/faults`` and of a
    ``status`` directive (which always has a status)."""

    status: int | None = Field(default=None, ge=400, le=599)
    retry_after: float | None = Field(default=None, ge=0)
    retry_after_ms: int | None = Field(default=None, ge=0)
    code: str | None = None
    delay_ms: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _has_an_effect(self) -> FaultSpec:
        if self.status is None and self.delay_ms is None:
            raise ValueError("a fault needs a status, a delay_ms or both")
        return self


class InvalidRequestError(Exception):
    """A request the simulator answers with HTTP 400."""

    def __init__(self, message: str, *, fault: str | None = None) -> None:
        super().__init__(message)
        self.fault = fault


@dataclass(frozen=True)
class Directive:
    """One parsed ``[sim:...]`` token; ``text`` is the counter key."""

    text: str
    name: str
    spec: FaultFilter
    sleep_s: float | None = None


@dataclass
class _GlobalFault:
    spec: FaultSpec
    hits: int = 0


@dataclass
class _Plan:
    """What the directives decided for one call."""

    fired: list[str] = field(default_factory=list)
    error: FaultSpec | None = None
    shape: str | None = None
    review: bool = False


def strip_directives(text: str) -> str:
    """Remove every ``[sim:...]`` token and collapse the whitespace left behind."""
    return " ".join(_DIRECTIVE.sub(" ", text).split())


def parse_directives(texts: Iterable[str]) -> list[Directive]:
    """Parse the directives in ``texts`` in order, once each; raise InvalidRequestError."""
    found = dict.fromkeys(m.group(1) for text in texts for m in _DIRECTIVE.finditer(text))
    return [_parse_directive(text) for text in found]


def _parse_directive(text: str) -> Directive:
    head, *options = text.split(":")
    name, has_value, value = head.partition("=")
    params: dict[str, str] = {"path": "chat"}
    for option in options:
        key, has_eq, option_value = option.partition("=")
        if not has_eq:
            raise _directive_error(text, f"expected key=value, got {option!r}")
        params[key] = option_value
    if name not in _KNOWN:
        raise _directive_error(text, f"unknown directive {name!r}; known: {', '.join(_KNOWN)}")
    if name in _FLAGS and has_value:
        raise _directive_error(text, f"{name!r} takes no value")
    try:
        if name == "status":
            return Directive(text, name, FaultSpec.model_validate({"status": value, **params}))
        spec = FaultFilter.model_validate(params)
        sleep_s = _sleep_seconds(name, value if has_value else None)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise _directive_error(text, details) from exc
    except ValueError as exc:
        raise _directive_error(text, str(exc)) from exc
    if name in _FLAGS and spec.path != "chat":
        raise _directive_error(text, f"{name!r} only applies to chat")
    return Directive(text, name, spec, sleep_s)


def _sleep_seconds(name: str, value: str | None) -> float | None:
    if name == "hang":
        seconds = math.inf if value is None else float(value)
    elif name == "delay_ms":
        if value is None:
            raise ValueError("delay_ms needs a value, e.g. [sim:delay_ms=200]")
        seconds = int(value) / 1000
    else:
        return None
    if not seconds >= 0:
        raise ValueError(f"{name} must be a non-negative number")
    return seconds


def _directive_error(text: str, reason: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"invalid directive [sim:{text}]: {reason}", fault="invalid_directive"
    )


def _error_response(
    status: int, message: str, kind: str, code: str | None, headers: dict[str, str] | None = None
) -> web.Response:
    error = {"message": message, "type": kind, "code": code, "param": None}
    return web.json_response({"error": error}, status=status, headers=headers)


def _fault_response(spec: FaultSpec, status: int) -> web.Response:
    code = spec.code or _DEFAULT_CODES.get(status)
    if code == "insufficient_quota":  # OpenAI reports a quota 429 with its own error type
        kind = code
    else:
        fallback = "server_error" if status >= 500 else "invalid_request_error"
        kind = _ERROR_TYPES.get(status, fallback)
    headers = {}
    if spec.retry_after is not None:
        headers["Retry-After"] = _format_seconds(spec.retry_after)
    if spec.retry_after_ms is not None:
        headers["retry-after-ms"] = str(spec.retry_after_ms)
    message = f"Simulated HTTP {status} ({code or kind})"
    return _error_response(status, message, kind, code, headers)


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if seconds.is_integer() else str(seconds)


def _message_text(message: object) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text parts carry directives
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _user_texts(messages: list[Any]) -> list[str]:
    return [_message_text(m) for m in messages if isinstance(m, dict) and m.get("role") == "user"]


def _is_feedback(line: str) -> bool:
    return line.strip().startswith(_FEEDBACK_PREFIX)


def _answer(model: str, messages: list[Any], review: bool) -> dict[str, Any]:
    """The deterministic reply the model is asked for: ``{content, needs_review}``."""
    feedback = [
        strip_directives(line.strip().removeprefix(_FEEDBACK_PREFIX))
        for text in map(_message_text, messages)
        for line in text.splitlines()
        if _is_feedback(line)
    ]
    user_texts = _user_texts(messages)
    last_user = user_texts[-1].splitlines() if user_texts else []
    question = strip_directives(" ".join(line for line in last_user if not _is_feedback(line)))
    content = f"Simulated answer ({model}): {question[:80]}"
    if feedback:
        content += f" (revised per feedback: {'; '.join(feedback)})"
    return {"content": content, "needs_review": review}


def _shape_reply(shape: str | None, answer: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """Return (content, finish_reason, refusal) for the chosen reply shape."""
    text = json.dumps(answer)
    match shape:
        case "malformed":
            return f"Sure! Here is your answer: {{content: {answer['content']}", "stop", None
        case "fenced":
            return f"```json\n{text}\n```", "stop", None
        case "badjson":
            return json.dumps({"answer": answer["content"]}), "stop", None
        case "truncated":
            return text[: len(text) // 2], "length", None
        case "refusal":
            return None, "stop", REFUSAL_TEXT
        case "content_filter":
            return None, "content_filter", None
    return text, "stop", None


def embed(text: str, dim: int) -> list[float]:
    """Return the deterministic unit vector for ``text`` (directives stripped)."""
    raw = hashlib.shake_256(strip_directives(text).encode()).digest(4 * dim)
    values = [n / 2**31 - 1.0 for n in struct.unpack(f"<{dim}I", raw)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _word_count(texts: Iterable[str]) -> int:
    return sum(len(text.split()) for text in texts)


def _completion(
    seq: int, model: str, messages: list[Any], texts: list[str], plan: _Plan
) -> dict[str, Any]:
    answer = _answer(model, messages, plan.review)
    content, finish_reason, refusal = _shape_reply(plan.shape, answer)
    message = {"role": "assistant", "content": content, "refusal": refusal}
    choice = {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
    prompt_tokens, completion_tokens = _word_count(texts), _word_count([content or ""])
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {
        "id": f"chatcmpl-sim-{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


class Simulator:
    """The simulator's state (request log, counters, global faults) and its handlers."""

    def __init__(self, embedding_dim: int = 64) -> None:
        self._embedding_dim = embedding_dim
        self._log: deque[dict[str, Any]] = deque(maxlen=_LOG_LIMIT)
        self._seq = 0
        self._counts: Counter[tuple[str, str]] = Counter()
        self._faults: list[_GlobalFault] = []
        self._models: set[str] = set(DEFAULT_MODELS)

    def routes(self) -> list[web.RouteDef]:
        """The HTTP routes this simulator serves."""
        return [
            web.post("/v1/chat/completions", self.chat),
            web.post("/v1/embeddings", self.embeddings),
            web.get("/v1/models", self.models),
            web.get("/healthz", self.healthz),
            web.get("/_sim/requests", self.list_requests),
            web.delete("/_sim/requests", self.clear_requests),
            web.get("/_sim/faults", self.list_faults),
            web.post("/_sim/faults", self.add_fault),
            web.delete("/_sim/faults", self.clear_faults),
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
        entry = self._record(request, path, body if isinstance(body, dict) else {})
        try:
            response = await self._respond(request, path, body, entry)
        except InvalidRequestError as exc:
            entry["fault"] = exc.fault
            response = _error_response(400, str(exc), "invalid_request_error", exc.fault)
        entry["status"] = response.status
        return response

    def _record(
        self, request: web.Request, path: EndpointPath, body: dict[str, Any]
    ) -> dict[str, Any]:
        self._seq += 1
        entry = {
            "seq": self._seq,
            "at": time.time(),
            "path": path,
            "model": body.get("model"),
            "run_id": request.headers.get("X-Run-Id"),
            "idempotency_key": request.headers.get("Idempotency-Key"),
            "messages": body.get("messages" if path == "chat" else "input"),
            "status": None,
            "fault": None,
            "temperature": body.get("temperature"),
            "response_format": body.get("response_format"),
            "usage": None,
        }
        self._log.append(entry)
        return entry

    async def _respond(
        self, request: web.Request, path: EndpointPath, body: object, entry: dict[str, Any]
    ) -> web.Response:
        if not isinstance(body, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequestError("'model' must be a non-empty string")
        texts = _chat_texts(body) if path == "chat" else _embedding_inputs(body)
        directives = parse_directives(texts)
        self._models.add(model)
        first = (_user_texts(body["messages"]) or texts) if path == "chat" else texts
        run_key = request.headers.get("X-Run-Id") or hashlib.sha256(first[0].encode()).hexdigest()
        plan = await self._plan(run_key, path, model, directives, entry)
        if plan.error is not None and plan.error.status is not None:
            return _fault_response(plan.error, plan.error.status)
        if path == "chat":
            completion = _completion(entry["seq"], model, body["messages"], texts, plan)
            entry["usage"] = completion["usage"]
            return web.json_response(completion)
        result = self._embedding_result(model, body, texts)
        entry["usage"] = result["usage"]
        return web.json_response(result)

    async def _plan(
        self,
        run_key: str,
        path: EndpointPath,
        model: str,
        directives: list[Directive],
        entry: dict[str, Any],
    ) -> _Plan:
        plan = _Plan()
        for fault in self._faults:
            if not fault.spec.matches(path, model):
                continue
            fault.hits += 1
            if fault.spec.times is not None and fault.hits > fault.spec.times:
                continue
            if fault.spec.delay_ms is not None:
                plan.fired.append("global_delay")
                entry["fault"] = "+".join(plan.fired)
                await asyncio.sleep(fault.spec.delay_ms / 1000)
            if fault.spec.status is not None:
                plan.fired.append("global_status")
                entry["fault"] = "+".join(plan.fired)
                plan.error = fault.spec
                return plan
        for directive in directives:
            if not directive.spec.matches(path, model):
                continue
            if directive.name in _SHAPES and plan.shape is not None:
                continue
            if not self._count(run_key, directive):
                continue
            plan.fired.append(directive.name)
            entry["fault"] = "+".join(plan.fired)
            if isinstance(directive.spec, FaultSpec):
                if directive.spec.delay_ms is not None:
                    await asyncio.sleep(directive.spec.delay_ms / 1000)
                plan.error = directive.spec
                return plan
            if directive.sleep_s is not None:
                await asyncio.sleep(directive.sleep_s)
            elif directive.name == "review":
                plan.review = True
            else:
                plan.shape = directive.name
        return plan

    def _count(self, run_key: str, directive: Directive) -> bool:
        """Count a call against ``directive``; return whether it still applies."""
        key = (run_key, directive.text)
        self._counts[key] += 1
        return directive.spec.times is None or self._counts[key] <= directive.spec.times

    def _embedding_result(
        self, model: str, body: dict[str, Any], texts: list[str]
    ) -> dict[str, Any]:
        dim = body.get("dimensions", self._embedding_dim)
        if not isinstance(dim, int) or not 1 <= dim <= 8192:
            raise InvalidRequestError("'dimensions' must be an integer from 1 to 8192")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise InvalidRequestError("'encoding_format' must be 'float' or 'base64'")
        data = []
        for index, text in enumerate(texts):
            vector: list[float] | str = embed(text, dim)
            if encoding == "base64":  # the openai client asks for base64 float32 by default
                vector = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = _word_count(texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": model, "usage": usage}

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
        """``DELETE /_sim/requests``: clear the log and every fault counter."""
        self._log.clear()
        self._counts.clear()
        for fault in self._faults:
            fault.hits = 0
        return web.json_response({"ok": True})

    async def list_faults(self, request: web.Request) -> web.Response:
        """``GET /_sim/faults``: the global faults with their hit counts."""
        faults = [{**fault.spec.model_dump(), "hits": fault.hits} for fault in self._faults]
        return web.json_response(faults)

    async def add_fault(self, request: web.Request) -> web.Response:
        """``POST /_sim/faults``: add a global fault (see FaultSpec)."""
        try:
            spec = FaultSpec.model_validate_json(await request.read())
        except ValidationError as exc:
            return _error_response(400, str(exc), "invalid_request_error", None)
        self._faults.append(_GlobalFault(spec))
        return await self.list_faults(request)

    async def clear_faults(self, request: web.Request) -> web.Response:
        """``DELETE /_sim/faults``: remove every global fault."""
        self._faults.clear()
        return web.json_response({"ok": True})


def _chat_texts(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("'messages' must be a non-empty list")
    return [_message_text(message) for message in messages]


def _embedding_inputs(body: dict[str, Any]) -> list[str]:
    value = body.get("input")
    inputs = [value] if isinstance(value, str) else value
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise InvalidRequestError("'input' must be a string or a non-empty list of strings")
    return inputs


def build_app(embedding_dim: int = 64) -> web.Application:
    """Build the simulator's aiohttp application with fresh state."""
    # Large prompts (documents given by reference, loaded by invoke_llm) must reach it whole.
    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.add_routes(Simulator(embedding_dim).routes())
    return app


@asynccontextmanager
async def running_simulator(
    host: str = "127.0.0.1", port: int = 0, embedding_dim: int = 64
) -> AsyncIterator[str]:
    """Serve a fresh simulator in this event loop; yield its root URL (``http://HOST:PORT``).

    ``port=0`` picks a free port. The OpenAI base URL is the yielded URL plus ``/v1``.
    """
    runner = web.AppRunner(
        build_app(embedding_dim),
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


async def serve(host: str, port: int, embedding_dim: int) -> None:
    """Serve until SIGTERM or SIGINT, printing the ready line once listening."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with running_simulator(host, port, embedding_dim) as url:
        print(f"llm-simulator listening on {url}", flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point: ``python -m aiorch.devstack.llm_simulator``."""
    parser = argparse.ArgumentParser(
        prog="python -m aiorch.devstack.llm_simulator", description=__doc__
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--embedding-dim", type=int, default=64)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.embedding_dim))


if __name__ == "__main__":
    main()
