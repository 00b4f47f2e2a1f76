"""Where an experiment's halts and promotion live: the capacity store's Redis, which every
worker already reaches and reads in about a millisecond, so a halt reaches the next run any
worker plans (the ledger is the operator's tools' database; workers need not reach it).

One hash per experiment (``aiorch:exp:ID``): a field ``halted:VARIANT`` per halted variant,
holding when, why and by whom (`Halt`), and ``promoted`` naming the variant every run gets.
Experiment ids and variant names match ``VARIANT_NAME_PATTERN`` (no ``:``), so no name can
spell another experiment's key or field.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

import redis.asyncio as redis
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from workflows.payloads import VARIANT_NAME_PATTERN

KEY_PREFIX: Final = "aiorch:exp"
_HALTED: Final = "halted:"
_PROMOTED: Final = "promoted"


class HaltStoreError(Exception):
    """The store could not be reached or refused."""


class Halt(BaseModel):
    """A halted variant: when, why and by whom (``watcher`` or an operator's name)."""

    model_config = ConfigDict(frozen=True)

    at: datetime
    reason: str = Field(max_length=2000)
    by: str = Field(max_length=200)


class ExperimentState(BaseModel):
    """What operators and the watcher changed about an experiment: its halted variants (by
    name) and its promoted variant (None: the configured weights decide)."""

    model_config = ConfigDict(frozen=True)

    halted: dict[str, Halt] = Field(default_factory=dict)
    promoted: str | None = None


def state_key(experiment: str) -> str:
    """The hash of ``experiment``'s state.

    Raises:
        ValueError: ``experiment`` is not an experiment id.
    """
    if not re.fullmatch(VARIANT_NAME_PATTERN, experiment):
        raise ValueError(f"{experiment[:70]!r} is not an experiment id")
    return f"{KEY_PREFIX}:{experiment}"


class HaltStore:
    """Halts and promotions by experiment; every method raises `HaltStoreError` when Redis
    cannot be reached or refuses."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    async def state(self, experiment: str) -> ExperimentState:
        """The experiment's halts and promotion."""
        fields = await self._call(self._redis.hgetall(state_key(experiment)))
        halted: dict[str, Halt] = {}
        promoted: str | None = None
        for raw_field, raw_value in fields.items():
            field, value = _text(raw_field), _text(raw_value)
            if field == _PROMOTED:
                promoted = value
            elif field.startswith(_HALTED):
                halted[field.removeprefix(_HALTED)] = Halt.model_validate_json(value)
        return ExperimentState(halted=halted, promoted=promoted)

    async def halt(self, experiment: str, variant: str, halt: Halt) -> bool:
        """Halt ``variant``; False when it was halted already (its first halt is kept). A
        halted promoted variant is no longer promoted."""
        key = state_key(experiment)
        _check_name(variant)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, _HALTED + variant, halt.model_dump_json())
            pipe.hget(key, _PROMOTED)
            added, promoted = await self._call(pipe.execute())
        if promoted is not None and _text(promoted) == variant:
            await self._call(self._redis.hdel(key, _PROMOTED))
        return bool(added)

    async def promote(self, experiment: str, variant: str) -> None:
        """Give every new run ``variant`` (its halt, if any, is lifted)."""
        key = state_key(experiment)
        _check_name(variant)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(key, _HALTED + variant)
            pipe.hset(key, _PROMOTED, variant)
            await self._call(pipe.execute())

    async def resume(self, experiment: str, variant: str | None = None) -> None:
        """Lift ``variant``'s halt; without a variant, every halt and the promotion (the
        configured weights decide again)."""
        key = state_key(experiment)
        if variant is None:
            await self._call(self._redis.delete(key))
            return
        _check_name(variant)
        await self._call(self._redis.hdel(key, _HALTED + variant))

    async def _call(self, pending: Any) -> Any:
        try:
            return await pending
        except (RedisError, OSError) as err:
            raise HaltStoreError(f"experiments store: {type(err).__name__}: {err}") from None


def _check_name(variant: str) -> None:
    if not re.fullmatch(VARIANT_NAME_PATTERN, variant):
        raise ValueError(f"{variant[:70]!r} is not a variant name")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
