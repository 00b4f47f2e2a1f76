"""Operating on many runs at once: ``stats`` and ``stuck``; and the ``codec-server``."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.progress import Progress
from rich.text import Text
from temporalio.client import Client

from aiorch.cli import choices
from aiorch.cli.output import CliError, one_line_errors, out, plain, print_json, print_table
from aiorch.cli.session import run_async
from aiorch.ops import codec_server, pipelines
from aiorch.ops.durations import format_duration, parse_duration
from aiorch.ops.stats import NO_GROUP, DurationSummary, RunStats, collect_stats
from aiorch.ops.stuck import StuckAction, StuckRun, applies, apply_action, find_stuck
from aiorch_runtime.config import Settings, load_settings

# --before: a date, or a date and time with or without fractions and a UTC offset (or Z).
ISO_8601 = [
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%dT%H:%M:%S%z",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S.%f%z",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M:%S%z",
]


def _seconds(value: DurationSummary) -> float | None:
    return None if value.mean is None else round(value.mean.total_seconds(), 3)


def _mean_text(value: DurationSummary, what: str) -> str:
    if value.mean is None:
        return f"n/a (no {what})"
    return f"{format_duration(value.mean)} (over {value.samples} {what})"


def _stats_json(result: RunStats) -> str:
    states: dict[str, dict[str, int]] = {}
    by_pipeline: dict[str, dict[str, dict[str, int]]] = {}
    for c in result.states:
        total = states.setdefault(c.state, {"open": 0, "closed": 0})
        total["open"] += c.open
        total["closed"] += c.closed
        by_pipeline.setdefault(c.pipeline, {})[c.state] = {"open": c.open, "closed": c.closed}
    return json.dumps(
        {
            "total": result.total,
            "states": states,
            "pipelines": by_pipeline,
            "processing_s": {k: _seconds(v) for k, v in result.processing.items()},
            "approval_delay_s": _seconds(result.approval_delay),
            "approvals": result.approval_delay.samples,
            "approval_delay_by_group": [
                {
                    "pipeline": pipeline,
                    "group": group,
                    "approval_delay_s": _seconds(value),
                    "approvals": value.samples,
                }
                for (pipeline, group), value in result.approval_by.items()
            ],
            "auto_approved": result.auto_approved,
            "runs_sampled": result.runs_sampled,
        }
    )


@one_line_errors
def stats(
    sample: Annotated[int, typer.Option(min=1, help="recent finished runs to average")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Runs by state (from visibility), outcome counts, average processing time and approval
    delay (over the most recent finished runs)."""
    result = run_async(lambda client, _: collect_stats(client, sample=sample))
    if as_json:
        print_json(_stats_json(result))
        return
    rows: list[tuple[Text | str, ...]] = [
        (plain(row.pipeline), plain(row.state), str(row.open), str(row.closed), str(row.total))
        for row in result.states
    ]
    if result.without_state:
        rows.append(("", "(no AiState)", "", "", str(result.without_state)))
    print_table(
        ("pipeline", "state", "open", "closed", "total"),
        rows,
        title=f"{result.total} run(s) by state",
        justify_right=("open", "closed", "total"),
    )
    ends = sorted(pipelines.terminal_states())
    out.print("  ".join(f"{state}: {result.count(state)}" for state in ends))
    overall = result.processing.get("all", DurationSummary(None, 0))
    out.print(f"average processing time: {_mean_text(overall, 'finished runs')}")
    out.print(f"average approval delay: {_mean_text(result.approval_delay, 'approvals')}")
    for (pipeline, group), value in result.approval_by.items():
        by = "no group" if group == NO_GROUP else f"group {group}"
        out.print(plain(f"  {pipeline}, {by}: {_mean_text(value, 'approvals')}"))
    if result.auto_approved:
        out.print(f"approved by an auto-approve rule: {result.auto_approved}")


def _show_stuck(runs: list[StuckRun], targets: int, title: str, as_json: bool) -> None:
    now = datetime.now(UTC)
    if as_json:
        listed = [
            {"workflow_id": r.workflow_id, "state": r.state, "since": r.since.isoformat()}
            for r in runs
        ]
        print_json(json.dumps({"runs": listed, "targets": targets}))
        return
    print_table(
        ("workflow id", "state", "since (UTC)", "for"),
        [
            (
                plain(run.workflow_id),
                plain(run.state or "?"),
                run.since.strftime("%Y-%m-%d %H:%M:%S"),
                format_duration(run.age(now)),
            )
            for run in runs
        ],
        title=plain(f"{len(runs)} run(s) in one state {title}"),
    )


def stuck_cutoff(older_than: str, before: datetime | None) -> tuple[datetime, str]:
    """When the runs must have entered their state by, and how to say so in a title."""
    if before is not None:
        moment = before if before.tzinfo else before.replace(tzinfo=UTC)
        return moment, f"since before {moment.isoformat()}"
    try:
        threshold = parse_duration(older_than)
    except ValueError as error:
        raise CliError(f"--older-than: {error}") from None
    return datetime.now(UTC) - threshold, f"longer than {older_than}"


@one_line_errors
def stuck(
    older_than: Annotated[str, typer.Option(help="e.g. 90s, 15m, 1h30m, 2d")] = "1h",
    before: Annotated[
        datetime | None,
        typer.Option(
            formats=ISO_8601,
            metavar="<time>",
            help="instead of --older-than: in their state since before this time "
            "(ISO 8601, UTC unless it says otherwise; e.g. when an incident began)",
        ),
    ] = None,
    state: Annotated[
        str | None, typer.Option(callback=choices.state, help=choices.STATE_HELP)
    ] = None,
    action: Annotated[StuckAction, typer.Option(help="what to do with them")] = StuckAction.NONE,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask to confirm")] = False,
    reason: Annotated[str | None, typer.Option(help="recorded in each run's history")] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many runs")] = 10_000,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Runs that have sat in one state longer than --older-than (or since before --before),
    and a bulk action on them: timeout (end the review wait now), dead-letter (via escalate),
    or cancel."""
    cutoff, title = stuck_cutoff(older_than, before)

    async def find_and_act(client: Client, settings: Settings) -> None:
        runs = await find_stuck(client, cutoff, state=state, limit=limit)
        targets = [run for run in runs if applies(action, run)]
        _show_stuck(runs, len(targets), title, as_json)
        if action is StuckAction.NONE or not runs:
            return
        if len(targets) < len(runs):
            out.print(f"{len(runs) - len(targets)} run(s) not in a state `{action}` acts on")
        if not targets:
            return
        if not yes:
            typer.confirm(f"{action} {len(targets)} run(s)?", abort=True)
        with Progress(console=out) as progress:
            task = progress.add_task(f"{action}", total=len(targets))
            report = await apply_action(
                client,
                targets,
                action,
                reason=reason,
                on_progress=lambda _: progress.advance(task),
            )
        out.print(f"{action}: {len(report.done)} done, {len(report.failed)} failed")
        for workflow_id, problem in sorted(report.failed.items()):
            out.print(plain(f"  {workflow_id}: {problem}"))
        if report.failed:
            raise typer.Exit(1)

    run_async(find_and_act)


@one_line_errors
def codec_server_command(
    host: Annotated[str | None, typer.Option(help="default: CODEC_SERVER_HOST")] = None,
    port: Annotated[
        int | None, typer.Option(help="default: CODEC_SERVER_PORT; 0 picks a free one")
    ] = None,
) -> None:
    """Serve /encode and /decode for the Web UI and CLI (needs PAYLOAD_KEYS, CODEC_SERVER_TOKEN).

    Runs until SIGTERM or Ctrl-C; logs one access line per request, never a payload.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        asyncio.run(codec_server.serve(load_settings(), host, port))
    except OSError as error:
        raise CliError(f"codec server cannot listen: {error.strerror or error}") from None


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    app.command()(stats)
    app.command()(stuck)
    app.command("codec-server")(codec_server_command)
