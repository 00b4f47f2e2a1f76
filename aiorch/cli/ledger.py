"""``aiorch ledger``: the run ledger (docs/ledger.md). ``sync`` and ``follow`` project the runs'
event histories into SQL tables at ``LEDGER_URL``; ``sql`` runs a read-only query over them and
``report cost|reviews`` prints the reports users want without writing SQL."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import signal
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from sqlalchemy import Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from temporalio.client import Client

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
from aiorch.cli.reviews import moment
from aiorch.cli.session import run_async
from aiorch.ops import ledger
from aiorch.ops.durations import parse_duration
from aiorch_runtime.config import Settings, load_settings

ledger_app = command_group("The run ledger: runs, model calls and reviews as SQL tables.")

JsonFlag = Annotated[bool, typer.Option("--json", help="JSON instead of a table")]
SinceOption = Annotated[
    str | None, typer.Option(help="from then: 2026-11-01, or 7d back from now (default: all)")
]
UntilOption = Annotated[str | None, typer.Option(help="and before then (default: now)")]


@contextlib.contextmanager
def about_ledger(url: str) -> Iterator[None]:
    """A database failure as one line that names the ledger (never its password)."""
    try:
        yield
    except SQLAlchemyError as err:
        cause = str(getattr(err, "orig", None) or err).strip().splitlines()
        where = make_url(url).render_as_string(hide_password=True)
        raise CliError(f"ledger {where}: {cause[0] if cause else type(err).__name__}") from None


def _open(url: str) -> Engine:
    with about_ledger(url):
        return ledger.open_ledger(url)


def _report_sync(report: ledger.SyncReport | Exception) -> None:
    if isinstance(report, Exception):
        err_console.print(plain(f"sync failed, trying again: {report}"))
        return
    err_console.print(plain(report.describe()))
    for run_id, reason in list(report.failed.items())[:20]:
        err_console.print(plain(f"  {run_id}: {reason}"))


@ledger_app.command("sync")
@one_line_errors
def sync_command() -> None:
    """Project every run that closed or changed since the last sync (every run, the first
    time) from its event history into the ledger; a second sync changes nothing."""

    async def once(client: Client, settings: Settings) -> ledger.SyncReport:
        url = settings.ledger_url.get_secret_value()
        engine = _open(url)
        with about_ledger(url):
            return await ledger.sync(client, engine)

    report = run_async(once)
    _report_sync(report)
    if report.failed:
        raise CliError(
            f"{len(report.failed)} run(s) could not be read (the next sync tries again); "
            "does this reader have the workers' PAYLOAD_KEYS?"
        )


@ledger_app.command("follow")
@one_line_errors
def follow_command(
    interval: Annotated[str, typer.Option(help="between syncs: 10s, 1m")] = "10s",
) -> None:
    """Sync, then again every --interval, until SIGTERM or Ctrl-C (the sync under way
    finishes first). After downtime it catches up from where the last sync left off."""
    try:
        every = parse_duration(interval)
    except ValueError as err:
        raise CliError(f"--interval: {err}") from None

    async def loop(client: Client, settings: Settings) -> int:
        url = settings.ledger_url.get_secret_value()
        engine = _open(url)
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(signum, stop.set)
        where = make_url(url).render_as_string(hide_password=True)
        err_console.print(plain(f"{ledger.FOLLOW_READY_LINE}: every {interval} into {where}"))
        with about_ledger(url):
            return await ledger.follow(client, engine, interval=every, stop=stop, each=_report_sync)

    done = run_async(loop)
    err_console.print(plain(f"stopped after {done} sync(s)"))


def _cell(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@ledger_app.command("sql")
@one_line_errors
def sql_command(
    statement: Annotated[str, typer.Argument(help='one statement: "SELECT ... FROM runs"')],
    as_json: JsonFlag = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV with a header line")] = False,
) -> None:
    """Run one read-only SQL statement over the ledger: a table, --json or --csv. A statement
    that would change the ledger is refused."""
    if as_json and as_csv:
        raise CliError("--json and --csv: pick one")
    url = load_settings().ledger_url.get_secret_value()
    try:
        answer = ledger.read_only(url, statement)
    except (ledger.NotReadOnly, ledger.QueryFailed) as err:
        raise CliError(str(err)) from None
    rows = [[_cell(value) for value in row] for row in answer.rows]
    if as_json:
        document = [dict(zip(answer.columns, row, strict=True)) for row in rows]
        print_json(json.dumps(document, default=str))
    elif as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(answer.columns)
        writer.writerows(rows)
    else:
        cells = [[plain("" if value is None else value) for value in row] for row in rows]
        print_table(answer.columns, cells)
        err_console.print(f"{len(rows)} row(s)")


class Report(StrEnum):
    COST = "cost"
    REVIEWS = "reviews"


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _print_reviews(found: ledger.ReviewsReport) -> None:
    out.print(
        plain(
            f"{found.decisions} decision(s): {_share(found.auto_approval_rate)} by a rule, "
            f"{_share(found.correction_rate)} corrected (reedit or corrected fields)"
        )
    )
    per_item = found.cost_per_approved_usd
    cost_text = "n/a" if per_item is None else f"${per_item:.6f}"
    out.print(plain(f"{found.approved_items} approved item(s): {cost_text} of model calls each"))
    pending = found.pending
    out.print(
        plain(
            f"pending: {pending['total']} ({pending['over_1h']} over 1 h, "
            f"{pending['over_1d']} over 1 d, {pending['over_7d']} over 7 d)"
        )
    )
    for title, lines in (("group", found.by_group), ("reviewer", found.by_reviewer)):
        print_table(
            [title, "decisions", "p50 s", "p90 s"],
            [
                [plain(d.name), str(d.decisions), _seconds(d.p50_s), _seconds(d.p90_s)]
                for d in lines
            ],
            justify_right={"decisions", "p50 s", "p90 s"},
        )


def _dump(models: Sequence[BaseModel] | BaseModel) -> str:
    if isinstance(models, BaseModel):
        return models.model_dump_json()
    return json.dumps([model.model_dump(mode="json") for model in models])


@ledger_app.command("report")
@one_line_errors
def report_command(
    which: Annotated[Report, typer.Argument(help="cost or reviews")],
    since: SinceOption = None,
    until: UntilOption = None,
    as_json: JsonFlag = False,
) -> None:
    """cost: model calls by tenant, pipeline, model and lane (calls, tokens, dollars).
    reviews: time to decision (p50, p90) per group and reviewer, runs pending by age,
    auto-approval and correction rates, model dollars per approved item."""
    start = moment(since, "--since") if since is not None else None
    end = moment(until, "--until") if until is not None else None
    url = load_settings().ledger_url.get_secret_value()
    engine = _open(url)
    with about_ledger(url):
        if which == Report.COST:
            lines = ledger.cost(engine, start, end)
            if as_json:
                print_json(_dump(lines))
                return
            print_table(
                ["tenant", "pipeline", "model", "lane", "runs", "calls", "tokens", "cost $"],
                [
                    [
                        plain(line.tenant),
                        plain(line.pipeline),
                        plain(line.model),
                        line.lane,
                        str(line.runs),
                        str(line.calls),
                        str(line.prompt_tokens + line.completion_tokens),
                        f"{line.cost_usd:.6f}",
                    ]
                    for line in lines
                ],
                justify_right={"runs", "calls", "tokens", "cost $"},
            )
            return
        found = ledger.reviews(engine, start, end, now=datetime.now(UTC))
    if as_json:
        print_json(_dump(found))
    else:
        _print_reviews(found)


def register(app: typer.Typer) -> None:
    """Add the ``ledger`` group to ``app``."""
    app.add_typer(ledger_app, name="ledger")
