"""Review commands: decide one run (``review ID approve|reedit|reject``, in the ``review``
group: `aiorch.cli.review_group`) or every run waiting in a state (``review-all``), and export
reviewers' corrections as evaluation examples (``reviews export``).

Both deciding commands sign each decision for its run and round with ``REVIEWER_KEY`` (or
``REVIEWER_KEY_FILE``) when one is configured, and send it through
``aiorch.ops.reviews.submit_review``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError
from temporalio.client import Client, WorkflowUpdateFailedError

from aiorch.cli import choices
from aiorch.cli.output import (
    CliError,
    UsageError,
    command_group,
    err_console,
    one_line_errors,
    out,
    plain,
)
from aiorch.cli.session import about_run, fetch_status, run_async
from aiorch.ops import corrections, reviews
from aiorch.ops.durations import parse_duration
from aiorch.ops.results import NoResult, run_result
from aiorch.ops.signing import SigningKey, signing_key_from_settings
from aiorch_runtime.config import Settings, load_settings
from workflows.engine.graph import AWAIT_REVIEW
from workflows.payloads import Decision, ReviewDecision, describe_validation_error, lacks_feedback

DecisionArgument = Annotated[Decision, typer.Argument()]
FeedbackOption = Annotated[str | None, typer.Option(help="what to change (a reedit needs it)")]
ReviewerOption = Annotated[
    str | None, typer.Option(help="who decides (default: the signing key's id, else cli)")
]


def review_signer(settings: Settings, key: SigningKey | None) -> reviews.Signer | None:
    """Signs each decision for its run and round with ``key`` (None: reviews go unsigned)."""
    return key.signer(timedelta(seconds=settings.review_token_ttl_s)) if key else None


def signed_decision(
    decision: str, reviewer: str | None, feedback: str | None, review_round: int | None = None
) -> tuple[ReviewDecision, reviews.Signer | None]:
    """The decision as the contract has it, and the signer for it (from ``REVIEWER_KEY``).

    The reviewer defaults to the signing key's id, else ``cli``.

    Raises:
        UsageError: a reedit with no feedback (nothing is sent).
        CliError: the decision is invalid (e.g. feedback too long).
        ConfigError: the signing key is configured but unusable.
    """
    if lacks_feedback(decision, feedback):
        raise UsageError("a reedit needs --feedback: say what the model should change")
    settings = load_settings()
    key = signing_key_from_settings(settings)
    try:
        payload = ReviewDecision(
            decision=decision,
            reviewer=reviewer or (key.key_id if key else "cli"),
            feedback=feedback,
            review_round=review_round,
        )
    except ValidationError as error:
        raise CliError(f"invalid review: {describe_validation_error(error)}") from None
    return payload, review_signer(settings, key)


async def review_target(
    workflow_id: str, review_round: int | None, client: Client, settings: Settings
) -> reviews.ReviewTarget:
    """The run that holds ``workflow_id`` now, for ``review_round`` (default: the round it
    waits in, its ``AiReviewRound``).

    Raises:
        CliError: no such run, or it has not asked for a review yet.
    """
    with about_run(workflow_id):
        target = await reviews.current_target(client, workflow_id)
    if review_round is not None:
        return replace(target, review_round=review_round)
    if target.review_round is None:
        raise CliError(f"run {workflow_id} has not asked for a review yet; pass --round")
    return target


async def refuse_a_repeat(
    client: Client, workflow_id: str, decision: ReviewDecision, review_round: int
) -> None:
    """Refuse ``decision`` for ``review_round`` (read, not named with ``--round``) when it
    repeats the run's latest decision on an earlier round (`reviews.repeated_decision`): a
    command run again after the run moved on would decide the new round unseen.

    Raises:
        CliError: it repeats it (nothing is sent), or the run cannot be read.
    """
    if review_round <= 1:
        return  # no earlier round: nothing to repeat (and no query, a billed action)
    status = await fetch_status(client, workflow_id)
    if repeated := reviews.repeated_decision(status.history, decision, review_round, status.state):
        raise CliError(
            f"{workflow_id}: {decision.reviewer}'s {repeated.event} for round "
            f"{repeated.review_round} is already recorded and the run is at round "
            f"{review_round} now; nothing was sent (to decide round {review_round} too, "
            f"add --round {review_round})"
        )


async def answer_an_ended_run(
    client: Client, decision: ReviewDecision, target: reviews.ReviewTarget, closed: str
) -> NoReturn:
    """Say, sending nothing, what became of ``decision`` in a run that has ended (``closed``:
    how Temporal says it closed): applied before (a shell retry after the run completed), or
    too late. Either way this command applied nothing.

    Raises:
        CliError: always: the decision is already applied, or the run ended without it.
    """
    workflow_id = target.workflow_id
    review_round = decision.review_round or target.review_round
    try:
        with about_run(workflow_id):
            result = await run_result(client, workflow_id)
    except NoResult:
        result = None
    ended = result.state if result is not None else closed
    if result is not None and reviews.already_applied(result.history, decision, review_round):
        raise CliError(
            f"{workflow_id}: {decision.decision} for round {review_round} is already "
            f"applied; the run has ended: {ended}; nothing was sent"
        )
    raise CliError(
        f"run {workflow_id} has ended ({ended}); nothing was sent "
        f"(`starter.py result {workflow_id}` shows how it ended)"
    )


def require_applied(outcome: reviews.ReviewOutcome, workflow_id: str) -> str:
    """The line that tells the reviewer the run applied the decision sent (or counted it as a
    vote).

    Raises:
        CliError: the run did not apply it: its round was decided otherwise (the answer to an
            earlier decision with the same update id), or the run shows no decision for it.
    """
    line = outcome.describe(workflow_id)
    if not outcome.applied:
        raise CliError(line)
    return line


def signed_json(
    decision: ReviewDecision, target: reviews.ReviewTarget, signer: reviews.Signer
) -> str:
    """``decision`` signed for ``target``, as the one JSON argument any client sends as the
    review signal or the ``submit_review`` update."""
    signed = signer(decision.model_copy(update={"review_round": target.review_round}), target)
    return json.dumps(signed.model_dump(mode="json", exclude_none=True))


@one_line_errors
def review(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    decision: DecisionArgument,
    feedback: FeedbackOption = None,
    reviewer: ReviewerOption = None,
    review_round: Annotated[
        int | None,
        typer.Option("--round", min=1, help="the round you reviewed (status shows it)"),
    ] = None,
    print_only: Annotated[
        bool,
        typer.Option(
            "--print",
            help="print the signed review as JSON, for the Temporal CLI or the Web UI to send, "
            "instead of sending it",
        ),
    ] = False,
) -> None:
    """Approve, send back (reedit) or reject a run that awaits review.

    The decision is for the round the run waits in, read before sending, or the one --round
    names. Applied once however often it is sent: sent again while that round is open, it
    returns the first result; once the run has moved to the next round, a repeat of your
    last decision (same decision and feedback) is refused unless --round names the new round;
    a decision for a round that is over is refused by the run. With REVIEWER_KEY (or
    REVIEWER_KEY_FILE) the decision is signed for that round. Exit 1 when the decision is not
    applied (refused, its round decided otherwise, the run ended), with the reason.
    """
    payload, signer = signed_decision(decision, reviewer, feedback, review_round)
    if print_only:
        if signer is None:
            raise CliError("--print prints a signed review: set REVIEWER_KEY (or _FILE)")
        target = run_async(partial(review_target, workflow_id, payload.review_round))
        typer.echo(signed_json(payload, target, signer))
        return

    async def send(client: Client, settings: Settings) -> None:
        outcome = await send_decision(client, workflow_id, payload, signer)
        out.print(plain(require_applied(outcome, workflow_id)))

    run_async(send)


async def send_decision(
    client: Client,
    workflow_id: str,
    payload: ReviewDecision,
    signer: reviews.Signer | None,
    shown: reviews.ReviewTarget | None = None,
) -> reviews.ReviewOutcome:
    """Send ``payload`` to the run that holds ``workflow_id`` now, for the round it names, else
    the one ``shown`` names (the run and content the reviewer was shown), else the one the run
    waits in.

    Raises:
        CliError: the run refused it (its reason), it repeats the run's last decision
            (`refuse_a_repeat`), or the run has ended (`answer_an_ended_run`).
    """
    with about_run(workflow_id):
        target = await reviews.current_target(client, workflow_id)
    if target.ended is not None:
        await answer_an_ended_run(client, payload, target, target.ended.lower())
    if payload.review_round is not None:
        target = replace(shown or target, review_round=payload.review_round)
    elif shown is not None:
        target = shown
    elif target.review_round is not None:
        await refuse_a_repeat(client, workflow_id, payload, target.review_round)
    # The round read is the one decided: if the run moves on meanwhile, it refuses.
    decision = payload.model_copy(update={"review_round": target.review_round})
    try:
        with about_run(workflow_id):
            return await reviews.submit_review(
                client, workflow_id, decision, signer=signer, target=target
            )
    except WorkflowUpdateFailedError as error:
        reason = reviews.refusal_reason(error)
        raise CliError(f"review refused for {workflow_id}: {reason}") from None


@one_line_errors
def review_all(
    decision: DecisionArgument,
    state: Annotated[
        str,
        typer.Option(callback=choices.review_state, help="review every open run in this state"),
    ] = AWAIT_REVIEW,
    feedback: FeedbackOption = None,
    reviewer: ReviewerOption = None,
    concurrency: Annotated[int, typer.Option(min=1, max=1000, help="updates in flight")] = 32,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many runs")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
) -> None:
    """Approve (or reedit/reject) every run waiting in a review state, with a progress bar.

    Each run's decision names the round that run is in (read first), so it is applied once to
    that round; "applied" counts only runs that recorded it, and exit 1 says some were not.
    With REVIEWER_KEY (or REVIEWER_KEY_FILE) each decision is signed for its run and round.
    """
    from aiorch.ops import batch  # the batch machinery loads only for this command

    payload, signer = signed_decision(decision, reviewer, feedback)

    async def send_all(client: Client, settings: Settings) -> None:
        ids = await batch.waiting_runs(client, state, limit)
        if not ids:
            out.print(f"no open run is in {state}")
            return
        if not yes:
            typer.confirm(f"{decision} {len(ids)} run(s) in {state}?", abort=True)
        done = await batch.review_all_with_progress(
            client, ids, payload, concurrency=concurrency, console=err_console, signer=signer
        )
        out.print(
            f"{decision}: {done.applied} applied, {len(done.refused)} refused, "
            f"{len(done.errors)} failed of {done.found} in {done.seconds:.1f}s "
            f"({done.per_second:.0f}/s)"
        )
        for workflow_id, reason in [*done.refused.items(), *done.errors.items()][:20]:
            out.print(plain(f"  {workflow_id}: {reason}"))
        if done.errors:
            raise CliError(f"{len(done.errors)} review(s) failed; run the command again")
        if done.refused:
            raise CliError(f"{len(done.refused)} review(s) not applied (listed above)")

    run_async(send_all)


reviews_app = command_group("Reviewers' work as data: export their corrections.")


class ExportFormat(StrEnum):
    JSONL = "jsonl"


def moment(text: str, option: str) -> datetime:
    """An ISO 8601 date or time (UTC unless it says), or a duration back from now (``7d``).

    Raises:
        CliError: neither.
    """
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            return datetime.now(UTC) - parse_duration(text)
        except ValueError:
            raise CliError(
                f"{option}: {text!r} is neither a date or time (2026-11-01, "
                "2026-11-01T09:30:00Z) nor a duration back from now (7d, 12h)"
            ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@reviews_app.command("export")
@one_line_errors
def export(
    since: Annotated[
        str, typer.Option(help="corrections made since then: 2026-11-01, or 7d back from now")
    ],
    until: Annotated[str | None, typer.Option(help="and before then (default: now)")] = None,
    pipeline: Annotated[
        str | None, typer.Option(callback=choices.pipeline, help=choices.PIPELINE_HELP)
    ] = None,
    output_format: Annotated[
        ExportFormat, typer.Option("--format", help="one JSON object a line")
    ] = ExportFormat.JSONL,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write here instead of stdout")
    ] = None,
    with_input: Annotated[
        bool, typer.Option("--input/--no-input", help="include each run's request")
    ] = True,
) -> None:
    """Write every reedit (feedback, reply before and after) and every correction (fields
    before and after) that reviewers made in runs that have ended, one evaluation example a
    line, with the reviewer, the round and the pipeline's version."""
    start = moment(since, "--since")
    end = moment(until, "--until") if until is not None else None

    async def fetch(client: Client, settings: Settings) -> list[corrections.Example]:
        return await corrections.export(
            client, start, until=end, pipeline=pipeline, with_input=with_input
        )

    examples = run_async(fetch)
    lines = "".join(f"{example.model_dump_json()}\n" for example in examples)
    if output is None:
        sys.stdout.write(lines)
    else:
        output.write_text(lines, encoding="utf-8")
    runs = len({example.workflow_id for example in examples})
    err_console.print(f"{len(examples)} example(s) from {runs} run(s) ({output_format.value})")


def register(app: typer.Typer) -> None:
    """Add these commands to ``app`` (``review`` is `aiorch.cli.review_group`'s)."""
    app.command("review-all")(review_all)
    app.add_typer(reviews_app, name="reviews")
