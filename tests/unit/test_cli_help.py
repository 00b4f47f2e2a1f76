"""The `aiorch` command line's help and its errors, as a user reads them (Typer's runner, in
this process): paragraphs wrapped to the terminal, never mid-sentence; no ``<bool>`` on a
flag; the exit codes listed; every error one line starting ``error: ``."""

from __future__ import annotations

import itertools
import re

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.cli.output import EXIT_CODES, EXIT_USAGE
from aiorch.devstack.cli import app as devstack_app
from aiorch.devstack.docs import ROOT


def command_paths(app: typer.Typer) -> list[list[str]]:
    """Every command and group of ``app``, as the words that name it (the app itself: [])."""
    found: list[list[str]] = []

    def walk(group: TyperGroup, path: list[str]) -> None:
        found.append(path)
        for name, command in group.commands.items():
            if isinstance(command, TyperGroup):
                walk(command, [*path, name])
            else:
                found.append([*path, name])

    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    walk(root, [])
    return found


COMMANDS = command_paths(build_app())
DEVSTACK_COMMANDS = command_paths(devstack_app)


def help_text(app: typer.Typer, path: list[str], columns: int) -> str:
    done = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert done.exit_code == 0, done.output
    return done.output


def early_breaks(text: str, width: int) -> list[tuple[str, str]]:
    """The lines of ``text`` that end a line of prose early: where the next line continues the
    same paragraph (its text starts in the column a word of this line starts in) and its
    first word would still have fit within ``width``. Rows of a list (an option, an argument
    and its ``<type>``, a command, an exit code: a name, then two spaces or more) start
    paragraphs of their own."""
    lines = text.splitlines()
    found = []
    for line, following in itertools.pairwise(lines):
        column = len(following) - len(following.lstrip())
        body = following.strip()
        if not body or column == 0 or re.match(r"^(-|\S+\s{2,}|\S+ <)", body):
            continue
        continues = len(line) > column and line[column - 1] == " " and line[column] != " "
        if continues and len(line) + 1 + len(body.split()[0]) <= width:
            found.append((line, body))
    return found


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize(
    ("app", "path"),
    [(build_app(), path) for path in COMMANDS]
    + [(devstack_app, path) for path in DEVSTACK_COMMANDS],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_help_is_wrapped_to_the_terminal_never_mid_sentence(
    app: typer.Typer, path: list[str], columns: int
) -> None:
    """Every command's help, at 80 and 120 columns, fits the terminal and wraps its prose
    where the terminal ends: no line of a paragraph breaks early (where the next word would
    still have fit, as a docstring's own line breaks did), and no flag shows a ``<bool>``."""
    text = help_text(app, path, columns)
    assert "<bool>" not in text
    assert max(len(line) for line in text.splitlines()) <= columns
    assert early_breaks(text, width=min(columns, 80) - 2) == []  # Click stops at 80 columns


def test_the_app_help_lists_the_exit_codes() -> None:
    """``--help`` ends with the exit status of every command, each code with what it means."""
    text = help_text(build_app(), [], 80)
    listed = text.split("Exit status:", 1)[1]
    for code, meaning in EXIT_CODES:
        assert re.search(rf"^\s+{code}\s+{re.escape(meaning)}$", listed, re.MULTILINE), code


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--state", "nope"], "error: Invalid value for '--state': 'nope' is no state"),
        (["revie", "x"], "error: No such command 'revie'."),
        (["status"], "error: Missing argument 'workflow_id'."),
        (["status", "x", "--bogus"], "error: No such option: --bogus"),
        (["keys", "payload", "extra"], "error: Got unexpected extra argument(s) (extra)"),
    ],
)
def test_a_command_line_that_does_not_parse_is_one_error_line(
    args: list[str], message: str
) -> None:
    """A bad command line fails as every other error does: one line starting ``error: ``
    (not Click's usage block and ``Error:``), saying where help is, exit status 2."""
    done = CliRunner().invoke(build_app(), args)
    assert done.exit_code == EXIT_USAGE
    [line] = done.output.splitlines()
    assert line.startswith(message), line
    assert line.endswith("--help)")


def test_a_bare_group_shows_its_help() -> None:
    """``aiorch dlq`` alone prints the group's help and succeeds."""
    done = CliRunner().invoke(build_app(), ["dlq"])
    assert done.exit_code == 0
    assert done.output.startswith("Usage: ") and "redrive" in done.output


def test_the_docs_list_the_same_exit_codes() -> None:
    """docs/cli.md's table of exit codes is `EXIT_CODES`, row for row."""
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    table = page.split("<!-- exit-codes:begin", 1)[1].split("<!-- exit-codes:end -->", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", table, re.MULTILINE)
    assert rows == [(str(code), meaning) for code, meaning in EXIT_CODES]


READ_COMMANDS = [
    ["list"],
    ["status"],
    ["history"],
    ["result"],
    ["stats"],
    ["stuck"],
    ["spend"],
    ["dlq", "list"],
]


def test_every_read_command_takes_json() -> None:
    """Each command that reads runs, spend or dead letters offers ``--json`` for scripts."""
    for path in READ_COMMANDS:
        command: object = typer.main.get_command(build_app())
        for name in path:
            assert isinstance(command, TyperGroup)
            command = command.commands[name]
        params = getattr(command, "params", [])
        options = {opt for param in params for opt in getattr(param, "opts", [])}
        assert "--json" in options, path
