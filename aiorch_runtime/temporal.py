"""The project's Temporal wiring in one import: connect, plugin, converter, search attributes.

Callers import from here; the parts live in modules of their own:

- `aiorch_runtime.connection`: `connect` (envconfig settings, one typed error) and
  `ensure_search_attributes`;
- `aiorch_runtime.plugin`: `AiOrchestratorPlugin`, for clients, workers and replayers alike;
- `aiorch_runtime.converter`: the data converter the plugin installs, whose failure converter
  (`aiorch_runtime.failures`) keeps every activity failure inside the server's size limit;
- `aiorch_runtime.errors`: `TemporalUnreachable`.
"""

from __future__ import annotations

from aiorch_runtime.connection import (
    SEARCH_ATTRIBUTES,
    connect,
    connect_options,
    describe_target,
    ensure_search_attributes,
)
from aiorch_runtime.converter import DATA_CONVERTER, data_converter, encrypted_converter
from aiorch_runtime.errors import TemporalUnreachable
from aiorch_runtime.plugin import AiOrchestratorPlugin

__all__ = [
    "DATA_CONVERTER",
    "SEARCH_ATTRIBUTES",
    "AiOrchestratorPlugin",
    "TemporalUnreachable",
    "connect",
    "connect_options",
    "data_converter",
    "describe_target",
    "encrypted_converter",
    "ensure_search_attributes",
]
