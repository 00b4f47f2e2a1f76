"""Connecting to Temporal the same way everywhere: client, worker, tests and replayer all use
``data_converter(settings)`` (the pydantic converter, plus payload encryption when keys are
configured), and the worker registers the search attributes it needs.

The payload converter also reads the two encodings no value is ever written as: the codec's
marker for a payload it refused (``binary/undecodable``) and an encrypted payload in a process
without keys (``binary/encrypted``). Both raise ``aiorch.runtime.codec.PayloadUnreadable`` with
one line saying why, instead of the SDK's ``KeyError: 'Unknown payload encoding ...'``: the
workflow turns it into an invalid request, the CLI prints it as its one error line."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)
from temporalio.runtime import Runtime
from temporalio.service import RPCError

from aiorch.runtime.codec import (
    ENCODING,
    METADATA_REASON,
    UNDECODABLE,
    EncryptionCodec,
    KeyRing,
    PayloadUnreadable,
    keyring_from_settings,
)
from aiorch.runtime.config import Settings
from aiorch.runtime.telemetry import client_plugins
from workflows import contract

log = logging.getLogger(__name__)

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


class UndecodablePayloadConverter(EncodingPayloadConverter):
    """Reads the codec's marker for a refused payload: raises ``PayloadUnreadable`` with the
    codec's reason. Never writes (``to_payload`` declines every value)."""

    @property
    def encoding(self) -> str:
        return UNDECODABLE.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raw = payload.metadata.get(METADATA_REASON, b"").decode("ascii", "replace")
        reason = "".join(c if c.isprintable() else "?" for c in raw[:_MAX_REASON_CHARS])
        raise PayloadUnreadable(f"payload refused: {reason or 'no reason given'}")


class EncryptedPayloadConverter(EncodingPayloadConverter):
    """Reads an encrypted payload in a process without keys (a codec would have opened it or
    left a marker): raises ``PayloadUnreadable`` saying which keys to set. Never writes."""

    @property
    def encoding(self) -> str:
        return ENCODING.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None

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


DATA_CONVERTER = DataConverter(payload_converter_class=SharedCachePydanticPayloadConverter)


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
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


SEARCH_ATTRIBUTES = {
    contract.SEARCH_ATTRIBUTE_STATE: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    contract.SEARCH_ATTRIBUTE_STATE_SINCE: IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
    contract.SEARCH_ATTRIBUTE_REVIEW_ROUND: IndexedValueType.INDEXED_VALUE_TYPE_INT,
}


async def connect(settings: Settings, *, runtime: Runtime | None = None) -> Client:
    """A client for the configured server and namespace.

    With tracing installed (`aiorch.runtime.telemetry.tracing`) the client carries Temporal's
    OpenTelemetry plugin, and so does every worker built on it. ``runtime`` is the worker's
    metrics runtime (`aiorch.runtime.telemetry.worker_runtime`); None means the SDK's default.
    """
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=data_converter(settings),
        plugins=client_plugins(),
        runtime=runtime,
    )


async def ensure_search_attributes(client: Client) -> list[str]:
    """Register the project's search attributes where missing; returns the names added.

    Servers that refuse (Temporal Cloud without the permission, for example) are logged, not
    fatal: the operator can register them by hand, and the log says how.
    """
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    missing = {
        name: kind
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name not in existing.custom_attributes
    }
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    except RPCError as err:
        log.warning(
            "could not register search attributes %s (%s); register them with "
            "`temporal operator search-attribute create --name AiState --type Keyword`",
            ", ".join(missing),
            err.message,
        )
        return []
    return sorted(missing)
