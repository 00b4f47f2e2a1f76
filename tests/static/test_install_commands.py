"""What gets installed cannot depend on the installer or on what the registry published last.

Every install in the Makefile, the Dockerfile and CI is ``--no-deps`` from a complete
hash-locked set (or the project itself, built without resolving anything). pip 23.2, bundled
with Python 3.11.7 and 3.12.1, resolves a requirement that carries an extra
(``httpx[http2]``) against the registry's newest release before it settles on the pin, and in
hash-checking mode that fetch is refused: a resolving install broke the README's first command
on the day a new httpx was published. With ``--no-deps`` no resolver runs at all, so the lock
must hold every dependency itself, which the last test checks.
"""

from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"
DOCKERFILE = ROOT / "Dockerfile"
CI_SCRIPT = ROOT / ".ci" / "run"
DEV_LOCK = ROOT / "requirements" / "dev.txt"
LOCK_FILE = re.compile(r"(requirements/\w+\.txt|\$\(LOCK_\w+\))")
# The project itself, from its folder or a wheel it built: never a name the registry resolves.
PROJECT_TARGET = re.compile(r"\.|/wheels/\*\.whl")
OPTIONS_WITH_VALUES = ("-r", "--requirement", "--python", "-c", "--constraint")


def resolving_problem(command: str) -> str | None:
    """Why an install command could resolve something at install time, or None if it cannot:
    it must be ``--no-deps`` and install either hash-checked locks or the project itself."""
    words = shlex.split(command)
    if "--no-deps" not in words:
        return "not --no-deps: the installer resolves dependencies"
    values = {i + 1 for i, word in enumerate(words) if word in OPTIONS_WITH_VALUES}
    locks = [words[i] for i in values if words[i - 1] in ("-r", "--requirement")]
    if locks and "--require-hashes" not in words:
        return "a lock installed without --require-hashes"
    if not all(LOCK_FILE.fullmatch(lock) for lock in locks):
        return f"a requirements file that is not a lock: {locks}"
    named = [w for i, w in enumerate(words) if i not in values and not w.startswith("-")]
    if by_name := [word for word in named if not PROJECT_TARGET.fullmatch(word)]:
        return f"installs {by_name} by name, which the registry resolves"
    return None


def install_commands(text: str, installer: str) -> list[str]:
    """Each install in ``text`` (a shell script, Makefile or Dockerfile): what follows the
    ``installer`` up to the end of its command."""
    joined = text.replace("\\\n", " ")
    return [
        match.group(1).strip()
        for match in re.finditer(re.escape(installer) + r"([^&;|\n]*)", joined)
    ]


def installs_in_project() -> dict[str, list[str]]:
    makefile = MAKEFILE.read_text(encoding="utf-8")
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    # CI's extra venvs swap the installer (PIP_INSTALL="uv pip install ..."), not the command.
    ci = re.sub(r'PIP_INSTALL="[^"]*"', "", CI_SCRIPT.read_text(encoding="utf-8"))
    recipes = "\n".join(line for line in makefile.splitlines() if line.startswith("\t"))
    return {
        "Makefile": install_commands(recipes, "$(PIP_INSTALL)"),
        "Dockerfile": install_commands(dockerfile, "pip install"),
        ".ci/run": install_commands(ci, "pip install"),
    }


def test_every_install_the_project_runs_resolves_nothing() -> None:
    """The Makefile (what `make demo` and `make test` run), the image and CI install only
    hash-locked sets and the project itself, each with ``--no-deps``."""
    found = installs_in_project()
    assert len(found["Makefile"]) >= 2, found
    assert len(found["Dockerfile"]) >= 3, found
    problems = {
        f"{where}: {command}": problem
        for where, commands in found.items()
        for command in commands
        if (problem := resolving_problem(command)) is not None
    }
    assert not problems, problems


@pytest.mark.parametrize(
    "command",
    [
        "--quiet --require-hashes -r requirements/dev.txt",
        "--no-deps -r requirements/dev.txt",
        "--no-deps --require-hashes -r extra-requirements.txt",
        "--no-deps httpx",
        "--upgrade pip",
    ],
)
def test_the_check_refuses_an_install_that_resolves(command: str) -> None:
    """An install that a resolver would settle (no ``--no-deps``, a lock without hashes, a
    file that is no lock, a package by name) is reported, so the check above can fail."""
    assert resolving_problem(command) is not None


@pytest.mark.parametrize(
    "command",
    [
        "--quiet --no-deps --require-hashes -r $(LOCK_DEV)",
        "--no-deps --require-hashes -r requirements/runtime.txt",
        "--quiet --no-deps --no-build-isolation -e .",
        "--no-deps /wheels/*.whl",
    ],
)
def test_the_check_accepts_locked_and_project_installs(command: str) -> None:
    """What the project does install passes the check."""
    assert resolving_problem(command) is None


def _lock_names(path: Path) -> set[str]:
    names: set[str] = set()
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        spec = line.split("#", 1)[0].partition(" --hash")[0].strip()
        if spec:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate():
                names.add(canonicalize_name(requirement.name))
    return names


def _needs(marker: Marker | None, extras: frozenset[str]) -> bool:
    environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
    return marker is None or any(marker.evaluate(env) for env in environments)


def test_the_dev_lock_holds_every_dependency_of_what_it_installs() -> None:
    """Installed with ``--no-deps``, the dev lock must itself hold every requirement of every
    package it pins (with the extras asked for), on this Python: nothing is left for a
    resolver to add."""
    locked = _lock_names(DEV_LOCK)
    missing: set[str] = set()
    queue: list[tuple[str, frozenset[str]]] = [("ai-orchestrator", frozenset({"dev"}))]
    queue += [(name, frozenset()) for name in locked]
    visited: set[tuple[str, frozenset[str]]] = set()
    while queue:
        name, extras = queue.pop()
        if (name, extras) in visited:
            continue
        visited.add((name, extras))
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if not _needs(requirement.marker, extras):
                continue
            key = canonicalize_name(requirement.name)
            if key == "ai-orchestrator":
                queue.append((key, frozenset(requirement.extras)))
                continue
            if key not in locked:
                missing.add(f"{key} (for {name})")
            elif requirement.extras:
                queue.append((key, frozenset(requirement.extras)))
    assert not missing, sorted(missing)
