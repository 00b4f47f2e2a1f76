"""The README a newcomer reads: short, its links alive, and every command it shows one the
project has, with options it takes (parsed by the CLI itself, as a shell would pass them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer

from aiorch.cli.app import build_app
from aiorch.cli.review_group import ReviewGroup, routed
from aiorch.devstack.config_page import anchor
from aiorch.devstack.docs import ROOT
from workflows.llm.graph import GRAPH

README = ROOT / "README.md"
PAGES = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_LINES = 300
# What the README's placeholders stand for when a command is parsed.
PLACEHOLDERS = {"<id>": "0123456789abcdef01234567"}


def code_lines(text: str, language: str = "bash") -> list[str]:
    """Every command line of the ``language`` code blocks in ``text``, comments cut off."""
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    lines = []
    for block in blocks:
        for raw in block.splitlines():
            line = raw.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def usage_problem(args: list[str]) -> str | None:
    """What the CLI would say of ``args`` as a usage error (an unknown command or option, a
    missing argument), parsing them down to the command they name and running nothing; None
    when they parse."""
    command: Any = typer.main.get_command(build_app())
    name, rest = "starter.py", list(args)
    while hasattr(command, "commands"):
        if isinstance(command, ReviewGroup):  # `review ID approve` names the run first
            rest = routed(command.commands, rest)
        if not rest or rest[0] not in command.commands:
            return f"no command {rest[:1]} under {name}"
        name = rest.pop(0)
        command = command.commands[name]
    try:
        command.make_context(name, rest)
    except Exception as err:  # Typer's own Click raises its UsageError (exit code 2)
        if getattr(err, "exit_code", None) == 2:
            return str(err.format_message()) if hasattr(err, "format_message") else str(err)
        raise
    return None


def test_the_readme_is_read_in_ten_minutes() -> None:
    """At most 300 lines: the rest is in docs/, which the README links."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_every_starter_command_the_readme_shows_parses() -> None:
    """Each `python starter.py ...` line of the README names commands and options the CLI has,
    with the arguments they need."""
    commands = [
        line for line in code_lines(README.read_text(encoding="utf-8")) if "starter.py" in line
    ]
    assert len(commands) >= 15
    for line in commands:
        for placeholder, value in PLACEHOLDERS.items():
            line = line.replace(placeholder, value)
        words = shlex.split(line)
        args = words[words.index("starter.py") + 1 :]
        assert usage_problem(args) is None, f"{line}: {usage_problem(args)}"


def test_a_wrong_option_in_a_shown_command_is_caught() -> None:
    """The check above fails for an option the CLI does not have or a missing argument."""
    for args in (["status", PLACEHOLDERS["<id>"], "--colour"], ["review", "x"], ["nosuch"]):
        assert usage_problem(args) is not None, args


def test_every_make_target_the_readme_shows_exists() -> None:
    """`make X` lines name targets of the Makefile."""
    targets = set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    shown = [line.split()[1] for line in code_lines(README.read_text()) if line.startswith("make ")]
    assert {"demo", "test", "dev"} <= set(shown)
    assert set(shown) <= targets, set(shown) - targets


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {anchor(heading) for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_every_link_in_the_readme_and_docs_resolves() -> None:
    """Every relative link in README.md, CHANGELOG.md and docs/*.md names a file that exists
    and, with a fragment, a heading in it."""
    broken = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", link):
                continue
            target, _, fragment = link.partition("#")
            path = (page.parent / target) if target else page
            if not path.exists() or (fragment and fragment not in _anchors(path)):
                broken.append(f"{page.relative_to(ROOT)}: {link}")
    assert broken == []


def test_the_state_table_lists_each_state_once_as_the_graph_has_it() -> None:
    """The README's table of the LLM pipeline's states names each state of its graph exactly
    once, with the status and progress the graph gives it."""
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- graph:llm:end -->", 1)[1].split("\n\n", 2)[1]
    named: list[str] = []
    for row in table.splitlines()[2:]:
        states, status, progress = (cell.strip() for cell in row.strip("|").split("|"))
        for state in states.split(" (", 1)[0].split(", "):
            named.append(state)
            info = GRAPH.info(state)
            assert status == info.status.value, row
            assert progress == f"{info.progress}%", row
    assert sorted(named) == sorted(set(named)), "a state is listed twice"
    assert set(named) == set(GRAPH.states), set(GRAPH.states) ^ set(named)
