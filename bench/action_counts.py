"""What the actions phase counts and how it is reported (``bench.actions`` drives the runs).

The paths and lanes a run is measured on, a batch's counts per action type (`ActionBatch`,
`LaneBatch`), and the phase's JSON. `IN_FLIGHT` bounds the runs of a batch in flight at once:
``bench.actions`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IN_FLIGHT = 25  # runs of a batch in flight at once (see bench.actions)


@dataclass(frozen=True)
class PathSpec:
    """How the runs of one path are started and driven."""

    name: str
    review: str
    llm_failures: int
    description: str


PATHS: tuple[PathSpec, ...] = (
    PathSpec("happy", "never", 0, "review never"),
    PathSpec("review", "always", 0, "one approve (an update, as starter.py review sends it)"),
    PathSpec("retry", "never", 1, "one 429 from the LLM, then success"),
)
HAPPY = PATHS[0]
# The synchronous lane's billable actions per run, which the lanes of issue 27 must not change.
SYNC_ACTIONS = {"happy": 5, "review": 8, "retry": 9}
PREFIX_WORDS = 2000  # the simulator counts a word as a token


@dataclass(frozen=True)
class LaneSpec:
    """A lane ours is measured in (happy path): the lane a run asks for, and the shared
    prefix its message opens with."""

    name: str
    lane: str
    prefix_words: int
    description: str

    @property
    def prefix(self) -> str:
        return "".join(f"clause{n} " for n in range(self.prefix_words))


LANES: tuple[LaneSpec, ...] = (
    LaneSpec("batch", "batch", 0, "the provider's batch API, review never"),
    LaneSpec("cached", "sync", PREFIX_WORDS, "a 2,000-token shared prefix, review never"),
)


@dataclass(frozen=True)
class ActionBatch:
    """One batch: ``runs`` runs of one target on one path and the actions the server counted."""

    target: str
    path: str
    runs: int
    failed: int
    counted: dict[str, int]  # total per action type that moved during the batch
    seconds: float
    first_error: str | None = None

    @property
    def per_run(self) -> float:
        """Billable actions per run."""
        return sum(self.counted.values()) / self.runs

    @property
    def per_run_by_type(self) -> dict[str, float]:
        """Billable actions per run, by action type."""
        return {kind: n / self.runs for kind, n in self.counted.items()}

    @property
    def whole(self) -> bool:
        """Whether every action type counted a whole number per run (no chance actions)."""
        return all(n % self.runs == 0 for n in self.counted.values())

    def as_dict(self, price_per_million_actions: float) -> dict[str, Any]:
        """The JSON form, with the cost per million runs at the given price."""
        return {
            "runs": self.runs,
            "failed": self.failed,
            "seconds": self.seconds,
            "per_run": self.per_run,
            "per_run_by_type": self.per_run_by_type,
            "whole_per_run": self.whole,
            "counted_totals": self.counted,
            "cost_per_million_runs": self.per_run * price_per_million_actions,
            "first_error": self.first_error,
        }


@dataclass(frozen=True)
class LaneBatch:
    """One lane's batch of ours: its runs' ids, every action counted (``batch``), and the
    actions of the batch groups (``LlmBatch`` workflows) among them."""

    lane: LaneSpec
    batch: ActionBatch
    ids: list[str]
    groups: int = 0
    group_actions: int = 0

    @property
    def per_run_own(self) -> float:
        """A run's own actions, its groups' left out."""
        return (sum(self.batch.counted.values()) - self.group_actions) / self.batch.runs

    @property
    def per_group(self) -> float:
        """The actions of one batch group."""
        return self.group_actions / self.groups if self.groups else 0.0

    def as_dict(self, price_per_million_actions: float) -> dict[str, Any]:
        """The JSON form, with the cost per million runs at the given price."""
        return {
            "description": self.lane.description,
            "lane": self.lane.lane,
            "ours": self.batch.as_dict(price_per_million_actions),
            "per_run_own": self.per_run_own,
            "groups": self.groups,
            "per_group": self.per_group,
            "runs_per_group": self.batch.runs / self.groups if self.groups else None,
        }


def format_count(value: float) -> str:
    """A per-run count: whole numbers without decimals, anything else with two."""
    return f"{value:.0f}" if value == round(value) else f"{value:.2f}"


def type_order(action_type: str) -> tuple[int, str]:
    """Sort key for action types: the start, the workflow's commands, then what clients and
    workers add (activity retries, queries, signals, heartbeats, updates)."""
    if action_type == "grpc_StartWorkflowExecution":
        return (0, action_type)
    if action_type.startswith("command_"):
        return (1, action_type)
    return (2, short_type(action_type))


def short_type(action_type: str) -> str:
    """The server's action type without its ``grpc_``/``command_``/``message_`` prefix."""
    for prefix in ("grpc_", "command_", "message_"):
        if action_type.startswith(prefix):
            return action_type[len(prefix) :]
    return action_type


def report_json(
    batches: dict[str, dict[str, ActionBatch]],
    k: int,
    price_per_million_actions: float,
    lanes: dict[str, LaneBatch] | None = None,
) -> dict[str, Any]:
    """The phase's JSON: per path, each side's counts and cost, and ours/baseline; per lane,
    ours."""
    paths: dict[str, Any] = {}
    for spec in PATHS:
        sides = batches[spec.name]
        base, ours = sides["baseline"], sides["ours"]
        paths[spec.name] = {
            "description": spec.description,
            "baseline": base.as_dict(price_per_million_actions),
            "ours": ours.as_dict(price_per_million_actions),
            "ratio": ours.per_run / base.per_run if base.per_run else None,
        }
    return {
        "k": k,
        "price_per_million_actions": price_per_million_actions,
        "counter": "action",
        "namespace": "default",
        "in_flight": IN_FLIGHT,
        "paths": paths,
        "lanes": {
            name: lane.as_dict(price_per_million_actions) for name, lane in (lanes or {}).items()
        },
    }


def lost_failed(
    batches: dict[str, dict[str, ActionBatch]], lanes: dict[str, LaneBatch] | None = None
) -> int:
    """Runs that failed in any batch."""
    return sum(b.failed for sides in batches.values() for b in sides.values()) + sum(
        lane.batch.failed for lane in (lanes or {}).values()
    )
