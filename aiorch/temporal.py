"""Connecting to Temporal the same way everywhere: client, worker, tests and replayer all use
the pydantic data converter, and the worker registers the search attributes it needs."""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.service import RPCError

from aiorch.config import Settings
from workflows import contract

log = logging.getLogger(__name__)

DATA_CONVERTER: DataConverter = pydantic_data_converter

SEARCH_ATTRIBUTES = {
    contract.SEARCH_ATTRIBUTE_STATE: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    contract.SEARCH_ATTRIBUTE_STATE_SINCE: IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
}


async def connect(settings: Settings) -> Client:
    """A client for the configured server and namespace."""
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=DATA_CONVERTER,
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
