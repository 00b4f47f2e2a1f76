"""A scripted S3 endpoint for tests: a real HTTP server on loopback that speaks S3's GetObject
wire format (an object's bytes with ``Content-Length`` and ``Content-Range``, or an XML error
with a ``Code``) and answers each key as the test says, recording every request it got.

The local S3 server (moto) answers like a healthy S3; this one also answers what only a real
one under load, a proxy in front of it or a store that ignores ``Range`` does: 5xx, 408, 429,
throttling codes, bodies longer than asked for.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

# How long a held answer waits for the test to end before giving up the connection.
HOLD_LIMIT_S = 30.0
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


@dataclass(frozen=True)
class StoredObject:
    """An object's bytes, answered as S3 does (206 and only the asked-for bytes for a ``Range``;
    416 ``InvalidRange`` when the range starts past the end), or, with ``honours_range`` off, as
    a store that sends the whole object whatever was asked."""

    data: bytes
    honours_range: bool = True


@dataclass(frozen=True)
class HeldObject:
    """A store that ignores ``Range`` and announces ``declared_length`` bytes, sends ``sent``
    and then holds the connection open without sending the rest (until the stub stops)."""

    sent: bytes
    declared_length: int


@dataclass(frozen=True)
class ErrorAnswer:
    """An error status with its body as given (S3's XML, a proxy's HTML page, or nothing)."""

    status: int
    body: bytes = b""
    content_type: str = "application/xml"


def s3_error(status: int, code: str | None, message: str = "") -> ErrorAnswer:
    """S3's XML error document (``<Error><Code>...``); ``code`` None leaves the Code out."""
    parts = [] if code is None else [f"<Code>{escape(code)}</Code>"]
    parts.append(f"<Message>{escape(message)}</Message><RequestId>stub</RequestId>")
    body = '<?xml version="1.0" encoding="UTF-8"?>\n<Error>' + "".join(parts) + "</Error>"
    return ErrorAnswer(status, body.encode())


Answer = StoredObject | HeldObject | ErrorAnswer


@dataclass(frozen=True)
class StubRequest:
    """One request the stub got: its method, path and headers."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class StubS3:
    """The stub's URL, its answers by path (``/bucket/key``; any other path: 404 NoSuchKey) and
    the requests it got, in order."""

    url: str = ""
    answers: dict[str, Answer] = field(default_factory=dict)
    requests: list[StubRequest] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def requests_for(self, path: str) -> list[StubRequest]:
        return [request for request in self.requests if request.path == path]

    def reset(self) -> None:
        """Forget the answers and requests, and let go of every held connection."""
        self.released.set()
        self.released = threading.Event()
        self.answers = {}
        self.requests.clear()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3: every answer states its length
    server: _StubServer

    def do_GET(self) -> None:
        stub = self.server.stub
        stub.requests.append(StubRequest("GET", self.path, dict(self.headers.items())))
        answer = stub.answers.get(self.path.split("?")[0]) or s3_error(404, "NoSuchKey")
        if isinstance(answer, ErrorAnswer):
            self._send(answer.status, answer.body, {"Content-Type": answer.content_type})
        elif isinstance(answer, HeldObject):
            self._send_head(200, answer.declared_length, {})
            self.wfile.write(answer.sent)
            self.wfile.flush()
            stub.released.wait(HOLD_LIMIT_S)  # the event of this test, even after a reset
            self.close_connection = True
        else:
            self._send_object(answer, self.headers.get("Range"))

    def _send_object(self, stored: StoredObject, asked: str | None) -> None:
        matched = _RANGE.fullmatch(asked or "")
        if not stored.honours_range or matched is None:
            self._send(200, stored.data, {})
            return
        first, last = int(matched[1]), matched[2]
        if first >= len(stored.data):
            self._send(416, s3_error(416, "InvalidRange").body, {"Content-Type": "application/xml"})
            return
        end = min(int(last), len(stored.data) - 1) if last else len(stored.data) - 1
        content_range = f"bytes {first}-{end}/{len(stored.data)}"
        self._send(206, stored.data[first : end + 1], {"Content-Range": content_range})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self._send_head(status, len(body), headers)
        self.wfile.write(body)

    def _send_head(self, status: int, length: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in {"Content-Length": str(length), **headers}.items():
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the requests are recorded in ``StubS3.requests``."""


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, stub: StubS3) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stub = stub


@contextmanager
def running_s3_stub() -> Iterator[StubS3]:
    """A stub listening on a free port of 127.0.0.1 until the block ends."""
    stub = StubS3()
    server = _StubServer(stub)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    serving = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="s3-stub", daemon=True
    )
    serving.start()
    try:
        yield stub
    finally:
        stub.released.set()
        server.shutdown()
        server.server_close()
        serving.join(timeout=5)
