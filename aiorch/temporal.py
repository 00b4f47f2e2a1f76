"""Connecting to Temporal the same way everywhere: client, worker, tests and replayer all use
``data_converter(settings)`` (the pydantic converter, plus payload encryption when keys are
configured), and the worker registers the search attributes it needs."""

from __future__ import annotations

import dataclasses
import logging

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
    JSONPlainPayloadConverter,
)
from temporalio.runtime import Runtime
from temporalio.service import RPCError

from aiorch.codec import EncryptionCodec, KeyRing, keyring_from_settings
from aiorch.config import Settings
from aiorch.telemetry import client_plugins
from workflows import contract

log = logging.getLogger(__name__)

# One JSON converter, and so one pydantic type-adapter cache, for the whole process. The SDK
# builds a payload converter for every workflow run and activation; with temporalio's
# PydanticPayloadConverter each starts with an empty cache, so every run rebuilt the adapters
# of its payload models (0.5 ms of worker CPU per run). Converters are stateless apart from
# that cache, which is thread-safe and bounded.
_JSON_CONVERTER = PydanticJSONPlainPayloadConverter(max_cached_type_adapters=256)
_ENCODING_CONVERTERS = tuple(
    _JSON_CONVERTER if isinstance(converter, JSONPlainPayloadConverter) else converter
    for converter in DefaultPayloadConverter.default_encoding_payload_converters
)


class SharedCachePydanticPayloadConverter(CompositePayloadConverter):
    """temporalio's pydantic payload converter (same encodings, same bytes), sharing one
    type-adapter cache across runs."""

    def __init__(self) -> None:
        super().__init__(*_ENCODING_CONVERTERS)


DATA_CONVERTER = DataConverter(payload_converter_class=SharedCachePydanticPayloadConverter)


def data_converter(settings: Settings) -> DataConverter:
    """The converter every client, worker and replayer of this deployment must share.

    Without configured keys it is the plain pydantic converter (payloads readable by anyone with
    namespace access). With ``PAYLOAD_KEYS`` it adds the AES-GCM codec and encodes failure
    messages and stack traces too, so errors cannot leak content.

    Raises:
        ConfigError: keys are configured but unusable.
    """
    keyring = keyring_from_settings(settings)
    return DATA_CONVERTER if keyring is None else encrypted_converter(keyring)


def encrypted_converter(keyring: KeyRing) -> DataConverter:
    """The pydantic converter with payload encryption and encoded failure attributes."""
    return dataclasses.replace(
        DATA_CONVERTER,
        payload_codec=EncryptionCodec(keyring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


SEARCH_ATTRIBUTES = {
    contract.SEARCH_ATTRIBUTE_STATE: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    contract.SEARCH_ATTRIBUTE_STATE_SINCE: IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
}


async def connect(settings: Settings, *, runtime: Runtime | None = None) -> Client:
    """A client for the configured server and namespace.

    With tracing installed (`aiorch.telemetry.tracing`) the client carries Temporal's
    OpenTelemetry plugin, and so does every worker built on it. ``runtime`` is the worker's
    metrics runtime (`aiorch.telemetry.worker_runtime`); None means the SDK's default.
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
