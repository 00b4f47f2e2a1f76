"""The data converter every client, worker and replayer of a deployment shares:
``data_converter(settings)`` is the pydantic converter, plus payload encryption when keys are
configured; its failure converter bounds every failure an activity raises, so that the server
keeps it whole (``aiorch_runtime.failures``). ``aiorch_runtime.plugin.AiOrchestratorPlugin``
installs it; nothing else should.

The payload converter also reads the two encodings no value is ever written as: the codec's
marker for a payload it refused (``binary/undecodable``) and an encrypted payload in a process
without keys (``binary/encrypted``). Both raise ``aiorch_runtime.codec.PayloadUnreadable`` with
one line saying why, instead of the SDK's ``KeyError: 'Unknown payload encoding ...'``: the
workflow turns it into an invalid request, the CLI prints it as its one error line."""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)

from aiorch_runtime.codec import (
    ENCODING,
    METADATA_REASON,
    UNDECODABLE,
    EncryptionCodec,
    KeyRing,
    PayloadUnreadable,
    keyring_from_settings,
)
from aiorch_runtime.config import Settings
from aiorch_runtime.failures import ActivityFailureConverter, EncodedActivityFailureConverter

# One JSON converter, and so one pydantic type-adapter cache, for the whole process. The SDK
# builds a payload converter for every workflow run and activation; with temporalio's
# PydanticPayloadConverter each starts with an empty cache, so every run rebuilt the adapters
# of its payload models (0.5 ms of worker CPU per run). Converters are stateless apart from
# that cache, which is thread-safe and bounded.
_JSON_CONVERTER = PydanticJSONPlainPayloadConverter(max_cached_type_adapters=256)

ENCRYPTED_WITHOUT_KEYS = (
    "this payload is encrypted (binary/encrypted): set PAYLOAD_KEYS (or PAYLOAD_KEYS_FILE) to "
    "the deployment's keys, or use the codec server"
)
# A marker's reason comes from this project's codec, but a client can send a payload that
# merely claims to be one: show a bounded, printable reason only.
_MAX_REASON_CHARS = 300


class _ReadOnlyPayloadConverter(EncodingPayloadConverter):
    """An encoding no value is ever written as (``to_payload`` declines every value), only
    read, to raise ``PayloadUnreadable``; a subclass names it (``_ENCODING``) and says why."""

    _ENCODING: bytes

    @property
    def encoding(self) -> str:
        return self._ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None


class UndecodablePayloadConverter(_ReadOnlyPayloadConverter):
    """Reads the codec's marker for a refused payload: raises ``PayloadUnreadable`` with the
    codec's reason. Never writes."""

    _ENCODING = UNDECODABLE

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raw = payload.metadata.get(METADATA_REASON, b"").decode("ascii", "replace")
        reason = "".join(c if c.isprintable() else "?" for c in raw[:_MAX_REASON_CHARS])
        raise PayloadUnreadable(f"payload refused: {reason or 'no reason given'}")


class EncryptedPayloadConverter(_ReadOnlyPayloadConverter):
    """Reads an encrypted payload in a process without keys (a codec would have opened it or
    left a marker): raises ``PayloadUnreadable`` saying which keys to set. Never writes."""

    _ENCODING = ENCODING

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raise PayloadUnreadable(ENCRYPTED_WITHOUT_KEYS)


_ENCODING_CONVERTERS = (
    *(
        _JSON_CONVERTER if isinstance(converter, JSONPlainPayloadConverter) else converter
        for converter in DefaultPayloadConverter.default_encoding_payload_converters
    ),
    # Last: they decline every value, so writing tries them only after every real encoding.
    UndecodablePayloadConverter(),
    EncryptedPayloadConverter(),
)


class SharedCachePydanticPayloadConverter(CompositePayloadConverter):
    """temporalio's pydantic payload converter (same encodings, same bytes), sharing one
    type-adapter cache across runs, plus the two encodings that only ever raise
    ``PayloadUnreadable`` (a refused payload, an encrypted one without keys)."""

    def __init__(self) -> None:
        super().__init__(*_ENCODING_CONVERTERS)


DATA_CONVERTER = DataConverter(
    payload_converter_class=SharedCachePydanticPayloadConverter,
    failure_converter_class=ActivityFailureConverter,
)


def data_converter(settings: Settings) -> DataConverter:
    """The converter every client, worker and replayer of this deployment must share.

    Without configured keys it is the plain pydantic converter (payloads readable by anyone with
    namespace access). With ``PAYLOAD_KEYS`` it adds the AES-GCM codec, which binds each payload
    to its run, and encodes failure messages and stack traces too, so errors cannot leak
    content; with ``REQUIRE_ENCRYPTION=true`` as well, plaintext payloads are refused on decode.

    Raises:
        ConfigError: keys are configured but unusable.
    """
    keyring = keyring_from_settings(settings)
    if keyring is None:
        return DATA_CONVERTER
    return encrypted_converter(keyring, require_encryption=settings.require_encryption)


def encrypted_converter(keyring: KeyRing, *, require_encryption: bool = False) -> DataConverter:
    """The pydantic converter with payload encryption and encoded failure attributes.

    Args:
        keyring: the deployment's keys.
        require_encryption: refuse payloads that are not encrypted (``REQUIRE_ENCRYPTION``).
    """
    return dataclasses.replace(
        DATA_CONVERTER,
        payload_codec=EncryptionCodec(keyring, require_encryption=require_encryption),
        failure_converter_class=EncodedActivityFailureConverter,
    )
