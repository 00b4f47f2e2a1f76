"""The codec server's HTTP contract, served in-process: auth, token strength, CORS, the
namespace rules, errors."""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload

from aiorch.ops.codec_server import CodecService, service_from_settings, ui_origin
from aiorch_runtime.codec import (
    METADATA_NAMESPACE,
    METADATA_WORKFLOW_ID,
    Binding,
    EncryptionCodec,
    KeyRing,
    new_key,
)
from aiorch_runtime.config import ConfigError, Settings

TOKEN = "tok-4Rf9-qLz2-Hw7c-Xb1d-Mn8v-Ks3e-Tj6y"
UI = "http://127.0.0.1:8233"
KEY = new_key()
PLAIN: dict[str, Any] = {
    "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
    "data": base64.b64encode(b'"hello canary"').decode(),
}


RING = KeyRing.parse(f"k1:{KEY}")


@pytest.fixture
async def http() -> AsyncIterator[TestClient[Any, Any]]:
    service = CodecService(EncryptionCodec(RING), token=TOKEN, namespace="default", origin=UI)
    async with TestClient(TestServer(service.app())) as client:
        yield client


def bearer(token: str = TOKEN, namespace: str | None = "default") -> dict[str, str]:
    """The headers the Temporal CLI sends: the token and its namespace."""
    headers = {"Authorization": f"Bearer {token}"}
    if namespace is not None:
        headers["X-Namespace"] = namespace
    return headers


async def sealed_for(binding: Binding | None, ring: KeyRing = RING) -> dict[str, Any]:
    """PLAIN encrypted the way a worker (a run's binding) or a context-free client would."""
    [sealed] = await EncryptionCodec(ring, binding=binding).encode(
        [json_format.ParseDict(PLAIN, Payload())]
    )
    return json_format.MessageToDict(sealed)


async def test_encode_then_decode_round_trips(http: TestClient[Any, Any]) -> None:
    """/encode encrypts (key id in metadata) for the server's namespace and no run; /decode
    restores the original payload."""
    encoded = await http.post("/encode", json={"payloads": [PLAIN]}, headers=bearer())
    assert encoded.status == 200
    sealed = (await encoded.json())["payloads"][0]
    assert base64.b64decode(sealed["metadata"]["encryption-key-id"]) == b"k1"
    assert base64.b64decode(sealed["metadata"][METADATA_NAMESPACE]) == b"default"
    assert base64.b64decode(sealed["metadata"][METADATA_WORKFLOW_ID]) == b""
    assert b"canary" not in base64.b64decode(sealed["data"])
    decoded = await http.post("/decode", json={"payloads": [sealed]}, headers=bearer())
    assert (await decoded.json())["payloads"] == [PLAIN]


async def test_decodes_any_run_of_its_namespace(http: TestClient[Any, Any]) -> None:
    """Payloads a worker wrote for a run of this namespace, or that were encrypted without any
    context, decode together in one request (the Web UI batches a page of events)."""
    body = {
        "payloads": [
            await sealed_for(Binding("default", "run-a")),
            await sealed_for(Binding("default", "run-b")),
            await sealed_for(None),
            PLAIN,
        ]
    }
    response = await http.post("/decode", json=body, headers=bearer())
    assert response.status == 200
    assert (await response.json())["payloads"] == [PLAIN] * 4


async def test_payload_of_another_namespace_is_403(http: TestClient[Any, Any]) -> None:
    """A payload encrypted for another namespace (same keys) is refused even though the
    request itself names this namespace, and nothing of the batch is decoded."""
    body = {
        "payloads": [
            await sealed_for(Binding("default", "run-a")),
            await sealed_for(Binding("prod", "run-a")),
        ]
    }
    response = await http.post("/decode", json=body, headers=bearer())
    assert response.status == 403
    reply = await response.json()
    assert reply == {"error": "payloads [1] are encrypted for another namespace"}


async def test_relabelled_namespace_is_422(http: TestClient[Any, Any]) -> None:
    """A payload of another namespace whose metadata is rewritten to claim this one fails
    authentication: 422, nothing decoded."""
    sealed = await sealed_for(Binding("prod", "run-a"))
    sealed["metadata"][METADATA_NAMESPACE] = base64.b64encode(b"default").decode()
    response = await http.post("/decode", json={"payloads": [sealed]}, headers=bearer())
    assert response.status == 422
    assert "does not decrypt" in (await response.json())["error"]


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Namespace": "default"},
        bearer("wrong"),
        {"Authorization": TOKEN, "X-Namespace": "default"},
        {"Authorization": f"Basic {TOKEN}", "X-Namespace": "default"},
        {},
    ],
)
async def test_without_the_token_is_401(
    http: TestClient[Any, Any], headers: dict[str, str]
) -> None:
    """No token, a wrong one or the wrong scheme: 401 with a Bearer challenge, nothing decoded
    (checked before the namespace, so a caller without the token learns nothing else)."""
    response = await http.post("/decode", json={"payloads": [PLAIN]}, headers=headers)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "hello" not in await response.text()


async def test_token_as_path_segment_is_accepted(http: TestClient[Any, Any]) -> None:
    """The Web UI's form: http://host/TOKEN/decode; another segment needs the header."""
    namespace = {"X-Namespace": "default"}
    ok = await http.post(f"/{TOKEN}/decode", json={"payloads": [PLAIN]}, headers=namespace)
    assert ok.status == 200
    denied = await http.post("/default/decode", json={"payloads": [PLAIN]}, headers=namespace)
    assert denied.status == 401
    ok = await http.post("/default/decode", json={"payloads": [PLAIN]}, headers=bearer())
    assert ok.status == 200


@pytest.mark.parametrize("endpoint", ["/encode", "/decode", f"/{TOKEN}/decode"])
@pytest.mark.parametrize(
    ("namespace", "status"), [(None, 400), ("", 400), ("prod", 403), ("Default", 403)]
)
async def test_namespace_is_required_and_checked(
    http: TestClient[Any, Any], endpoint: str, namespace: str | None, status: int
) -> None:
    """X-Namespace names the caller's namespace: left out (or empty) it is 400, another
    namespace is 403, on both endpoints and both token forms; nothing is converted."""
    headers = bearer(namespace=namespace)
    if endpoint.startswith(f"/{TOKEN}"):
        headers.pop("Authorization")
    response = await http.post(endpoint, json={"payloads": [PLAIN]}, headers=headers)
    assert response.status == status
    reply = await response.json()
    assert "payloads" not in reply
    assert "X-Namespace" in reply["error"] if status == 400 else "'default' only" in reply["error"]


async def test_cors_answers_the_ui_origin_only(http: TestClient[Any, Any]) -> None:
    """Preflight from the Web UI's origin: 204 with that origin, POST, and the headers the UI
    sends; from any other origin: 403 without CORS headers. Responses to the UI carry
    Access-Control-Allow-Origin, others do not."""
    ok = await http.options("/decode", headers={"Origin": UI})
    assert ok.status == 204
    assert ok.headers["Access-Control-Allow-Origin"] == UI
    assert "POST" in ok.headers["Access-Control-Allow-Methods"]
    assert "x-namespace" in ok.headers["Access-Control-Allow-Headers"]
    evil = await http.options("/decode", headers={"Origin": "http://evil.example"})
    assert evil.status == 403
    assert "Access-Control-Allow-Origin" not in evil.headers
    posted = await http.post(
        "/decode", json={"payloads": [PLAIN]}, headers={**bearer(), "Origin": UI}
    )
    assert posted.headers["Access-Control-Allow-Origin"] == UI
    denied = await http.post(
        "/decode", json={"payloads": [PLAIN]}, headers={"Origin": UI, "X-Namespace": "default"}
    )
    assert denied.status == 401  # CORS never replaces the token


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        ("not json", "application/json", 400),
        ('{"payloads": [1]}', "application/json", 400),
        ('{"payloads": []}', "text/plain", 415),
    ],
)
async def test_malformed_requests_are_refused(
    http: TestClient[Any, Any], body: str, content_type: str, status: int
) -> None:
    """A body that is not the protocol's JSON, or not JSON at all, gets a 4xx with a reason."""
    response = await http.post(
        "/decode", data=body, headers={**bearer(), "Content-Type": content_type}
    )
    assert response.status == status
    assert "error" in await response.json()


async def test_unknown_key_is_422_naming_the_key_id(http: TestClient[Any, Any]) -> None:
    """A payload encrypted with a key this server lacks is refused, naming the key id."""
    other = EncryptionCodec(KeyRing.parse(f"k9:{new_key()}"))
    [sealed] = await other.encode([json_format.ParseDict(PLAIN, Payload())])
    body = {"payloads": [json_format.MessageToDict(sealed)]}
    response = await http.post("/decode", json=body, headers=bearer())
    assert response.status == 422
    assert "'k9'" in (await response.json())["error"]


async def test_log_names_no_path_token_or_payload(
    http: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The access log shows endpoint, status and count, never the token or payload content."""
    with caplog.at_level(logging.INFO, logger="ai-orchestrator.codec-server"):
        await http.post(
            f"/{TOKEN}/decode", json={"payloads": [PLAIN]}, headers={"X-Namespace": "default"}
        )
        await http.post("/decode", json={"payloads": [PLAIN]}, headers=bearer())
        await http.options("/decode", headers={"Origin": "http://evil.example"})
    assert "POST decode -> 200 (1 payloads)" in caplog.text
    assert TOKEN not in caplog.text
    assert "hello" not in caplog.text


def test_settings_need_keys_and_token() -> None:
    """Without keys there is nothing to decode; without a token nobody may: both refuse to
    start with one line. The CORS origin is the UI URL's scheme, host and port."""
    with pytest.raises(ConfigError, match="needs PAYLOAD_KEYS"):
        service_from_settings(Settings(payload_keys=None))
    with pytest.raises(ConfigError, match="needs CODEC_SERVER_TOKEN"):
        service_from_settings(Settings(payload_keys=f"k1:{KEY}", codec_server_token=None))
    assert ui_origin("https://ui.example.com:8443/namespaces/x") == "https://ui.example.com:8443"
    assert ui_origin("") is None


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        ("tok-canary-123456", "is 17 characters; use at least 32"),
        ("x" * 31, "is 31 characters; use at least 32"),
        ("tok-" + "x" * 40, "only 5 distinct characters"),
        ("ab" * 32, "only 2 distinct characters"),
    ],
)
def test_weak_token_stops_the_server_at_start(token: str, problem: str) -> None:
    """A token shorter than 32 characters, or one with few distinct characters (not random),
    is refused at start with one line that never shows it; what the local stack and the
    compose secrets generate (secrets.token_urlsafe(32)) and a 32-character hex token pass."""
    ring = EncryptionCodec(RING)
    with pytest.raises(ConfigError) as info:
        CodecService(ring, token=token, namespace="default", origin=None)
    message = str(info.value)
    assert problem in message and "token_urlsafe(32)" in message
    assert token not in message and "\n" not in message
    with pytest.raises(ConfigError, match="is 17 characters"):
        service_from_settings(
            Settings(payload_keys=f"k1:{KEY}", codec_server_token="tok-canary-123456")
        )
    for strong in (secrets.token_urlsafe(32), secrets.token_hex(16), TOKEN):
        CodecService(ring, token=strong, namespace="default", origin=None)
