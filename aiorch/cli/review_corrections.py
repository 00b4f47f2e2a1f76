"""``review ID correct``: approve a run waiting for review with corrected fields, from the
command line, as the inbox's "Approve with these fields" does.

The fields are the run's own (read as ``review show`` reads them), changed by ``--set PATH=VALUE``
(a path as ``review show`` and the problems name it, ``line_items[1].amount``; the value read
as the type the field holds) and, or, replaced whole by ``--fields FILE`` (one JSON object). A
path that names no field, or a value of the wrong type, is one line and exit 2, and nothing is
sent. The approval goes through the same ``submit_review`` update and payload as the inbox's,
signed with ``REVIEWER_KEY`` for the round and the content that was read; the run validates the
fields again, and the command says what came of them: stored (or moved on), or back in review
with the problems the corrected fields still have (exit 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus

from aiorch.cli.output import CliError, UsageError, one_line_errors, out, plain
from aiorch.cli.review_show import read_for_review
from aiorch.cli.reviews import (
    FeedbackOption,
    ReviewerOption,
    require_applied,
    send_decision,
    signed_decision,
)
from aiorch.cli.session import about_run, run_async
from aiorch.ops import field_paths, reviews
from aiorch.ops.field_paths import FieldPath, FieldPathError
from aiorch.ops.retries import retrying
from aiorch.ops.review_views import RunView
from aiorch_runtime.config import Settings
from workflows.engine.graph import TERMINAL_STATES
from workflows.payloads import ReviewDecision, describe_validation_error


def parsed_sets(sets: list[str]) -> list[tuple[FieldPath, str]]:
    """Each ``PATH=VALUE`` as its path and the value's text.

    Raises:
        UsageError: one is not ``PATH=VALUE`` with a field path.
    """
    parsed = []
    for item in sets:
        path, equals, text = item.partition("=")
        if not equals:
            raise UsageError(f"--set {item!r}: write PATH=VALUE, such as total=30.00")
        try:
            parsed.append((field_paths.parse(path.strip()), text))
        except FieldPathError as err:
            raise UsageError(f"--set: {err}") from None
    return parsed


def read_fields(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        UsageError: it cannot be read, or holds no JSON object.
    """
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--fields {path}: cannot be read ({err})") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"--fields {path}: not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(fields, dict):
        raise UsageError(f"--fields {path}: must hold one JSON object (the fields)")
    return fields


def corrected_fields(
    fields: dict[str, Any], whole: dict[str, Any] | None, sets: list[tuple[FieldPath, str]]
) -> dict[str, Any]:
    """``fields`` (the run's), replaced by ``whole`` and then changed by each of ``sets``.

    Raises:
        UsageError: a field ``whole`` or a path names is none of the run's, or a value is not
            of its field's type.
    """
    if whole is not None:
        unknown = [name for name in whole if name not in fields]
        if unknown:
            raise UsageError(
                f"--fields: {unknown[0]} is no field of the run's fields (they are: "
                f"{', '.join(fields)})"
            )
        fields = whole
    try:
        for path, text in sets:
            value = field_paths.typed(path, field_paths.value_at(fields, path), text)
            fields = field_paths.with_value(fields, path, value)
    except FieldPathError as err:
        raise UsageError(f"--set: {err}; nothing was sent") from None
    return fields


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """``total: 2100.00 -> 2068.79`` for each value the correction changes, by its path."""
    old, new = dict(field_paths.leaves(before)), dict(field_paths.leaves(after))
    return [
        f"{path}: {_shown(old.get(path))} -> {_shown(new.get(path))}"
        for path in [*old, *(path for path in new if path not in old)]
        if old.get(path) != new.get(path) or (path in old) != (path in new)
    ]


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


async def where_it_went(client: Client, run: RunView) -> str:
    """Where the run went with the corrected fields of ``run``'s round. A run validates
    corrected fields in the workflow task that took them, whose end the update's answer
    waits for, so by now it has: ended (read with describe, which bills nothing), or moved on
    (its ``review_view``, one billed action).

    Raises:
        CliError: it waits in a later round: the fields still have problems (named).
    """
    workflow_id = run.workflow_id
    with about_run(workflow_id):
        described = await retrying(client.get_workflow_handle(workflow_id).describe)
    if described.status not in (None, WorkflowExecutionStatus.RUNNING):
        return f"the run has ended: {described.status.name.lower()}"
    now = (await read_for_review(client, workflow_id)).view
    if now.waiting and now.review_round > run.view.review_round:
        raise CliError(
            f"{workflow_id}: the run did not take the corrected fields: round "
            f"{now.review_round} waits with {len(now.problems)} problem(s): "
            f"{'; '.join(now.problems)} (correct again, or decide round {now.review_round}: "
            f"aiorch review {workflow_id} approve|reedit|reject)"
        )
    # The run may rest in its final state while the update that brought the fields finishes.
    if now.state in TERMINAL_STATES:
        return f"the run has ended: {now.state}"
    return f"the run took them and is in {now.state} now"


@one_line_errors
def correct(
    workflow_id: Annotated[str, typer.Argument(help="the run's id")],
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="PATH=VALUE",
            help="set one field (repeat it): total=30.00, 'line_items[1].amount=5'",
        ),
    ] = None,
    fields_file: Annotated[
        Path | None,
        typer.Option(
            "--fields",
            exists=True,
            dir_okay=False,
            help="a JSON object: the corrected fields whole (any --set applies on top)",
        ),
    ] = None,
    feedback: FeedbackOption = None,
    reviewer: ReviewerOption = None,
    review_round: Annotated[
        int | None,
        typer.Option("--round", min=1, help="the round you reviewed (review show shows it)"),
    ] = None,
) -> None:
    """Approve a run waiting for review with corrected fields (`review ID correct`).

    The run's fields, as `review show` lists them, changed by each --set (a value is read as
    the type its field holds: text, a number, true/false, JSON for a list or an object) or
    replaced by --fields. Signed with REVIEWER_KEY like any decision; the run validates the
    fields again: still wrong, it waits in a new round with the problems (exit 1).
    """
    parsed = parsed_sets(sets or [])
    whole = read_fields(fields_file) if fields_file is not None else None
    if not parsed and whole is None:
        raise UsageError("correct needs --set PATH=VALUE or --fields FILE: the fields to change")
    payload, signer = signed_decision("approve", reviewer, feedback, review_round)

    async def send(client: Client, settings: Settings) -> None:
        run = await read_for_review(client, workflow_id)
        view = run.view
        if not view.corrections or view.fields is None:
            raise CliError(f"run {workflow_id} takes no corrected fields; nothing was sent")
        if review_round is not None and view.waiting and review_round != view.review_round:
            raise CliError(
                f"{workflow_id} waits in round {view.review_round} now, not {review_round}; "
                f"nothing was sent (`aiorch review show {workflow_id}` shows it)"
            )
        fields = corrected_fields(view.fields, whole, parsed)
        changed = changes(view.fields, fields)
        if not changed and view.waiting:  # an ended run's answer comes from send_decision
            raise UsageError(
                "these corrections change no field; nothing was sent (to approve the fields "
                f"as they are: aiorch review {workflow_id} approve)"
            )
        try:
            decision = ReviewDecision.model_validate(
                {**payload.model_dump(), "fields": fields, "review_round": view.review_round}
            )
        except ValidationError as error:
            raise CliError(f"invalid review: {describe_validation_error(error)}") from None
        shown = reviews.ReviewTarget(
            workflow_id=workflow_id,
            run_id=run.run_id,
            chain_id=view.chain_id or None,
            review_round=view.review_round,
            digest=view.content_digest or None,
        )
        require_applied(
            await send_decision(client, workflow_id, decision, signer, shown), workflow_id
        )
        out.print(plain(f"{workflow_id}: correction accepted (round {view.review_round}):"))
        for line in changed:
            out.print(plain(f"  {line}"))
        out.print(plain(f"{workflow_id}: {await where_it_went(client, run)}"))

    run_async(send)
