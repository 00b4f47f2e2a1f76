"""The batch lane's activities as a group's workflow runs them, for the activity tests of the
lane: the group's calls queued in the real `BatchStore` as `BatchLane.enqueue` queues them, and
``submit_batch``, ``collect_batch`` and ``await_batch`` run in Temporal's activity environment,
against the LLM simulator.

A group is opened with no owner token, so ``check_group`` accepts its workflow id alone (the
path of groups opened before tokens existed) and needs no Temporal server. The call queued
``n``-th is run ``run-n``'s."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, cast

import aiohttp
import redis.asyncio as redis
from openai import AsyncOpenAI
from temporalio.client import Client
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from activities.batch import BatchActivities
from activities.batch_calls import METRIC_BATCH_CALLS, hold_text, item_name
from activities.batch_groups import group_workflow_id
from activities.capacity import CallGate
from activities.heartbeat import HEARTBEAT_EVERY
from activities.input_loader import InputLoader
from activities.llm import LlmActivities
from activities.llm_request import CacheScope
from activities.spend import SpendHold, today
from aiorch_runtime.batch_store import BatchStore
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.capacity_keys import scope_name
from aiorch_runtime.config import DEFAULT_PRICE_TABLE
from aiorch_runtime.genai import GenAiTelemetry
from aiorch_runtime.result_cache import ResultCache
from tests.activities.llm_calls import call
from workflows.payloads import BatchRound, LlmCallInput, LlmCallResult

MODEL = "sim-large"
ITEM_TTL = timedelta(days=1)
QUEUE = timedelta(hours=1)


def asked(n: int, *, directive: str = "") -> list[LlmCallInput]:
    """``n`` batch-lane calls, each ending in ``directive`` (a ``[sim:...]`` fault)."""
    return [call(f"Batched question {number} {directive}", lane="batch") for number in range(n)]


class Lane:
    """``submit_batch``, ``collect_batch`` and ``await_batch`` of one group, as its workflow
    and its runs call them, with the store's view of its calls and the batch calls metric
    the activities recorded."""

    def __init__(
        self,
        client: AsyncOpenAI,
        store: BatchStore,
        group: int = 0,
        *,
        results: ResultCache | None = None,
        telemetry: GenAiTelemetry | None = None,
        gate: CallGate | None = None,
        heartbeat_every: timedelta = HEARTBEAT_EVERY,
        temporal: Client | None = None,
        cache_scope: CacheScope = "off",
    ) -> None:
        llm = LlmActivities(
            client,
            InputLoader(),
            timeout_s=10,
            prices=DEFAULT_PRICE_TABLE,
            cache_scope=cache_scope,
        )
        self.activities = BatchActivities(
            llm,
            client,
            # Tells waiting runs their outcomes: none waits without a Temporal client.
            cast(Client, temporal),
            store,
            base_url=str(client.base_url),
            prices=DEFAULT_PRICE_TABLE,
            results=results,
            telemetry=telemetry,
            gate=gate,
            heartbeat_every=heartbeat_every,
        )
        self.store = store
        self.scope = scope_name(str(client.base_url), MODEL)
        self.group = group
        self.metrics = MetricBuffer(1000)
        self._runtime = Runtime(telemetry=TelemetryConfig(metrics=self.metrics))

    async def open_group(
        self,
        calls: list[LlmCallInput],
        *,
        cache: str = "",
        queue: timedelta = QUEUE,
        holds: list[SpendHold] | None = None,
        pipeline: str = "",
    ) -> None:
        """Queue ``calls`` as their runs' ``invoke_llm`` does (`BatchLane.enqueue`), into one
        group opened with no owner token; each run (of ``pipeline``) waits ``queue`` for its
        submission, ``cache`` names each call's reply in the result cache, and ``holds`` are
        the calls' spend reservations (none without)."""
        groups = set()
        for number, queued in enumerate(calls):
            enqueued = await self.store.enqueue(
                self.scope,
                item_name(queued),
                call=queued.model_dump_json(),
                token=b"",
                pipeline=pipeline,
                spend=hold_text(holds[number] if holds else None),
                cache=f"{cache}{number}" if cache else "",
                size=len(calls),
                queue=queue,
                owner="",
                run=f"run-{number}",
            )
            groups.add(enqueued.group)
        [self.group] = groups

    async def results(self, calls: list[LlmCallInput]) -> dict[str, LlmCallResult | None]:
        """Each call's result as the store keeps it (None: not answered yet)."""
        kept = await self.store.calls(self.scope, [item_name(c) for c in calls])
        assert len(kept) == len(calls), "the store lost a call"
        return {
            c.item: LlmCallResult.model_validate_json(c.result) if c.result is not None else None
            for c in kept
        }

    def env(self, attempt: int = 1, workflow_id: str | None = None) -> ActivityEnvironment:
        """An activity environment of the group's workflow (or of run ``workflow_id``)."""
        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            env.info,
            workflow_id=workflow_id or group_workflow_id(self.scope, self.group),
            attempt=attempt,
        )
        env.metric_meter = self._runtime.metric_meter
        return env

    def round(self, number: int, **fields: Any) -> BatchRound:
        return BatchRound(scope=self.scope, model=MODEL, group=self.group, round=number, **fields)

    def counted(self, metric: str = METRIC_BATCH_CALLS, by: str = "outcome") -> dict[str, int]:
        """What the activities counted in ``metric`` since the last look, by the label ``by``
        (the batch calls by outcome, unless told; all of this lane's model)."""
        counts: dict[str, int] = {}
        for update in self.metrics.retrieve_updates():
            if update.metric.name == metric:
                label = str(update.attributes[by])
                assert update.attributes["model"] == MODEL, update.attributes
                counts[label] = counts.get(label, 0) + int(update.value)
        return counts


def spend_gate(client: redis.Redis, base_url: str) -> tuple[CapacityStore, CallGate]:
    """A gate that settles tenants' spend in the store (no rate limits, no budgets), and the
    store, to make reservations and read what was spent."""
    capacity = CapacityStore(client, lease=timedelta(minutes=5))
    gate = CallGate(
        capacity,
        base_url=base_url,
        rate_limits={},
        prices=DEFAULT_PRICE_TABLE,
        tenant_budget=lambda _: None,
        max_output_tokens=1000,
    )
    return capacity, gate


async def reserved(capacity: CapacityStore, tenant: str, *names: str) -> list[SpendHold]:
    """Spend reservations of $0.5 each for ``tenant`` today, one per name."""
    holds = [SpendHold(tenant, today(), name) for name in names]
    for hold in holds:
        answer = await capacity.reserve_spend(
            tenant, hold.day, budget_usd=10.0, worst_usd=0.5, reservation=hold.reservation
        )
        assert answer.verdict == "reserved"
    return holds


async def sim_batches(http: aiohttp.ClientSession) -> list[dict[str, Any]]:
    async with http.get("/_sim/batches") as got:
        batches: list[dict[str, Any]] = (await got.json())["batches"]
    return batches


async def answered_lines(http: aiohttp.ClientSession) -> list[str]:
    """The custom ids of the batch lines the simulator answered, in order."""
    async with http.get("/_sim/requests") as got:
        return [entry["custom_id"] for entry in await got.json() if entry["custom_id"]]
