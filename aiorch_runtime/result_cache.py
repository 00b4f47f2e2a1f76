"""The result cache: model replies kept for identical calls, per tenant, in the capacity store's
Redis (docs/cost.md).

Opt-in (``LLM_RESULT_CACHE_TTL_S``): the LLM activity looks a call up by the digest of
everything that decides its reply (model, messages, parameters, pipeline and step version) and,
on a hit, answers without calling the provider; a call that succeeded is kept for the TTL. It is
consulted inside the activity, so what a run does never depends on it on replay: the reply, a
hit's included, is the activity's result in the run's history.

A reply is kept under its tenant's name (``aiorch:rc:TENANT:DIGEST``): one tenant's call never
answers another's, even for the same prompt. Tenant names match ``TENANT_PATTERN`` (checked
again here: no ``:``), so no name can spell another tenant's key. A store that cannot be
reached is a miss (the call is made), and a reply that cannot be kept is not kept: the cache
never stops a run.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Final

import redis.asyncio as redis
from redis.exceptions import RedisError

from workflows.payloads import TENANT_PATTERN, LlmCallResult

log = logging.getLogger(__name__)

KEY_PREFIX: Final = "aiorch:rc"


def cache_key(tenant: str, digest: str) -> str:
    """The key of a tenant's reply to the call whose digest is ``digest``.

    Raises:
        ValueError: ``tenant`` is not a tenant name (``TENANT_PATTERN``).
    """
    if not re.fullmatch(TENANT_PATTERN, tenant):
        raise ValueError(f"{tenant[:70]!r} is not a tenant name")
    return f"{KEY_PREFIX}:{tenant}:{digest}"


class ResultCache:
    """Replies by tenant and call digest, each kept ``ttl`` (see the module docstring)."""

    def __init__(self, client: redis.Redis, *, ttl: timedelta) -> None:
        self._redis = client
        self._ttl = ttl

    async def get(self, tenant: str, digest: str) -> LlmCallResult | None:
        """The reply kept for ``tenant``'s call ``digest``, or None (a miss, or no store)."""
        try:
            raw = await self._redis.get(cache_key(tenant, digest))
        except (RedisError, OSError) as err:
            log.warning("result cache: %s: %s; the call is made", type(err).__name__, err)
            return None
        if raw is None:
            return None
        try:
            return LlmCallResult.model_validate_json(raw)
        except ValueError:
            return None

    async def put(self, tenant: str, digest: str, reply: LlmCallResult) -> None:
        """Keep ``reply`` for ``tenant``'s call ``digest`` (best effort)."""
        try:
            await self._redis.set(cache_key(tenant, digest), reply.model_dump_json(), ex=self._ttl)
        except (RedisError, OSError) as err:
            log.warning("result cache: %s: %s; the reply is not kept", type(err).__name__, err)
