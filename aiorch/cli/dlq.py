"""``dlq``: dead-lettered runs, listed from the SQS queue and started again (redrive)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from temporalio.client import Client

from aiorch.cli.output import (
    CliError,
    command_group,
    one_line_errors,
    out,
    plain,
    print_table,
)
from aiorch.cli.session import run_async
from aiorch.ops import dead_letters
from aiorch.ops.durations import format_duration
from aiorch_runtime.config import Settings, load_settings

dlq_app = command_group(
    "Dead-lettered runs: list them from the SQS queue, start them again (redrive)."
)


@dlq_app.command("list")
@one_line_errors
def dlq_list(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Show dead-lettered runs (id, failed state, attempts, last error, age); consumes nothing."""
    queue = dead_letters.DeadLetterQueue.from_settings(load_settings())
    letters = queue.peek()
    now = datetime.now(UTC)
    if as_json:
        typer.echo(dead_letters.to_json(letters, now))
        return
    print_table(
        ("workflow id", "failed state", "attempts", "last error", "age"),
        [
            (
                plain(body.workflow_id if body else f"(message {letter.message_id})"),
                plain(body.failed_state if body else "?"),
                str(body.attempts) if body else "?",
                # The start of it; --json has it whole.
                plain(((body.last_error or "") if body else (letter.problem or ""))[:160]),
                format_duration(letter.age(now)),
            )
            for letter in letters
            for body in (letter.body,)
        ],
        wrap=("last error",),
    )
    out.print(plain(f"{len(letters)} dead letter(s) in the {queue.where}"))


@dlq_app.command("redrive")
@one_line_errors
def dlq_redrive(
    workflow_id: Annotated[str | None, typer.Argument(help="the dead-lettered run's id")] = None,
    redrive_all: Annotated[bool, typer.Option("--all", help="every message in the queue")] = False,
) -> None:
    """Start dead-lettered runs again (fresh attempt budget); delete each message after.

    Each message is checked against Temporal first: only a run that really ended in dead_letter,
    and is still the latest of its id, is started again, with its own request from its history.
    Anything else is refused and left in the queue; the exit status is then 1.
    """
    if (workflow_id is None) == (not redrive_all):
        raise CliError("name one run id to redrive, or pass --all (not both)")
    from aiorch.ops import redrive  # loads only for this command

    async def redrive_letters(client: Client, settings: Settings) -> list[redrive.RedriveOutcome]:
        return await redrive.redrive(
            client,
            dead_letters.DeadLetterQueue.from_settings(settings),
            task_queue=settings.temporal_task_queue,
            select=workflow_id,
            progress=lambda line: out.print(plain(line)),
        )

    outcomes = run_async(redrive_letters)
    out.print(redrive.summarize(outcomes))
    if any(outcome.action in ("failed", "refused") for outcome in outcomes):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``dlq`` group to ``app``."""
    app.add_typer(dlq_app, name="dlq")
