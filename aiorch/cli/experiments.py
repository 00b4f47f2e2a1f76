"""``aiorch experiments``: rollout experiments (docs/rollouts.md). ``status`` shows each
variant's runs and signals from the ledger and its halt; ``halt``, ``promote`` and ``resume``
change which variants new runs get (in the capacity store, which every worker's plans read);
``watch`` judges a sample of each judged experiment's ended runs, applies each
experiment's stop rule to the ledger and halts a losing variant on its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import aiohttp
import typer

from activities.notify import NotifyActivities, webhook
from aiorch.cli.ledger import about_ledger
from aiorch.cli.output import (
    CliError,
    command_group,
    err_console,
    one_line_errors,
    out,
    plain,
    print_json,
    print_table,
)
from aiorch.cli.session import connected
from aiorch.ops import experiments as ops
from aiorch.ops import ledger
from aiorch.ops.durations import parse_duration
from aiorch_runtime.capacity import CapacityStore
from aiorch_runtime.config import Settings, load_settings
from aiorch_runtime.experiment_halts import ExperimentState, Halt, HaltStore, HaltStoreError
from aiorch_runtime.experiments import Experiment

T = TypeVar("T")
WATCH_READY_LINE = "watching experiments"

experiments_app = command_group("Rollout experiments: their variants, signals and halts.")

ExperimentArg = Annotated[str, typer.Argument(help="the experiment's id")]
VariantArg = Annotated[str, typer.Argument(help="the variant's name")]


def _experiment(settings: Settings, experiment_id: str) -> Experiment:
    found = next((e for e in settings.experiments.values() if e.id == experiment_id), None)
    if found is None:
        known = ", ".join(e.id for e in settings.experiments.values()) or "none (EXPERIMENTS)"
        raise CliError(f"no experiment {experiment_id!r}: configured are {known}")
    return found


def _variant(experiment: Experiment, variant: str) -> str:
    if experiment.arm(variant) is None:
        names = ", ".join(arm.name for arm in experiment.variants)
        raise CliError(f"experiment {experiment.id} has no variant {variant!r}: it has {names}")
    return variant


@contextlib.asynccontextmanager
async def _store(settings: Settings) -> AsyncIterator[HaltStore]:
    capacity = CapacityStore.from_settings(settings)
    if capacity is None:
        raise CliError("experiments keep their halts in the capacity store: set CAPACITY_STORE_URL")
    try:
        yield HaltStore(capacity.redis)
    except HaltStoreError as err:
        raise CliError(str(err)) from None
    finally:
        await capacity.close()


def _with_store(settings: Settings, action: Callable[[HaltStore], Awaitable[T]]) -> T:
    async def run() -> T:
        async with _store(settings) as store:
            return await action(store)

    return asyncio.run(run())


def _state_of(variant: str, experiment: Experiment, state: ExperimentState) -> str:
    if variant in state.halted:
        return "halted"
    if state.promoted is not None:
        return "promoted" if variant == state.promoted else "not chosen (another is promoted)"
    arm = experiment.arm(variant)
    return "running" if arm is not None else "no longer configured"


def _status_rows(
    settings: Settings, experiment: Experiment, state: ExperimentState
) -> list[dict[str, Any]]:
    with about_ledger(settings.ledger_url.get_secret_value()):
        engine = ledger.open_ledger(settings.ledger_url.get_secret_value())
        try:
            signals = ops.variant_signals(engine, experiment)
        finally:
            engine.dispose()
    rows = []
    for found in signals:
        arm = experiment.arm(found.variant)
        halt = state.halted.get(found.variant)
        rows.append(
            {
                "experiment": experiment.id,
                "variant": found.variant,
                "weight": arm.weight if arm is not None else None,
                "changes": arm.describe() if arm is not None else None,
                "state": _state_of(found.variant, experiment, state),
                "runs": found.runs,
                "judged": found.judged,
                "problem_rate": round(found.rate("problem"), 4),
                "correction_rate": round(found.rate("correction"), 4),
                "rejection_rate": round(found.rate("rejection"), 4),
                "approval_rate": round(found.rate("approval"), 4),
                "scored": found.scored,
                "pass_rate": None if found.pass_rate is None else round(found.pass_rate, 4),
                "halted_at": halt.at.isoformat() if halt else None,
                "halted_by": halt.by if halt else None,
                "halt_reason": halt.reason if halt else None,
            }
        )
    return rows


@experiments_app.command("status")
@one_line_errors
def status_command(
    experiment_id: Annotated[
        str | None, typer.Argument(help="one experiment (default: all)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """Each variant's weight, state (running, halted, promoted), runs, judged runs, the rates
    of problems, corrections, rejections and approvals, and the runs its judge scored and
    their pass rate (from the ledger)."""
    settings = load_settings()
    chosen = (
        [_experiment(settings, experiment_id)]
        if experiment_id is not None
        else list(settings.experiments.values())
    )
    if not chosen:
        out.print("no experiments configured (EXPERIMENTS)")
        return

    async def states(store: HaltStore) -> list[ExperimentState]:
        return [await store.state(experiment.id) for experiment in chosen]

    found = _with_store(settings, states)
    rows = [
        row
        for experiment, state in zip(chosen, found, strict=True)
        for row in _status_rows(settings, experiment, state)
    ]
    if as_json:
        print_json(json.dumps(rows))
        return
    print_table(
        (
            "experiment",
            "variant",
            "weight",
            "state",
            "runs",
            "judged",
            "problems",
            "corrections",
            "rejections",
            "approvals",
            "scored",
            "passed",
        ),
        [
            (
                plain(row["experiment"]),
                plain(row["variant"]),
                "-" if row["weight"] is None else f"{row['weight']:g}",
                plain(row["state"]),
                str(row["runs"]),
                str(row["judged"]),
                f"{row['problem_rate']:.0%}",
                f"{row['correction_rate']:.0%}",
                f"{row['rejection_rate']:.0%}",
                f"{row['approval_rate']:.0%}",
                str(row["scored"]),
                "-" if row["pass_rate"] is None else f"{row['pass_rate']:.0%}",
            )
            for row in rows
        ],
    )
    for row in rows:
        if row["halted_at"] is not None:
            out.print(
                plain(
                    f"{row['experiment']}/{row['variant']} halted {row['halted_at']} by "
                    f"{row['halted_by']}: {row['halt_reason']}"
                )
            )


@experiments_app.command("halt")
@one_line_errors
def halt_command(
    experiment_id: ExperimentArg,
    variant: VariantArg,
    operator: Annotated[str, typer.Option(help="who halts it (recorded)")],
    reason: Annotated[str, typer.Option(help="why (recorded)")] = "halted by an operator",
) -> None:
    """Stop giving new runs VARIANT (they get the control); runs already planned keep it."""
    settings = load_settings()
    experiment = _experiment(settings, experiment_id)
    _variant(experiment, variant)
    if variant == experiment.control.name:
        raise CliError(f"{variant} is the control, which halted runs get: halt another variant")
    halt = Halt(at=datetime.now(UTC), reason=reason, by=operator)

    async def halting(store: HaltStore) -> bool:
        with about_ledger(settings.ledger_url.get_secret_value()):
            engine = ledger.open_ledger(settings.ledger_url.get_secret_value())
            try:
                return await ops.halt_variant(store, engine, experiment.id, variant, halt)
            finally:
                engine.dispose()

    if _with_store(settings, halting):
        out.print(
            plain(f"{experiment.id}/{variant} halted: new runs get {experiment.control.name}")
        )
    else:
        out.print(plain(f"{experiment.id}/{variant} was halted already"))


@experiments_app.command("promote")
@one_line_errors
def promote_command(experiment_id: ExperimentArg, variant: VariantArg) -> None:
    """Give every new run VARIANT (its halt, if any, is lifted), until ``resume``."""
    settings = load_settings()
    experiment = _experiment(settings, experiment_id)
    _variant(experiment, variant)
    _with_store(settings, lambda store: store.promote(experiment.id, variant))
    out.print(plain(f"{experiment.id}/{variant} promoted: every new run gets it"))


@experiments_app.command("resume")
@one_line_errors
def resume_command(
    experiment_id: ExperimentArg,
    variant: Annotated[
        str | None,
        typer.Argument(help="lift this variant's halt (default: every halt and the promotion)"),
    ] = None,
) -> None:
    """Lift VARIANT's halt; without one, every halt and the promotion: the configured weights
    decide again."""
    settings = load_settings()
    experiment = _experiment(settings, experiment_id)
    if variant is not None:
        _variant(experiment, variant)
    _with_store(settings, lambda store: store.resume(experiment.id, variant))
    lifted = (
        f"{experiment.id}/{variant}'s halt" if variant else f"{experiment.id}'s halts and promotion"
    )
    out.print(plain(f"lifted {lifted}"))


def _notifier(settings: Settings, session: aiohttp.ClientSession) -> ops.Notify | None:
    hook = webhook(settings)
    return NotifyActivities(hook, session).post if hook.url is not None else None


@experiments_app.command("watch")
@one_line_errors
def watch_command(
    interval: Annotated[str, typer.Option(help="between checks: 30s, 5m")] = "30s",
    once: Annotated[bool, typer.Option("--once", help="check once and exit")] = False,
) -> None:
    """Every --interval: judge the sampled ended runs of each experiment with a judge not
    judged yet (into the ledger's judgements), then apply every experiment's stop rule to the
    ledger (kept current by ``ledger follow``) and halt each losing variant: in the capacity
    store, in the ledger's experiment_halts, in the log and, with REVIEW_WEBHOOK_URL, at the
    webhook."""
    try:
        every = parse_duration(interval)
    except ValueError as err:
        raise CliError(f"--interval: {err}") from None
    settings = load_settings()
    if not settings.experiments:
        raise CliError("no experiments configured (EXPERIMENTS): nothing to watch")
    try:
        rules = ops.judge_rules(settings.experiments)
    except ops.JudgeError as err:
        raise CliError(str(err)) from None

    async def watch(store: HaltStore) -> int:
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(signum, stop.set)
        with about_ledger(settings.ledger_url.get_secret_value()):
            engine = ledger.open_ledger(settings.ledger_url.get_secret_value())
        err_console.print(
            plain(f"{WATCH_READY_LINE}: {len(settings.experiments)} every {interval}")
        )
        checks = 0
        client = await connected(settings) if rules else None
        try:
            async with aiohttp.ClientSession() as session:
                while not stop.is_set():
                    try:
                        with about_ledger(settings.ledger_url.get_secret_value()):
                            if client is not None:
                                judged = await ops.judge_runs(
                                    client, engine, settings.experiments, rules
                                )
                                _report_judged(judged)
                            made = await ops.watch_once(
                                engine,
                                store,
                                settings.experiments,
                                notify=_notifier(settings, session),
                                slack=settings.review_webhook_format == "slack",
                            )
                    except (CliError, HaltStoreError) as err:
                        if once:
                            raise
                        # The ledger or the store is away for a moment: the next check retries.
                        err_console.print(plain(f"check failed, trying again: {err}"))
                        made = []
                    checks += 1
                    for breach in made:
                        err_console.print(
                            plain(f"halted {breach.experiment}/{breach.variant}: {breach.reason}")
                        )
                    if once:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), every.total_seconds())
        finally:
            engine.dispose()
        return checks

    checks = _with_store(settings, watch)
    err_console.print(plain(f"stopped after {checks} check(s)"))


def _report_judged(judged: list[ops.Judgement]) -> None:
    for experiment in sorted({j.experiment for j in judged}):
        mine = [j for j in judged if j.experiment == experiment]
        failed = sum(not j.passed for j in mine)
        err_console.print(plain(f"judged {len(mine)} run(s) of {experiment}: {failed} failed"))


def register(app: typer.Typer) -> None:
    """Add the ``experiments`` group to ``app``."""
    app.add_typer(experiments_app, name="experiments")
