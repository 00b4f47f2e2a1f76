"""Webhook receivers for tests: a real aiohttp server on loopback that records every call and
answers with scripted statuses (then 200), and a broken one whose answers no client accepts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

HOOK_PATH = "/hooks/secret-path"


@dataclass
class Receiver:
    """What the receiver got (headers, JSON body), and what it will answer next."""

    url: str = ""
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    calls: list[tuple[dict[str, str], Any]] = field(default_factory=list)

    @property
    def bodies(self) -> list[Any]:
        return [body for _, body in self.calls]

    async def handle(self, request: web.Request) -> web.Response:
        self.calls.append((dict(request.headers), json.loads(await request.read())))
        status, headers = self.answers.pop(0) if self.answers else (200, {})
        return web.Response(status=status, headers=headers, text="ok")


@asynccontextmanager
async def running_receiver(port: int = 0) -> AsyncIterator[Receiver]:
    """A receiver listening on 127.0.0.1 (``port`` 0: a free one) until the block ends."""
    receiver = Receiver()
    app = web.Application()
    app.router.add_post(HOOK_PATH, receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}{HOOK_PATH}"
    try:
        yield receiver
    finally:
        await runner.cleanup()


@asynccontextmanager
async def running_broken_receiver() -> AsyncIterator[str]:
    """A receiver on 127.0.0.1 that answers every request with a status line no HTTP client
    accepts (the client's error then quotes the URL it called); yields that URL."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 abc Broken\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}{HOOK_PATH}"
    finally:
        server.close()
        await server.wait_closed()
