"""What the commands print, how a failure a user can cause or meet becomes one line, and the
shape of a command group.

Every expected failure (bad input, unknown run, server down, a review the run does not accept)
ends in one clear line on stderr and exit status 1, never a traceback.

Much of what the commands show was written by someone else: workflow ids, search attribute
values, history details, refusal reasons, queue messages. Every such value is printed through
`plain` (or `print_json`): as text, never read as Rich markup (``[/]`` would crash the command,
``[link=...]`` would draw a link), and without the control characters a terminal acts on (an
escape sequence can recolour, move the cursor, rewrite the window title or hide text).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.text import Text
from temporalio.service import RPCError

from workflows.errors import OrchestratorError

out = Console(soft_wrap=True, highlight=False)
# One error line stays one line (no wrapping at the terminal's width), so it can be grepped.
err_console = Console(stderr=True, soft_wrap=True)

P = ParamSpec("P")
T = TypeVar("T")


# C0 controls but the newline, DEL and C1 controls: ESC and CSI start terminal sequences.
_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
# What JSON leaves raw (it escapes C0 itself): DEL and C1.
_RAW_IN_JSON = re.compile(r"[\x7f-\x9f]")


class CliError(OrchestratorError):
    """A problem the user can fix; printed as one line."""


def plain(value: object) -> Text:
    """``value`` as text to print as it is: no markup, no control characters but newlines."""
    return Text(_CONTROLS.sub("", str(value)))


def print_json(document: str) -> None:
    """A JSON document, indented and coloured, with every control character written as a
    ``\\u`` escape: the same data, nothing a terminal acts on."""
    text = json.dumps(json.loads(document), indent=2, ensure_ascii=False)
    out.print(JSONHighlighter()(_RAW_IN_JSON.sub(lambda m: f"\\u{ord(m[0]):04x}", text)))


def command_group(help_text: str) -> typer.Typer:
    """A group of subcommands (``dlq``, ``keys``, ``inbox``): its help when called bare."""
    return typer.Typer(help=help_text, no_args_is_help=True)


def print_error(message: str) -> None:
    """``error: message`` on stderr, as one line."""
    err_console.print(Text.assemble(("error:", "red"), " ", plain(message)), highlight=False)


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
