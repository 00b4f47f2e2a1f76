"""What the batch lane's submission and collection share: the clients the worker injects, and
handing a call's outcome to its run (its spend settled once, its waiting activity completed by
its task token)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from datetime import timedelta
from typing import Any, Final

from openai import AsyncOpenAI
from temporalio.client import Client
from temporalio.service import RPCError

from activities.batch_calls import hold_of, unavailable
from activities.capacity import CallGate
from activities.heartbeat import HEARTBEAT_EVERY
from activities.llm import LlmActivities
from aiorch_runtime.batch_store import BatchStore, QueuedCall
from aiorch_runtime.capacity import CapacityStoreError
from aiorch_runtime.config import PriceTable
from aiorch_runtime.genai import GenAiTelemetry
from aiorch_runtime.result_cache import ResultCache
from workflows.payloads import LlmCallInput, LlmCallResult

# The batch lane logs under the name it had as one module, so log filters keep matching.
log = logging.getLogger("activities.batch")

# Runs told at once (each an RPC to Temporal).
COMPLETIONS_AT_ONCE: Final = 64


class BatchHandoff:
    """The provider's client, Temporal's, the store and the LLM activity's pricing, metrics and
    request building, injected by the worker; and handing outcomes to the runs."""

    def __init__(
        self,
        llm: LlmActivities,
        client: AsyncOpenAI,
        temporal: Client,
        store: BatchStore,
        *,
        base_url: str,
        gate: CallGate | None = None,
        telemetry: GenAiTelemetry | None = None,
        results: ResultCache | None = None,
        prices: PriceTable | None = None,
        heartbeat_every: timedelta = HEARTBEAT_EVERY,
    ) -> None:
        self._llm = llm
        self._client = client
        self._temporal = temporal
        self._store = store
        self._base_url = base_url
        self._gate = gate
        self._telemetry = telemetry or GenAiTelemetry(base_url)
        self._results = results
        self._prices: PriceTable = prices or {}
        self._heartbeat_every = heartbeat_every

    async def _settle(self, queued: QueuedCall, call: LlmCallInput, cost: float | None) -> bool:
        """Settle a call's spend reservation with its cost, once per call; whether counted."""
        if self._gate is None:
            return True
        return await self._gate.settle_spend(hold_of(queued.spend), call, cost)

    async def _complete_all(
        self, outcomes: Iterable[tuple[bytes, LlmCallResult]], activity_name: str
    ) -> None:
        gate = asyncio.Semaphore(COMPLETIONS_AT_ONCE)

        async def one(token: bytes, outcome: LlmCallResult) -> None:
            async with gate:
                await self._complete(token, outcome, activity_name)

        await asyncio.gather(*(one(token, outcome) for token, outcome in outcomes))

    async def _complete(self, token: bytes, outcome: LlmCallResult, activity_name: str) -> bool:
        """Complete a waiting run's activity; False when it no longer waits (its run was
        cancelled, or retried once the activity timed out)."""
        try:
            await self._temporal.get_async_activity_handle(task_token=token).complete(outcome)
        except RPCError as err:
            log.info("%s no longer waits (%s): its outcome is left unused", activity_name, err)
            return False
        return True

    async def _stored(self, pending: Awaitable[Any]) -> Any:
        try:
            return await pending
        except CapacityStoreError as err:
            raise unavailable(f"the batch lane's store cannot be reached ({err})") from None
