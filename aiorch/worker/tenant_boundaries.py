"""Settings that are safe only when tenants are authenticated, checked when a worker starts.

Without ``REQUESTER_PUBLIC_KEYS`` a request's tenant is whatever the request says. The result
cache keeps replies per tenant (``aiorch:rc:TENANT:DIGEST``), so a client that names another
tenant would be answered with that tenant's replies, and a hit or a miss would tell it whether
that tenant asked exactly this. The cache is therefore refused unless tenants are the keys'.
"""

from __future__ import annotations

from aiorch_runtime.config import Settings
from aiorch_runtime.errors import ConfigError


def check_result_cache(settings: Settings) -> None:
    """The result cache is on only where a run's tenant is authenticated.

    Raises:
        ConfigError: ``LLM_RESULT_CACHE_TTL_S`` is set without ``REQUESTER_PUBLIC_KEYS`` (one
            line saying what to do).
    """
    if settings.result_cache_on and not settings.requester_keys():
        raise ConfigError(
            "LLM_RESULT_CACHE_TTL_S keeps model replies per tenant, and without "
            "REQUESTER_PUBLIC_KEYS a request names any tenant it likes (and would read that "
            "tenant's replies): set REQUESTER_PUBLIC_KEYS (or _FILE) to authenticate tenants, "
            "or unset LLM_RESULT_CACHE_TTL_S"
        )
