"""The codec server's HTTP contract, served in-process: auth, CORS, namespace, errors."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload

from aiorch.codec import EncryptionCodec, KeyRing, new_key
from aiorch.codec_server import CodecService, service_from_settings, ui_origin
from aiorch.config import ConfigError, Settings

TOKEN = "tok-" + "x" * 30
UI = "http://127.0.0.1:8233"
KEY = new_key()
PLAIN: dict[str, Any] = {
    "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
    "data": base64.b64encode(b'"hello canary"').decode(),
}


@pytest.fixture
async def http() -> AsyncIterator[TestClient[Any, Any]]:
    service = CodecService(
        EncryptionCodec(KeyRing.parse(f"k1:{KEY}")), token=TOKEN, namespace="default", origin=UI
    )
    async with TestClient(TestServer(service.app())) as client:
        yield client


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_encode_then_decode_round_trips(http: TestClient[Any, Any]) -> None:
    """/encode encrypts (key id in metadata), /decode restores the original payload."""
    encoded = await http.post("/encode", json={"payloads": [PLAIN]}, headers=bearer())
    assert encoded.status == 200
    sealed = (await encoded.json())["payloads"][0]
    assert base64.b64decode(sealed["metadata"]["encryption-key-id"]) == b"k1"
    assert b"canary" not in base64.b64decode(sealed["data"])
    decoded = await http.post("/decode", json={"payloads": [sealed]}, headers=bearer())
    assert (await decoded.json())["payloads"] == [PLAIN]


@pytest.mark.parametrize(
    "headers", [{}, bearer("wrong"), {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}]
)
async def test_without_the_token_is_401(
    http: TestClient[Any, Any], headers: dict[str, str]
) -> None:
    """No token, a wrong one or the wrong scheme: 401 with a Bearer challenge, nothing decoded."""
    response = await http.post("/decode", json={"payloads": [PLAIN]}, headers=headers)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "hello" not in await response.text()


async def test_token_as_path_segment_is_accepted(http: TestClient[Any, Any]) -> None:
    """The Web UI's form: http://host/TOKEN/decode; another segment needs the header."""
    assert (await http.post(f"/{TOKEN}/decode", json={"payloads": [PLAIN]})).status == 200
    assert (await http.post("/default/decode", json={"payloads": [PLAIN]})).status == 401
    ok = await http.post("/default/decode", json={"payloads": [PLAIN]}, headers=bearer())
    assert ok.status == 200


async def test_other_namespace_is_403(http: TestClient[Any, Any]) -> None:
    """X-Namespace names the caller's namespace; only the configured one is served."""
    response = await http.post(
        "/decode", json={"payloads": [PLAIN]}, headers={**bearer(), "X-Namespace": "prod"}
    )
    assert response.status == 403


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
    denied = await http.post("/decode", json={"payloads": [PLAIN]}, headers={"Origin": UI})
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
        await http.post(f"/{TOKEN}/decode", json={"payloads": [PLAIN]})
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
