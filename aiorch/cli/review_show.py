"""``review show ID``: what a reviewer decides on, as the review inbox shows it: the request,
the reply or the fields (each with its path, the fields a problem names marked), the problems,
earlier feedback, the round, who may decide and the time left; as text, or ``--json``.

It reads the run the way the inbox's run page does (`aiorch.ops.review_views.read_run`: the
run's ``review_view`` query, one billed action), so both show the same thing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.text import Text
from temporalio.client import Client

from aiorch.cli.output import CliError, one_line_errors, out, plain, print_json, print_table
from aiorch.cli.session import about_run, run_async
from aiorch.cli.views import review_line
from aiorch.ops import field_paths
from aiorch.ops.review_views import NoSuchRun, RunUnreadable, RunView, read_run, time_left
from aiorch_runtime.config import Settings

FIELD_COLUMNS = ("", "field", "value")


async def read_for_review(client: Client, workflow_id: str) -> RunView:
    """The run as a reviewer reads it.

    Raises:
        CliError: no such run of a pipeline this worker runs, it cannot be decoded here, or
            the server refused.
    """
    try:
        with about_run(workflow_id):
            return await read_run(client, workflow_id)
    except NoSuchRun:
        raise CliError(
            f"no run {workflow_id} of a pipeline this worker runs (`aiorch list` shows runs)"
        ) from None
    except RunUnreadable as err:
        raise CliError(f"{workflow_id}: {err}") from None


def show_document(run: RunView, now: datetime) -> dict[str, Any]:
    """What ``review show --json`` prints: the run's ``review_view`` with its ids, whether the
    wait is the escalation, the time left and the earlier feedback."""
    return {
        "workflow_id": run.workflow_id,
        "run_id": run.run_id,
        **run.view.model_dump(mode="json"),
        "escalated": run.escalated,
        "time_left": time_left(run.deadline, now) if run.waiting else None,
        "earlier_feedback": [entry.model_dump(mode="json") for entry in run.feedback],
    }


def problem_paths(problems: list[str]) -> list[str]:
    """The field paths problems name (``total: is 2100.00, but ...`` names ``total``)."""
    return [problem.split(": ", 1)[0] for problem in problems if ": " in problem]


def named_by(path: str, named: list[str]) -> bool:
    """Whether a problem names the field at ``path``, or a list or object that holds it."""
    return any(path == name or path.startswith((f"{name}.", f"{name}[")) for name in named)


def who_decides(run: RunView) -> str:
    """Who may decide the round now, in words."""
    view = run.view
    names = ", ".join(view.allowed_reviewers) if view.allowed_reviewers else None
    who = names or "any reviewer the operator allows (ALLOWED_REVIEWERS)"
    return f"{who}, except {view.requested_by} (who requested it)" if view.requested_by else who


def facts(run: RunView, now: datetime) -> list[tuple[str, str]]:
    """The run's ``label  value`` lines, as the inbox's run page lists them."""
    view = run.view
    lines = [
        ("pipeline", view.pipeline),
        ("state", f"{view.state} ({view.status})"),
        ("review round", str(view.review_round)),
    ]
    if run.waiting:
        then = "is dead-lettered" if run.escalated else "escalates"
        until = f"until {_when(run.deadline)}; then it {then}"
        lines.append(("time left", f"{time_left(run.deadline, now)} ({until})"))
        lines.append(("who may decide", who_decides(run)))
    if view.review is not None and view.review.policy:
        lines.append(("review policy", review_line(view.review)))
    if view.model:
        lines.append(("model", view.model))
    return lines


def print_view(run: RunView, now: datetime) -> None:
    """The run as text: its facts, its sections, its fields, problems and earlier feedback,
    then how to decide."""
    view = run.view
    out.print(Text.assemble(("Run ", "bold"), plain(run.workflow_id)))
    width = max(len(label) for label, _ in facts(run, now)) + 2
    for label, value in facts(run, now):
        out.print(plain(f"{label:<{width}}{value}"))
    for section in view.sections:
        if section.key == "fields" and view.fields is not None:
            continue  # shown below, one field a line, by the path a correction names
        out.print()
        out.print(bold(section.title))
        out.print(plain(section.text))
    if view.fields is not None:
        named = problem_paths(view.problems)
        rows = [
            ("!" if named_by(path, named) else "", plain(path), plain(_value(value)))
            for path, value in field_paths.leaves(view.fields)
        ]
        out.print()
        title = bold("Fields (! a problem names it)")
        print_table(FIELD_COLUMNS, rows, title=title, wrap=("value",))
    if view.problems:
        out.print()
        out.print(bold("Problems found"))
        for problem in view.problems:
            out.print(plain(f"- {problem}"))
    if run.feedback:
        out.print()
        out.print(bold("Earlier feedback"))
        for entry in run.feedback:
            by = f"round {entry.review_round}, {entry.reviewer}, {_when(entry.at)}"
            out.print(plain(f"- {by}: {entry.feedback}"))
    out.print()
    if not run.waiting:
        out.print(plain(f"This run is not waiting for a review (it is {view.state})."))
        return
    decide = f"aiorch review {run.workflow_id}"
    choices = "approve | reedit --feedback TEXT | reject"
    out.print(plain(f"Decide round {view.review_round}: {decide} {choices}"))
    if view.corrections and view.fields is not None:
        fix = "correct --set PATH=VALUE (or --fields FILE)"
        out.print(plain(f"Correct the fields: {decide} {fix}"))


def bold(text: str) -> Text:
    """A heading, printed as its characters (a section's title is the pipeline's to set)."""
    heading = plain(text)
    heading.stylize("bold")
    return heading


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "unknown"


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@one_line_errors
def show(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Show what a run waiting for review asks you to decide, as the review inbox shows it:
    the request, the reply or the fields (by the path `correct --set` names), the problems
    found, earlier feedback, the round, who may decide and the time left."""

    async def fetch(client: Client, settings: Settings) -> RunView:
        return await read_for_review(client, workflow_id)

    run = run_async(fetch)
    now = datetime.now(UTC)
    if as_json:
        print_json(json.dumps(show_document(run, now)))
    else:
        print_view(run, now)
