"""The AES-GCM payload codec, its key ring, and the converter built from settings."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultFailureConverterWithEncodedAttributes,
)
from temporalio.exceptions import ApplicationError

from aiorch.codec import (
    ENCODING,
    METADATA_KEY_ID,
    EncryptionCodec,
    KeyRing,
    PayloadDecryptionError,
    keyring_from_settings,
    new_key,
)
from aiorch.config import ConfigError, Settings
from aiorch.temporal import DATA_CONVERTER, data_converter
from workflows.payloads import PipelineRequest

CANARY = "canary-7f3a-personal-data"
KEY_A = new_key()
KEY_B = new_key()


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{text}"'.encode())


def codec(spec: str, current: str | None = None) -> EncryptionCodec:
    return EncryptionCodec(KeyRing.parse(spec, current))


async def test_round_trip_hides_content_and_names_the_key() -> None:
    """An encoded payload is opaque, says binary/encrypted and names its key id; decoding gives
    back the original payload exactly, metadata included."""
    ring = codec(f"k1:{KEY_A}")
    original = plain(CANARY)

    [encoded] = await ring.encode([original])

    assert encoded.metadata["encoding"] == ENCODING
    assert encoded.metadata[METADATA_KEY_ID] == b"k1"
    assert CANARY.encode() not in encoded.SerializeToString()
    assert await ring.decode([encoded]) == [original]


async def test_each_encryption_uses_a_fresh_nonce() -> None:
    """The same payload encrypts differently every time (random nonce), so equal inputs cannot
    be recognised in history."""
    ring = codec(f"k1:{KEY_A}")
    first, second = await ring.encode([plain(CANARY), plain(CANARY)])
    assert first.data != second.data


async def test_rotation_old_key_still_decodes_and_new_payloads_use_the_current_key() -> None:
    """After rotating (k2 current, k1 kept), payloads written with k1 still decode and new ones
    are written with k2; once k1 is removed its payloads fail with a message naming k1."""
    before = codec(f"k1:{KEY_A}")
    [old] = await before.encode([plain("old")])

    rotated = codec(f"k1:{KEY_A},k2:{KEY_B}", "k2")
    [new] = await rotated.encode([plain("new")])

    assert new.metadata[METADATA_KEY_ID] == b"k2"
    assert await rotated.decode([old, new]) == [plain("old"), plain("new")]
    only_new = codec(f"k2:{KEY_B}")
    with pytest.raises(PayloadDecryptionError, match="key id 'k1', which is not configured"):
        await only_new.decode([old])


async def test_tampered_or_relabelled_payload_is_refused() -> None:
    """A flipped bit, or a payload relabelled with another configured key id, fails to decrypt
    instead of yielding garbage."""
    ring = codec(f"k1:{KEY_A}\nk2:{KEY_B}", "k1")
    [encoded] = await ring.encode([plain(CANARY)])
    tampered = Payload(metadata=dict(encoded.metadata), data=encoded.data[:-1] + b"\x00")
    relabelled = Payload(metadata={**encoded.metadata, METADATA_KEY_ID: b"k2"}, data=encoded.data)
    for bad in (tampered, relabelled):
        with pytest.raises(PayloadDecryptionError, match="does not decrypt"):
            await ring.decode([bad])


async def test_plain_payloads_pass_through_decode() -> None:
    """Payloads written before encryption was switched on still decode (unchanged)."""
    ring = codec(f"k1:{KEY_A}")
    assert await ring.decode([plain("legacy")]) == [plain("legacy")]


@pytest.mark.parametrize(
    ("spec", "current", "problem"),
    [
        ("", None, "holds no keys"),
        ("k1", None, "KEY_ID:BASE64KEY"),
        ("k 1:" + KEY_A, None, "KEY_ID:BASE64KEY"),
        ("k1:not base64!", None, "not valid base64"),
        ("k1:" + base64.b64encode(b"short").decode(), None, "AES-256 needs 32"),
        (f"k1:{KEY_A},k1:{KEY_B}", None, "configured twice"),
        (f"k1:{KEY_A},k2:{KEY_B}", None, "set PAYLOAD_KEY_ID"),
        (f"k1:{KEY_A}", "k9", "names no configured key"),
    ],
)
def test_bad_key_configuration_is_one_line_without_key_material(
    spec: str, current: str | None, problem: str
) -> None:
    """Each misconfiguration fails with one line naming the problem and never the key."""
    with pytest.raises(ConfigError) as info:
        KeyRing.parse(spec, current)
    message = str(info.value)
    assert problem in message
    assert "\n" not in message
    assert KEY_A not in message and KEY_B not in message


def test_keyring_repr_shows_ids_only() -> None:
    """A key ring in a log line or traceback shows its key ids, never key bytes."""
    ring = KeyRing.parse(f"k1:{KEY_A}")
    assert "k1" in repr(ring)
    assert KEY_A not in repr(ring)
    assert repr(base64.b64decode(KEY_A)) not in repr(ring)


def test_no_keys_means_the_plain_converter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PAYLOAD_KEYS the converter is the plain pydantic one (no codec)."""
    for name in ("PAYLOAD_KEYS", "PAYLOAD_KEYS_FILE", "PAYLOAD_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert keyring_from_settings(settings) is None
    assert data_converter(settings) is DATA_CONVERTER
    assert DATA_CONVERTER.payload_codec is None


def test_key_id_without_keys_is_refused() -> None:
    """PAYLOAD_KEY_ID alone is a mistake (encryption silently off), so it is an error."""
    with pytest.raises(ConfigError, match="no keys are"):
        keyring_from_settings(Settings(payload_key_id="k1"))


async def test_configured_converter_encrypts_values_and_failure_messages(tmp_path: Path) -> None:
    """With keys (here from PAYLOAD_KEYS_FILE) the converter encrypts pydantic values and, via
    the encoded-attributes failure converter, failure messages too; it decodes both back."""
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# rotated 2026-11\nk1:{KEY_A}\nk2:{KEY_B}\n")
    converter = data_converter(Settings(payload_keys_file=keys_file, payload_key_id="k2"))
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.failure_converter_class is DefaultFailureConverterWithEncodedAttributes
    request = PipelineRequest(request_id="a" * 24, user_message=CANARY)

    [payload] = await converter.encode([request])
    assert CANARY.encode() not in payload.SerializeToString()
    assert await converter.decode([payload], [PipelineRequest]) == [request]

    failure = Failure()
    await converter.encode_failure(ApplicationError(f"bad input {CANARY}"), failure)
    assert CANARY.encode() not in failure.SerializeToString()
    assert failure.message == "Encoded failure"
    decoded = await converter.decode_failure(failure)
    assert CANARY in str(decoded)


def test_converter_keeps_the_pydantic_payload_converter() -> None:
    """Encryption wraps the project's pydantic converter rather than replacing it."""
    converter = dataclasses.replace(DATA_CONVERTER)
    encrypted = data_converter(Settings(payload_keys=f"k1:{KEY_A}"))
    assert encrypted.payload_converter_class is converter.payload_converter_class


def test_payload_converters_share_one_type_adapter_cache() -> None:
    """Every payload converter the SDK builds (one per run and activation) uses the same JSON
    converter, so a model's type adapter is built once per process, not once per run; the
    bytes are those of temporalio's own pydantic converter."""
    first = DATA_CONVERTER.payload_converter_class()
    second = DATA_CONVERTER.payload_converter_class()
    assert isinstance(first, CompositePayloadConverter)
    assert isinstance(second, CompositePayloadConverter)
    assert first.converters[b"json/plain"] is second.converters[b"json/plain"]

    request = PipelineRequest(request_id="a" * 24, user_message=CANARY)
    [ours] = first.to_payloads([request])
    [temporalios] = pydantic_data_converter.payload_converter.to_payloads([request])
    assert ours == temporalios
    assert second.from_payloads([ours], [PipelineRequest]) == [request]
