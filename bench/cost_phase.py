"""The actions phase (issues 16 and 27): billable actions per run by path and lane
(``bench.actions``), and what a run costs in model tokens and actions (``bench.costs``).

It runs first, while nothing else has run on the server but the warm-up: the server's action
counter is namespace-wide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench import actions, costs
from bench.action_counts import ActionBatch, LaneBatch, lost_failed, report_json
from bench.report import actions_checks, actions_tables, cost_checks_of, cost_table, lanes_table
from bench.tally import Bench, Tally


@dataclass(frozen=True)
class ActionsMeasured:
    """The actions phase's counts per path and lane, and the simulator's log of its calls."""

    counted: dict[str, dict[str, ActionBatch]]
    ids: dict[str, list[str]]
    lanes: dict[str, LaneBatch]
    requests: list[dict[str, Any]]


async def run_actions(bench: Bench) -> ActionsMeasured:
    # First: the counter is namespace-wide, and nothing else has run on the server yet but the
    # warm-up, whose runs have closed.
    stack, k = bench.stack, bench.options.actions_k
    signer = stack.local.reviewer_key.signer()
    counted, ids = await actions.measure(bench.client, stack.metrics_url, k, bench.log, signer)
    lanes = await actions.measure_lanes(
        bench.client, stack.metrics_url, k, bench.log, signer, stack.simulator_url
    )
    return ActionsMeasured(counted, ids, lanes, costs.requests_log(stack.simulator_url))


def check_actions(bench: Bench, measured: ActionsMeasured, tally: Tally) -> None:
    counted, lanes, requests = measured.counted, measured.lanes, measured.requests
    k, price = bench.options.actions_k, bench.options.price_per_million_actions
    tally.report["actions"] = report_json(counted, k, price, lanes)
    tally.failed += lost_failed(counted, lanes)
    prices = bench.settings.llm_price_table
    per_lane = {
        "sync": costs.model_cost(
            costs.chats_of_runs(requests, measured.ids["happy"]), k, prices, "sync"
        ),
        "batch": costs.model_cost(costs.chats_of_batches(requests), k, prices, "batch"),
        "cached": costs.model_cost(
            costs.chats_of_runs(requests, lanes["cached"].ids), k, prices, "sync"
        ),
    }
    lane_actions = {
        "sync": counted["happy"]["ours"].per_run,
        "batch": lanes["batch"].batch.per_run,
        "cached": lanes["cached"].batch.per_run,
    }
    tally.report["cost"] = costs.report_json(per_lane, lane_actions, price)
    model = bench.settings.llm_model
    share = prices[model].batch if model in prices else 0.5
    tally.cost_checks = [*actions_checks(counted), *cost_checks_of(counted, lanes, per_lane, share)]
    tally.cost_tables = [
        *actions_tables(counted, k, price),
        lanes_table(lanes, price),
        cost_table(per_lane, lane_actions, price),
    ]
