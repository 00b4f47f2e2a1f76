"""What the commands print, how a failure a user can cause or meet becomes one line, and the
shape of the app and its command groups.

Every expected failure (bad input, unknown run, server down, a review the run does not accept)
ends in one clear line on stderr that starts with ``error: `` (`print_error`), never a
traceback; a command line that does not parse too (`OneLineErrors`). The exit status says which
kind of failure it was (`EXIT_CODES`, shown in ``--help``).

Much of what the commands show was written by someone else: workflow ids, search attribute
values, history details, refusal reasons, queue messages. Every such value is printed through
`plain` (or `print_json`): as text, never read as Rich markup (``[/]`` would crash the command,
``[link=...]`` would draw a link), and without the control characters a terminal acts on (an
escape sequence can recolour, move the cursor, rewrite the window title or hide text).
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from temporalio.client import RPCTimeoutOrCancelledError
from temporalio.service import RPCError
from typer.core import TyperGroup

from workflows.errors import OrchestratorError

out = Console(soft_wrap=True, highlight=False)
# One error line stays one line (no wrapping at the terminal's width), so it can be grepped.
err_console = Console(stderr=True, soft_wrap=True)

P = ParamSpec("P")
T = TypeVar("T")


# The exit status of every command: scripts tell a failed run from a failed command by it.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_RUN_FAILED = 3
EXIT_CHECK_FAILED = 4
EXIT_INTERRUPTED = 130
EXIT_CODES = (
    (EXIT_OK, "done"),
    (EXIT_ERROR, "an error, said in one line on stderr that starts with 'error: '"),
    (EXIT_USAGE, "the command line does not parse (an unknown option, a bad value)"),
    (EXIT_RUN_FAILED, "the run ended failed, dead_letter or cancelled (result, start --wait)"),
    (EXIT_CHECK_FAILED, "a check the command was asked to make failed (a lab run --fail-if held)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
)
# Click keeps a paragraph that starts with \b as it is written, one line each.
EXIT_CODES_EPILOG = "\b\nExit status:\n" + "\n".join(
    f"  {code:<3} {meaning}" for code, meaning in EXIT_CODES
)


# C0 controls but the newline, DEL and C1 controls: ESC and CSI start terminal sequences.
_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
# What JSON leaves raw (it escapes C0 itself): DEL and C1.
_RAW_IN_JSON = re.compile(r"[\x7f-\x9f]")


class CliError(OrchestratorError):
    """A problem the user can fix; printed as one line, exit status 1."""

    exit_code = EXIT_ERROR


class UsageError(CliError):
    """A command line that parses but asks for what no command does (a reedit with no
    feedback); exit status 2, as a command line that does not parse."""

    exit_code = EXIT_USAGE


class RunDidNotComplete(CliError):
    """The run the command waited for, or read, ended failed, dead_letter or cancelled."""

    exit_code = EXIT_RUN_FAILED


def plain(value: object) -> Text:
    """``value`` as text to print as it is: no markup, no control characters but newlines."""
    return Text(_CONTROLS.sub("", str(value)))


def print_json(document: str) -> None:
    """A JSON document, indented and coloured, with every control character written as a
    ``\\u`` escape: the same data, nothing a terminal acts on."""
    text = json.dumps(json.loads(document), indent=2, ensure_ascii=False)
    out.print(JSONHighlighter()(_RAW_IN_JSON.sub(lambda m: f"\\u{ord(m[0]):04x}", text)))


def fits_terminal(table: Table, console: Console = out) -> bool:
    """Whether ``table`` fits ``console``'s width with no cell cut: each column at least as
    wide as its longest word, and its ``no_wrap`` columns as their longest value."""
    unbounded = console.options.update(max_width=1_000_000)
    return Measurement.get(console, unbounded, table).minimum <= console.width


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Text | str]],
    *,
    title: Text | str | None = None,
    wrap: Collection[str] = (),
    justify_right: Collection[str] = (),
) -> None:
    """``rows`` under ``columns``, never cut: a table where every cell fits whole (the
    ``wrap`` columns may wrap between words), else, on a narrow terminal, one line per row with
    the cells aligned in columns, which the terminal wraps."""
    table = Table(title=title)
    for column in columns:
        table.add_column(
            column,
            no_wrap=column not in wrap,
            overflow="fold",
            justify="right" if column in justify_right else "left",
        )
    for row in rows:
        table.add_row(*row)
    if fits_terminal(table):
        out.print(table)
        return
    cells = [[Text(column, style="bold") for column in columns]]
    cells += [[cell if isinstance(cell, Text) else Text(cell) for cell in row] for row in rows]
    widths = [max(line[i].cell_len for line in cells) for i in range(len(columns))]
    if title is not None:
        out.print(title)
    for line in cells:
        padded = [cell.copy() for cell in line]
        for cell, width in zip(padded[:-1], widths, strict=False):
            cell.pad_right(width - cell.cell_len)
        shown = Text("  ").join(padded)
        shown.rstrip()
        out.print(shown)


class OneLineErrors(TyperGroup):
    """A command group whose command lines fail in one ``error:`` line, a bad one too (Click
    would print its usage and ``Error: ...``), and whose help lists each command with its whole
    first paragraph, wrapped to the terminal (Click would cut it at about 45 characters)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            code = super().main(
                args,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except typer.Abort:
            print_error("aborted; nothing was done")
            code = EXIT_ERROR
        except typer.TyperException as error:  # Click's errors: parsing, bad values, ...
            print_error(usage_error_text(error))
            code = error.exit_code
        code = code if isinstance(code, int) else EXIT_OK
        if standalone_mode:
            sys.exit(code)
        return code

    # ctx: Click's context, whose class Typer (vendoring Click) gives no public name.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # Bare, the group shows its help and succeeds (Click calls that a usage error).
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            typer.echo(ctx.get_help())
            raise typer.Exit(EXIT_OK)
        return super().parse_args(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None and command.short_help is None and command.help:
            command.short_help = summary(command.help)
        return command


def summary(help_text: str) -> str:
    """The first paragraph of a help text as one line (a docstring's line breaks removed)."""
    return " ".join(inspect.cleandoc(help_text).split("\n\n")[0].split())


def usage_error_text(error: typer.TyperException) -> str:
    """A command line that does not parse, said in one line, with where help is."""
    context = getattr(error, "ctx", None)
    where = f" (see {context.command_path} --help)" if context is not None else ""
    return f"{error.format_message()}{where}"


def cli_app(help_text: str, *, epilog: str | None = EXIT_CODES_EPILOG) -> typer.Typer:
    """A command line app: `OneLineErrors`, Click's help layout (paragraphs rewrapped to the
    terminal, no metavar on a flag), no tracebacks, no shell completion."""
    return typer.Typer(
        cls=OneLineErrors,
        help=help_text,
        epilog=epilog,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        add_completion=False,
    )


def command_group(help_text: str) -> typer.Typer:
    """A group of subcommands (``dlq``, ``keys``, ``inbox``): its help when called bare."""
    return typer.Typer(
        cls=OneLineErrors, help=help_text, no_args_is_help=True, rich_markup_mode=None
    )


def print_error(message: str) -> None:
    """``error: message`` on stderr, as one line: every error the command line prints."""
    err_console.print(Text.assemble(("error:", "red"), " ", plain(message)))


def one_line_errors(func: Callable[P, T]) -> Callable[P, T]:
    """Turn expected failures into one line on stderr and their exit status (1 unless the
    error names another: `RunDidNotComplete`)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return func(*args, **kwargs)
        except (OrchestratorError, RPCError, RPCTimeoutOrCancelledError) as error:
            print_error(str(error))
            raise typer.Exit(getattr(error, "exit_code", EXIT_ERROR)) from None

    return wrapper
