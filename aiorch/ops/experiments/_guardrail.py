"""The stop rule and the halts it makes.

`breaches` applies an experiment's rule (`StopRule`) to its variants' signals: a variant
that is not the control, not halted, with at least ``min_judged`` judged runs (for
``score_fail``, runs its judge judged), whose rate of
the rule's signal exceeds the control's by more than ``margin``, is losing. `watch_once`
halts each losing variant: the halt goes to the capacity store (the workers' next plans give
its runs to the control), a row to the ledger's ``experiment_halts``, a warning to the log and,
with ``REVIEW_WEBHOOK_URL`` set, a notification to the webhook.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from aiorch.ops import ledger
from aiorch.ops.experiments._signals import VariantSignals, variant_signals
from aiorch_runtime.experiment_halts import Halt, HaltStore
from aiorch_runtime.experiments import Experiment

log = logging.getLogger("ai-orchestrator.experiments")

WATCHER = "watcher"
# Posts a notification (its idempotency key, its body) to the operator's webhook.
Notify = Callable[[str, dict[str, Any]], Awaitable[object]]


@dataclass(frozen=True)
class Breach:
    """A variant the stop rule halts, and why (one line)."""

    experiment: str
    variant: str
    reason: str


def breaches(
    experiment: Experiment, signals: Sequence[VariantSignals], halted: Collection[str]
) -> list[Breach]:
    """The variants of ``experiment`` its stop rule halts, given their ``signals`` and the
    variants already ``halted``."""
    rule, control = experiment.stop, experiment.control.name
    by_name = {found.variant: found for found in signals}
    baseline = by_name.get(control, VariantSignals(experiment.id, control))
    found: list[Breach] = []
    for arm in experiment.variants[1:]:
        mine = by_name.get(arm.name)
        if mine is None or arm.name in halted or mine.judged_for(rule.signal) < rule.min_judged:
            continue
        rate, base = mine.rate(rule.signal), baseline.rate(rule.signal)
        if rate - base > rule.margin:
            found.append(
                Breach(
                    experiment.id,
                    arm.name,
                    f"{rule.signal} rate {rate:.0%} over {mine.judged_for(rule.signal)} "
                    f"judged runs, {control}'s {base:.0%} over "
                    f"{baseline.judged_for(rule.signal)}: more than "
                    f"{rule.margin:.0%} above the control",
                )
            )
    return found


async def halt_variant(
    store: HaltStore, engine: Engine, experiment: str, variant: str, halt: Halt
) -> bool:
    """Halt ``variant`` in the store and record the halt in the ledger; False when it was
    halted already (nothing is recorded again)."""
    if not await store.halt(experiment, variant, halt):
        return False
    with engine.begin() as connection:
        connection.execute(
            ledger.experiment_halts.insert().values(
                experiment=experiment,
                variant=variant,
                halted_at=halt.at.astimezone(UTC).replace(tzinfo=None),
                halted_by=halt.by,
                reason=halt.reason,
            )
        )
    log.warning("experiment %s: %s halted by %s: %s", experiment, variant, halt.by, halt.reason)
    return True


def recorded_halts(engine: Engine, experiment: str) -> list[dict[str, Any]]:
    """The halts the ledger recorded for ``experiment``, oldest first."""
    halts = ledger.experiment_halts
    query = select(halts).where(halts.c.experiment == experiment).order_by(halts.c.halted_at)
    with engine.connect() as connection:
        return [dict(row._mapping) for row in connection.execute(query)]


def halt_notice(breach: Breach, at: datetime, *, slack: bool) -> tuple[str, dict[str, Any]]:
    """The webhook notification of a halt: its idempotency key and its body (``slack``: a
    Slack-compatible one)."""
    key = f"{breach.experiment}:{breach.variant}:halted:{at.isoformat()}"
    text = f"Experiment {breach.experiment}: variant {breach.variant} halted ({breach.reason})"
    if slack:
        return key, {"text": text}
    return key, {
        "event": "experiment_halted",
        "text": text,
        "experiment": breach.experiment,
        "variant": breach.variant,
        "reason": breach.reason,
        "idempotency_key": key,
    }


async def watch_once(
    engine: Engine,
    store: HaltStore,
    experiments: Mapping[str, Experiment],
    *,
    notify: Notify | None = None,
    slack: bool = False,
) -> list[Breach]:
    """Apply every experiment's stop rule to the ledger once and halt each losing variant
    (see the module docstring); returns the halts made."""
    made: list[Breach] = []
    for experiment in experiments.values():
        state = await store.state(experiment.id)
        signals = variant_signals(engine, experiment)
        for breach in breaches(experiment, signals, state.halted):
            at = datetime.now(UTC)
            halt = Halt(at=at, reason=breach.reason, by=WATCHER)
            if not await halt_variant(store, engine, experiment.id, breach.variant, halt):
                continue
            made.append(breach)
            if notify is not None:
                await _notified(notify, *halt_notice(breach, at, slack=slack))
    return made


async def _notified(notify: Notify, key: str, body: dict[str, Any]) -> None:
    try:
        await notify(key, body)
    except Exception as err:
        log.warning("experiments: the halt's notification failed: %s", err)
