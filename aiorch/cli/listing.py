"""``list``: runs with their state, read from visibility (no worker needed): in one state,
of one pipeline, or every run waiting for a person (``--waiting``). Registered with the other
run commands (`aiorch.cli.runs`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from temporalio.client import Client, WorkflowExecutionStatus

from aiorch.cli import choices
from aiorch.cli.output import CliError, one_line_errors, out, plain, print_table
from aiorch.cli.session import run_async
from aiorch.ops import closed_runs, visibility
from aiorch.ops.retries import retrying
from aiorch_runtime.config import Settings


@one_line_errors
def list_runs(
    state: Annotated[
        str | None, typer.Option(callback=choices.state, help=choices.STATE_HELP)
    ] = None,
    waiting: Annotated[
        bool,
        typer.Option(
            "--waiting",
            help="only open runs waiting for a reviewer, in any review state of any pipeline "
            "(the inbox's list)",
        ),
    ] = False,
    pipeline: Annotated[
        str | None, typer.Option(callback=choices.pipeline, help=choices.PIPELINE_HELP)
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON, for scripts")] = False,
) -> None:
    """List runs with their state (from visibility, so no worker is needed). Nothing is cut,
    whatever the terminal's width."""
    if waiting and state:
        raise CliError("--waiting lists every review state; leave out --state")
    if waiting:
        query = visibility.waiting_for_review(pipeline)
    else:
        query = visibility.runs_query(
            visibility.state_is(state) if state else "", pipeline=pipeline
        )

    async def show_runs(client: Client, settings: Settings) -> None:
        async def listed() -> list[dict[str, object]]:
            return [
                {
                    "workflow_id": execution.id,
                    "run_id": execution.run_id,
                    "pipeline": execution.workflow_type,
                    "version": visibility.version_of(execution),
                    "state": closed_runs.end_state(
                        visibility.state_of(execution), execution.status
                    ),
                    "temporal_status": (execution.status or WorkflowExecutionStatus.RUNNING).name,
                    "started_at": execution.start_time.isoformat(),
                }
                async for execution in client.list_workflows(query, limit=limit)
            ]

        rows = await retrying(listed)
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        print_table(
            ("workflow id", "pipeline", "state", "temporal status", "started (UTC)"),
            [
                (
                    plain(row["workflow_id"]),
                    plain(f"{row['pipeline']} {row['version'] or ''}".strip()),
                    plain(row["state"] or "?"),
                    str(row["temporal_status"]),
                    str(row["started_at"])[:19].replace("T", " "),
                )
                for row in rows
            ],
        )
        out.print(f"{len(rows)} run(s)")

    run_async(show_runs)
