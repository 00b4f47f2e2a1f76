"""The simulator's Files and Batches API, shaped like OpenAI's, so the batch lane is tested
offline through the real ``openai`` client.

- ``POST /v1/files`` (multipart ``file``, ``purpose``), ``GET /v1/files/{id}``, ``GET
  /v1/files/{id}/content``;
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window``, ``metadata``),
  ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``, ``GET /v1/batches`` (newest
  first, ``limit`` and ``after``, with ``has_more``).

A batch is ``in_progress`` until ``completion_s`` after its creation; the first read after that
runs its lines, each as the simulator answers a chat call (directives, global faults and the
prompt cache included, so per-call failures come from ``[sim:...]`` directives), and completes
it: 200 answers in its output file, every other answer in its error file, both matched to their
requests by ``custom_id`` and written in reverse order (providers do not keep the input order).
With ``expire_after`` set, a batch answers only its first N lines and ends ``expired``, the
rest in its error file with code ``batch_expired``. A cancelled batch answers nothing more.

Control: ``GET /_sim/batches`` (the settings, ``submissions``: how many batches were created,
and every batch), ``PUT /_sim/batches`` (``completion_s``, ``expire_after``, and
``create_delay_ms``: how long the create call waits, after the batch exists, before it answers;
a client that dies meanwhile does not know it was created), ``DELETE /_sim/batches`` (forget
every file, batch and setting).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aiorch.devstack.llm_simulator.faults import error_response

# Answers one request line: (HTTP status, JSON body), logged as a chat call of ``custom_id``.
LineAnswer = Callable[[dict[str, Any], str, str], Awaitable[tuple[int, dict[str, Any]]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ENDPOINTS = frozenset({"/v1/chat/completions"})


class BatchSettings(BaseModel):
    """The body of ``PUT /_sim/batches``: what the next batches do."""

    model_config = ConfigDict(extra="forbid")

    completion_s: float = Field(default=1.0, ge=0)
    expire_after: int | None = Field(default=None, ge=0)
    create_delay_ms: int = Field(default=0, ge=0)


@dataclass
class StoredFile:
    """An uploaded or written file."""

    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def object(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass
class Batch:
    """One batch and what became of it."""

    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    created_at: float
    due: float
    expire_after: int | None
    status: str = "in_progress"
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    ended_at: float | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def object(self) -> dict[str, Any]:
        ended = int(self.ended_at) if self.ended_at else None
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created_at),
            "in_progress_at": int(self.created_at),
            "expires_at": int(self.created_at) + 86400,
            "finalizing_at": ended,
            "completed_at": ended if self.status == "completed" else None,
            "failed_at": ended if self.status == "failed" else None,
            "expired_at": ended if self.status == "expired" else None,
            "cancelling_at": ended if self.status == "cancelled" else None,
            "cancelled_at": ended if self.status == "cancelled" else None,
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }


class BatchApi:
    """Files and batches (see the module docstring); ``answer`` answers one request line."""

    def __init__(self, answer: LineAnswer) -> None:
        self._answer = answer
        self._files: dict[str, StoredFile] = {}
        self._batches: dict[str, Batch] = {}
        self._settings = BatchSettings()
        self._sequence = 0
        self.submissions = 0

    def routes(self) -> dict[str, dict[str, Handler]]:
        """The paths this API serves, with their handlers per method."""
        return {
            "/v1/files": {"POST": self.upload},
            "/v1/files/{file_id}": {"GET": self.file},
            "/v1/files/{file_id}/content": {"GET": self.content},
            "/v1/batches": {"POST": self.create, "GET": self.list_batches},
            "/v1/batches/{batch_id}": {"GET": self.retrieve},
            "/v1/batches/{batch_id}/cancel": {"POST": self.cancel},
            "/_sim/batches": {
                "GET": self.state,
                "PUT": self.configure,
                "DELETE": self.reset,
            },
        }

    def _next_id(self, prefix: str) -> str:
        self._sequence += 1
        return f"{prefix}{self._sequence:06d}"

    def _store(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        stored = StoredFile(self._next_id("file-sim"), filename, purpose, data, int(time.time()))
        self._files[stored.id] = stored
        return stored

    async def upload(self, request: web.Request) -> web.Response:
        """``POST /v1/files``."""
        form = await request.post()
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, web.FileField) or not isinstance(purpose, str):
            return _invalid("a file upload needs 'file' and 'purpose'")
        stored = self._store(upload.filename or "upload", purpose, upload.file.read())
        return web.json_response(stored.object())

    async def file(self, request: web.Request) -> web.Response:
        """``GET /v1/files/{id}``."""
        stored = self._files.get(request.match_info["file_id"])
        return web.json_response(stored.object()) if stored else _not_found("file")

    async def content(self, request: web.Request) -> web.Response:
        """``GET /v1/files/{id}/content``."""
        stored = self._files.get(request.match_info["file_id"])
        if stored is None:
            return _not_found("file")
        return web.Response(body=stored.data, content_type="application/octet-stream")

    async def create(self, request: web.Request) -> web.Response:
        """``POST /v1/batches``: counted as a submission the moment it exists."""
        try:
            body = await request.json()
        except ValueError:
            return _invalid("the request body must be JSON")
        input_file = self._files.get(str(body.get("input_file_id")))
        if input_file is None:
            return _invalid("input_file_id names no uploaded file")
        if body.get("endpoint") not in ENDPOINTS or body.get("completion_window") != "24h":
            return _invalid("endpoint must be /v1/chat/completions, completion_window 24h")
        settings = self._settings
        now = time.time()
        batch = Batch(
            id=self._next_id("batch_sim"),
            input_file_id=input_file.id,
            endpoint=body["endpoint"],
            completion_window="24h",
            metadata=body.get("metadata"),
            created_at=now,
            due=now + settings.completion_s,
            expire_after=settings.expire_after,
            total=sum(1 for line in input_file.data.splitlines() if line.strip()),
        )
        self._batches[batch.id] = batch
        self.submissions += 1
        if settings.create_delay_ms:
            await asyncio.sleep(settings.create_delay_ms / 1000)
        return web.json_response(batch.object())

    async def retrieve(self, request: web.Request) -> web.Response:
        """``GET /v1/batches/{id}``: a batch that is due is run first."""
        batch = self._batches.get(request.match_info["batch_id"])
        if batch is None:
            return _not_found("batch")
        await self._run_if_due(batch)
        return web.json_response(batch.object())

    async def cancel(self, request: web.Request) -> web.Response:
        """``POST /v1/batches/{id}/cancel``: an unfinished batch answers nothing more."""
        batch = self._batches.get(request.match_info["batch_id"])
        if batch is None:
            return _not_found("batch")
        async with batch.lock:
            if batch.status == "in_progress":
                batch.status, batch.ended_at = "cancelled", time.time()
        return web.json_response(batch.object())

    async def list_batches(self, request: web.Request) -> web.Response:
        """``GET /v1/batches``: newest first, ``limit`` (1-100) after the id ``after``."""
        try:
            limit = min(100, max(1, int(request.query.get("limit", "20"))))
        except ValueError:
            return _invalid("limit must be a number")
        ordered = sorted(self._batches.values(), key=lambda b: b.id, reverse=True)
        after = request.query.get("after")
        if after is not None:
            ordered = [batch for batch in ordered if batch.id < after]
        page = ordered[:limit]
        data = [batch.object() for batch in page]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": len(ordered) > limit,
            }
        )

    async def state(self, request: web.Request) -> web.Response:
        """``GET /_sim/batches``."""
        return web.json_response(
            {
                "settings": self._settings.model_dump(),
                "submissions": self.submissions,
                "batches": [batch.object() for batch in self._batches.values()],
            }
        )

    async def configure(self, request: web.Request) -> web.Response:
        """``PUT /_sim/batches``: the settings of the batches created from now on."""
        try:
            self._settings = BatchSettings.model_validate_json(await request.read())
        except ValidationError as exc:
            return error_response(400, str(exc), "invalid_request_error", None)
        return await self.state(request)

    async def reset(self, request: web.Request) -> web.Response:
        """``DELETE /_sim/batches``."""
        self._files.clear()
        self._batches.clear()
        self._settings = BatchSettings()
        self.submissions = 0
        return web.json_response({"ok": True})

    async def _run_if_due(self, batch: Batch) -> None:
        async with batch.lock:
            if batch.status != "in_progress" or time.time() < batch.due:
                return
            await self._run(batch)

    async def _run(self, batch: Batch) -> None:
        """Answer the batch's lines and write its output and error files."""
        lines = [
            json.loads(raw) for raw in self._files[batch.input_file_id].data.splitlines() if raw
        ]
        answered, refused = [], []
        for number, line in enumerate(lines):
            custom_id = str(line.get("custom_id"))
            if batch.expire_after is not None and number >= batch.expire_after:
                refused.append(_line(batch, custom_id, None, _expired()))
                continue
            status, body = await self._answer(line.get("body") or {}, custom_id, batch.id)
            response = {
                "status_code": status,
                "request_id": f"req-{batch.id}-{number}",
                "body": body,
            }
            if status == 200:
                answered.append(_line(batch, custom_id, response, None))
                batch.completed += 1
            else:
                refused.append(_line(batch, custom_id, response, None))
                batch.failed += 1
        # Providers write results in no particular order: callers must match by custom_id.
        answered.reverse()
        refused.reverse()
        if answered:
            batch.output_file_id = self._write(f"{batch.id}_output.jsonl", answered)
        if refused:
            batch.error_file_id = self._write(f"{batch.id}_errors.jsonl", refused)
        batch.status = "expired" if batch.expire_after is not None else "completed"
        if batch.expire_after is not None and batch.expire_after >= len(lines):
            batch.status = "completed"
        batch.ended_at = time.time()

    def _write(self, filename: str, lines: list[dict[str, Any]]) -> str:
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return self._store(filename, "batch_output", data).id


def _line(
    batch: Batch, custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": f"{batch.id}_{custom_id}",
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }


def _expired() -> dict[str, Any]:
    return {
        "code": "batch_expired",
        "message": "This request could not be executed before the completion window expired.",
    }


def _invalid(message: str) -> web.Response:
    return error_response(400, message, "invalid_request_error", None)


def _not_found(what: str) -> web.Response:
    return error_response(404, f"no such {what}", "invalid_request_error", "not_found")
