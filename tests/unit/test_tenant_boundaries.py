"""The settings a worker refuses at start because they hold only with authenticated tenants
(`aiorch.worker.tenant_boundaries`)."""

from __future__ import annotations

import pytest

from aiorch.ops.signing import SigningKey
from aiorch.worker.tenant_boundaries import check_result_cache
from aiorch_runtime.config import ConfigError, load_settings

STORE = "redis://127.0.0.1:6379/0"


def test_the_result_cache_is_refused_without_requester_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the result cache on and no REQUESTER_PUBLIC_KEYS the worker refuses in one line
    naming both settings; with keys, or with the cache off, it starts."""
    monkeypatch.setenv("CAPACITY_STORE_URL", STORE)
    monkeypatch.delenv("REQUESTER_PUBLIC_KEYS", raising=False)
    monkeypatch.delenv("REQUESTER_PUBLIC_KEYS_FILE", raising=False)
    check_result_cache(load_settings())
    monkeypatch.setenv("LLM_RESULT_CACHE_TTL_S", "60")
    with pytest.raises(ConfigError) as refused:
        check_result_cache(load_settings())
    message = str(refused.value)
    assert "\n" not in message
    assert "LLM_RESULT_CACHE_TTL_S" in message and "REQUESTER_PUBLIC_KEYS" in message
    monkeypatch.setenv("REQUESTER_PUBLIC_KEYS", SigningKey.generate("ann").requester_entry("acme"))
    check_result_cache(load_settings())
