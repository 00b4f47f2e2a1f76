"""What a run costs in dollars: its model calls and its Temporal actions (issue 27).

The model's share comes from the simulator's token counts (its request log: each answered call's
``usage``, cached prompt tokens included) priced with the worker's price table
(``LLM_PRICE_TABLE``): prompt tokens at the prompt rate, cached ones at the cached rate, the
reply at the completion rate, and a batched call at the table's batch share. The actions' share
is the actions per run the server counted (``bench.actions``) at the price per million actions.
Both per run and per million runs, for the synchronous lane, the batch lane and runs that share a
long prompt prefix.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from activities.pricing import Lane, estimate_cost
from aiorch_runtime.config import PriceTable


@dataclass(frozen=True)
class ModelCost:
    """One lane's model calls per run: the model, tokens per run by kind, and dollars per run
    (None: the model has no price)."""

    lane: Lane
    model: str
    runs: int
    calls: int
    prompt_tokens: float
    cached_tokens: float
    completion_tokens: float
    usd_per_run: float | None
    # What the same tokens would have cost with nothing read from the prompt cache.
    uncached_usd_per_run: float | None = None

    @property
    def cached_share(self) -> float:
        """The share of input tokens read from the provider's prompt cache."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "lane": self.lane,
            "model": self.model,
            "runs": self.runs,
            "calls": self.calls,
            "prompt_tokens_per_run": self.prompt_tokens,
            "cached_tokens_per_run": self.cached_tokens,
            "completion_tokens_per_run": self.completion_tokens,
            "cached_share": self.cached_share,
            "model_usd_per_run": self.usd_per_run,
            "model_usd_per_million_runs": (
                self.usd_per_run * 1_000_000 if self.usd_per_run is not None else None
            ),
            "model_usd_per_million_runs_uncached": (
                self.uncached_usd_per_run * 1_000_000
                if self.uncached_usd_per_run is not None
                else None
            ),
        }


def requests_log(simulator_url: str) -> list[dict[str, Any]]:
    """The simulator's request log (``GET /_sim/requests``)."""
    with urllib.request.urlopen(f"{simulator_url}/_sim/requests", timeout=30) as response:
        log: list[dict[str, Any]] = json.load(response)
    return log


def model_cost(
    calls: Iterable[Mapping[str, Any]], runs: int, prices: PriceTable, lane: Lane
) -> ModelCost:
    """The model cost per run of ``runs`` runs whose answered calls are ``calls`` (simulator
    log entries), priced for ``lane``."""
    answered = [call for call in calls if call.get("usage")]
    models = {str(call["model"]) for call in answered}
    model = ", ".join(sorted(models)) or "-"
    prompt = cached = completion = 0
    usd: float | None = 0.0
    uncached: float | None = 0.0
    for call in answered:
        usage = call["usage"]
        hit = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        prompt += int(usage["prompt_tokens"])
        cached += hit
        completion += int(usage.get("completion_tokens") or 0)
        priced = estimate_cost(
            prices,
            str(call["model"]),
            int(usage["prompt_tokens"]),
            int(usage.get("completion_tokens") or 0),
            cached_tokens=hit,
            lane=lane,
        )
        usd = None if usd is None or priced is None else usd + priced
        full = estimate_cost(
            prices,
            str(call["model"]),
            int(usage["prompt_tokens"]),
            int(usage.get("completion_tokens") or 0),
            lane=lane,
        )
        uncached = None if uncached is None or full is None else uncached + full
    return ModelCost(
        lane=lane,
        model=model,
        runs=runs,
        calls=len(answered),
        prompt_tokens=prompt / runs,
        cached_tokens=cached / runs,
        completion_tokens=completion / runs,
        usd_per_run=usd / runs if usd is not None else None,
        uncached_usd_per_run=uncached / runs if uncached is not None else None,
    )


def chats_of_runs(log: Iterable[Mapping[str, Any]], run_ids: Iterable[str]) -> list[Any]:
    """The synchronous chat calls of these runs (the worker names its run in ``X-Run-Id``)."""
    ids = set(run_ids)
    return [e for e in log if e["path"] == "chat" and e.get("run_id") in ids]


def chats_of_batches(log: Iterable[Mapping[str, Any]]) -> list[Any]:
    """The chat calls batches answered (only the batch lane's runs are batched)."""
    return [e for e in log if e["path"] == "chat" and e.get("batch_id")]


LANE_NAMES: Mapping[str, str] = {
    "sync": "synchronous lane",
    "batch": "batch lane (the provider's batch API)",
    "cached": "synchronous, 2,000-token shared prefix cached",
}


def report_json(
    per_lane: Mapping[str, ModelCost],
    actions_per_run: Mapping[str, float],
    price_per_million_actions: float,
) -> dict[str, Any]:
    """Per lane: the model cost, the actions and their cost, per run and per million runs."""
    lanes: dict[str, Any] = {}
    for name, model in per_lane.items():
        actions = actions_per_run[name]
        actions_usd = actions * price_per_million_actions
        model_usd = model.usd_per_run * 1_000_000 if model.usd_per_run is not None else None
        lanes[name] = {
            "description": LANE_NAMES.get(name, name),
            **model.as_dict(),
            "actions_per_run": actions,
            "actions_usd_per_million_runs": actions_usd,
            "total_usd_per_million_runs": (
                model_usd + actions_usd if model_usd is not None else None
            ),
        }
    return {"price_per_million_actions": price_per_million_actions, "lanes": lanes}
