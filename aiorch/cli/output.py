"""What the commands print, how a failure a user can cause or meet becomes one line, and the
shape of a command group.

Every expected failure (bad input, unknown run, server down, a review the run does not accept)
ends in one clear line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from temporalio.service import RPCError

from workflows.errors import OrchestratorError

out = Console(soft_wrap=True, highlight=False)
# One error line stays one line (no wrapping at the terminal's width), so it can be grepped.
err_console = Console(stderr=True, soft_wrap=True)

P = ParamSpec("P")
T = TypeVar("T")


class CliError(OrchestratorError):
    """A problem the user can fix; printed as one line."""


def command_group(help_text: str) -> typer.Typer:
    """A group of subcommands (``dlq``, ``keys``, ``inbox``): its help when called bare."""
    return typer.Typer(help=help_text, no_args_is_help=True)


def print_error(message: str) -> None:
    """``error: message`` on stderr, as one line."""
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False)


def one_line_errors(func: Callable[P, T]) -> Callable[P, T]:
    """Turn expected failures into one line on stderr and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return func(*args, **kwargs)
        except (OrchestratorError, RPCError) as error:
            print_error(str(error))
            raise typer.Exit(1) from None

    return wrapper
