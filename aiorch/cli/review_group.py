"""The ``review`` command group: ``review show ID`` (`aiorch.cli.review_show`), ``review ID
approve|reedit|reject`` (``review decide``, `aiorch.cli.reviews`) and ``review ID correct``
(``review correct``, `aiorch.cli.review_corrections`).

A review names the run first, as a reviewer says it (``review ID approve``); `ReviewGroup`
routes such a line to the command that takes it. A run whose id is one of the commands' names
is decided with ``review decide ID ...``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

import typer

from aiorch.cli import review_corrections, review_show, reviews
from aiorch.cli.output import OneLineErrors

DECIDE: Final = "decide"


def routed(commands: Collection[str], args: list[str]) -> list[str]:
    """``args`` with the command they mean first: ``ID correct ...`` is ``correct ID ...``,
    ``ID DECISION ...`` is ``decide ID DECISION ...``; a line that starts with a command's
    name (or an option, ``--help``) is as it is."""
    if not args or args[0] in commands or args[0].startswith("-"):
        return args
    if len(args) > 1 and args[1] in commands and args[1] != DECIDE:
        return [args[1], args[0], *args[2:]]
    return [DECIDE, *args]


class ReviewGroup(OneLineErrors):
    """The ``review`` group, whose command lines name the run first (`routed`)."""

    # ctx: Click's context, whose class Typer (vendoring Click) gives no public name.
    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        return super().resolve_command(ctx, routed(self.commands, args))


review_app = typer.Typer(
    cls=ReviewGroup,
    help="Review a run: `review show ID` shows what it waits for you to decide; `review ID "
    "approve|reedit|reject` decides it (review decide); `review ID correct --set PATH=VALUE` "
    "approves it with corrected fields (review correct).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
review_app.command("show")(review_show.show)
review_app.command(DECIDE)(reviews.review)
review_app.command("correct")(review_corrections.correct)


def register(app: typer.Typer) -> None:
    """Add the ``review`` group to ``app``."""
    app.add_typer(review_app, name="review")
