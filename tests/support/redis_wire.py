"""A Redis stand-in served over the wire in the test's own event loop, for the fast tier (which
starts no server process; the real capacity store is tested end to end).

It speaks RESP (2, or 3 once the client says ``HELLO 3``) to redis-py's client, for the plain
key commands the result cache and a connection pool need (``GET``, ``SET`` with ``EX``/``PX``,
``PING``), answers the client's connection set-up, and refuses anything else (scripts above
all) with an error, so a test can never pass on a command it does not really serve. It keeps
its own clock, which a test moves forward (`RedisWire.advance`) to cross a TTL without
sleeping, and counts the connections open at once (`RedisWire.peak`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

Reply = bytes | str | None


@dataclass
class RedisWire:
    """The stand-in's state: keys with their expiry (on its own clock, in ms), the commands it
    was sent, and the connections open now and at most."""

    url: str = ""
    values: dict[bytes, bytes] = field(default_factory=dict)
    expires_ms: dict[bytes, int] = field(default_factory=dict)
    commands: list[list[bytes]] = field(default_factory=list)
    now_ms: int = 0
    open: int = 0
    peak: int = 0

    def advance(self, ms: int) -> None:
        """Move the stand-in's clock forward ``ms`` milliseconds."""
        self.now_ms += ms

    def _live(self, key: bytes) -> bool:
        expiry = self.expires_ms.get(key)
        if expiry is not None and expiry <= self.now_ms:
            self.values.pop(key, None)
            self.expires_ms.pop(key, None)
        return key in self.values

    def answer(self, command: list[bytes]) -> Reply:
        """The reply to one command, as redis-py reads it back."""
        self.commands.append(command)
        name, args = command[0].upper(), command[1:]
        if name == b"PING":
            return "PONG"
        if name in (b"CLIENT", b"SELECT"):
            return "OK"
        if name == b"GET":
            return self.values[args[0]] if self._live(args[0]) else None
        if name == b"SET":
            return self._set(args)
        raise LookupError(f"unknown command '{name.decode()}' (the stand-in does not serve it)")

    def _set(self, args: list[bytes]) -> Reply:
        key, value, options = args[0], args[1], [a.upper() for a in args[2:]]
        self.values[key] = value
        self.expires_ms.pop(key, None)
        for unit, scale in ((b"EX", 1000), (b"PX", 1)):
            if unit in options:
                self.expires_ms[key] = self.now_ms + int(args[2 + options.index(unit) + 1]) * scale
        return "OK"


def _encoded(reply: Reply, protocol: int) -> bytes:
    if reply is None:
        return b"_\r\n" if protocol == 3 else b"$-1\r\n"
    if isinstance(reply, str):
        return f"+{reply}\r\n".encode()
    return b"$%d\r\n%s\r\n" % (len(reply), reply)


async def _command(reader: asyncio.StreamReader) -> list[bytes] | None:
    """One command (an array of bulk strings, as every client sends), or None at the end."""
    header = await reader.readline()
    if not header:
        return None
    if not header.startswith(b"*"):
        raise ValueError("not a RESP array")
    parts = []
    for _ in range(int(header[1:])):
        size = int((await reader.readline())[1:])
        parts.append((await reader.readexactly(size + 2))[:-2])
    return parts


@asynccontextmanager
async def redis_wire() -> AsyncIterator[RedisWire]:
    """Serve a fresh stand-in on a free local port; its ``url`` is a ``redis://`` URL."""
    wire = RedisWire()
    writers: set[asyncio.StreamWriter] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        wire.open += 1
        wire.peak = max(wire.peak, wire.open)
        protocol = 2
        try:
            while (command := await _command(reader)) is not None:
                try:
                    if command[0].upper() == b"HELLO":  # the client asks for RESP3 by default
                        protocol = int(command[1]) if len(command) > 1 else protocol
                        reply = b"%%1\r\n+proto\r\n:%d\r\n" % protocol
                    else:
                        reply = _encoded(wire.answer(command), protocol)
                except LookupError as err:
                    reply = f"-ERR {err}\r\n".encode()
                writer.write(reply)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):  # gone, or not RESP
            pass
        finally:
            wire.open -= 1
            writers.discard(writer)
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    wire.url = f"redis://127.0.0.1:{port}/0"
    try:
        yield wire
    finally:
        server.close()
        for writer in list(writers):  # a client the test left open
            writer.close()
        await server.wait_closed()
