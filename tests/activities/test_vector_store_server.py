"""The worker's client for a Qdrant server (``VECTOR_STORE_URL``) against a stand-in at its
transport: a TLS server on loopback, with a certificate from a CA of the test's own, that answers
the REST call the client makes and records what it was sent. The client sends the API key on
every request and checks the server's certificate against ``VECTOR_STORE_CA_CERT_PATH``; a server
it cannot verify never sees the key."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from pydantic import SecretStr
from qdrant_client.http.exceptions import ResponseHandlingException

from aiorch.worker.clients import vector_store
from aiorch_runtime.config import ConfigError, Settings
from tests.support.certs import issue, make_authority

API_KEY = "qdrant-key-canary-7f3a"


@dataclass
class Server:
    """The stand-in's address, its CA's file, and the headers of each request it answered."""

    url: str
    ca_path: Path
    seen: list[dict[str, str]] = field(default_factory=list)


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    ca = make_authority(tmp_path, "qdrant-ca")
    leaf = issue(tmp_path, ca, "qdrant", server=True)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(leaf.cert_path, leaf.key_path)
    running = Server("", ca.pem.cert_path)

    async def exists(request: web.Request) -> web.Response:
        running.seen.append(dict(request.headers))
        return web.json_response({"result": {"exists": True}, "status": "ok", "time": 0.0})

    app = web.Application()
    app.router.add_get("/collections/{name}/exists", exists)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
    running.url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield running
    finally:
        await runner.cleanup()


async def test_the_key_goes_with_every_call_to_the_server_its_ca_vouches_for(
    server: Server,
) -> None:
    """With VECTOR_STORE_API_KEY and VECTOR_STORE_CA_CERT_PATH, the worker's client reaches the
    server over TLS, verified against that CA, and authenticates with the key."""
    settings = Settings(
        vector_store_url=server.url,
        vector_store_api_key=SecretStr(API_KEY),
        vector_store_ca_cert_path=server.ca_path,
    )
    client = vector_store(settings)
    try:
        assert await client.collection_exists("ai-orchestrator")
    finally:
        await client.close()
    [headers] = server.seen
    assert headers["api-key"] == API_KEY


async def test_a_server_it_cannot_verify_never_gets_the_key(server: Server) -> None:
    """Without the CA (the system's roots only), a server whose certificate they do not vouch
    for, as an impostor's would be, is refused before any request: it never sees the key."""
    settings = Settings(vector_store_url=server.url, vector_store_api_key=SecretStr(API_KEY))
    client = vector_store(settings)
    try:
        with pytest.raises(ResponseHandlingException, match="CERTIFICATE_VERIFY_FAILED"):
            await client.collection_exists("ai-orchestrator")
    finally:
        await client.close()
    assert server.seen == []


def test_the_key_is_a_secret_that_may_come_from_a_file(tmp_path: Path) -> None:
    """VECTOR_STORE_API_KEY_FILE supplies the key, which no repr or dump shows."""
    (tmp_path / "key").write_text(API_KEY + "\n")
    settings = Settings(
        vector_store_url="https://q:6333", vector_store_api_key_file=tmp_path / "key"
    )
    assert settings.vector_store_api_key is not None
    assert settings.vector_store_api_key.get_secret_value() == API_KEY
    assert API_KEY not in repr(settings) and API_KEY not in settings.model_dump_json()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"vector_store_api_key": SecretStr(API_KEY)},
            "are for a Qdrant server: set VECTOR_STORE_URL",
        ),
        (
            {"vector_store_url": "http://q:6333", "vector_store_ca_cert_path": Path("/x.pem")},
            "VECTOR_STORE_CA_CERT_PATH checks a TLS server: use an https:// URL",
        ),
        (
            {"vector_store_url": "https://q:6333", "vector_store_ca_cert_path": Path("/none.pem")},
            "VECTOR_STORE_CA_CERT_PATH='/none.pem': No such file or directory",
        ),
    ],
)
def test_server_settings_that_cannot_work_are_one_line(
    fields: dict[str, object], message: str
) -> None:
    """A key or CA with the embedded store, a CA for plain http, a CA file that is not there:
    each stops the worker with one line naming the setting, never the key."""
    with pytest.raises(ConfigError) as info:
        vector_store(Settings(**fields))  # type: ignore[arg-type]
    assert message in str(info.value)
    assert API_KEY not in str(info.value)
