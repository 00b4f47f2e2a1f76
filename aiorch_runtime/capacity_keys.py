"""The capacity store's key names (``aiorch_runtime.capacity``).

Every key of a tenant's day sits under ``aiorch:spend:{DAY:t:TENANT}`` (its own Redis Cluster
hash slot), the day's list of tenants is ``aiorch:spend:{DAY}:tenants``, and a scope's keys are
under ``aiorch:cap:{ENDPOINT:MODEL}``: no tenant name can spell another key.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date
from typing import Final

from workflows.payloads import TENANT_PATTERN

KEY_PREFIX: Final = "aiorch"


def scope_name(base_url: str, model: str) -> str:
    """The store's name for a model at an endpoint: the same on every worker configured alike,
    different for the same model name at two providers."""
    endpoint = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:12]
    return f"{endpoint}:{model}"


def scope_keys(scope: str) -> list[str]:
    """The keys of a scope (its buckets, holds, queue and the tenants' fair-share tags), in the
    order the scripts take them."""
    # One hash tag, so every key of a scope lives in one Redis Cluster slot.
    base = f"{KEY_PREFIX}:cap:{{{scope}}}"
    return [f"{base}:{name}" for name in ("b", "h", "hx", "q", "qd", "qx", "qt", "qm", "qf")]


def usage_key(scope: str, day: date) -> str:
    """The key of the tokens each tenant used in a scope on a (UTC) day (tenant -> tokens), in
    the scope's Redis Cluster slot."""
    return f"{KEY_PREFIX}:cap:{{{scope}}}:used:{day.isoformat()}"


def spend_keys(tenant: str, day: date) -> list[str]:
    """The keys of a tenant's spend on a (UTC) day: spent, reservations, their expiries, what
    expired ones were charged, and the calls settled; one hash tag, so one Redis Cluster slot.

    Raises:
        ValueError: ``tenant`` is not a tenant name (``TENANT_PATTERN``).
    """
    if not re.fullmatch(TENANT_PATTERN, tenant):
        raise ValueError(f"{tenant[:70]!r} is not a tenant name")
    base = f"{KEY_PREFIX}:spend:{{{day.isoformat()}:t:{tenant}}}"
    return [f"{base}:usd", f"{base}:res", f"{base}:resx", f"{base}:chg", f"{base}:calls"]


def tenants_key(day: date) -> str:
    """The key of the set of tenants that reserved or spent on a (UTC) day."""
    return f"{KEY_PREFIX}:spend:{{{day.isoformat()}}}:tenants"
