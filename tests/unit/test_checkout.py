"""``python starter.py`` from a checkout, run by a Python that has none of the project's
packages (the system's ``python3``, as a shell that has not activated ``.venv`` has it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiorch.devstack.docs import ROOT


def system_python() -> Path:
    """The interpreter the venv was made from: the system's, without the venv's packages."""
    found = Path(sys.base_exec_prefix) / "bin" / f"python{sys.version_info[0]}"
    assert found.is_file(), found
    return found


def run_as_a_shell_would(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages, so the run is without the project's packages even where the
    # system's Python has some of them installed.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.pop("AIORCH_RUN_BY_CHECKOUT_VENV", None)
    return subprocess.run(
        [str(system_python()), "-S", str(script), *args],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_system_python_lacks_the_packages() -> None:
    """The interpreter these tests run the scripts with cannot import the CLI itself (else
    they would prove nothing)."""
    done = subprocess.run(
        [str(system_python()), "-S", "-c", "import typer"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and "No module named 'typer'" in done.stderr


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the checkout's entry point and the package it runs, without a .venv."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "aiorch", root / "aiorch", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "starter.py", root)
    return root


def test_starter_runs_with_the_checkouts_venv(checkout: Path) -> None:
    """`python starter.py keys payload` with a Python lacking the packages runs with the
    checkout's .venv (here: the one these tests run in), as the README's commands after
    `make demo` are typed without activating it, and prints the key line."""
    (checkout / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    done = run_as_a_shell_would(checkout / "starter.py", "keys", "payload")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PAYLOAD_KEYS=k1:")


def test_without_a_venv_one_line_says_how_to_get_one(checkout: Path) -> None:
    """In a checkout that has no .venv yet, `python starter.py list` is one line naming the
    missing package and the command that sets .venv up, exit status 1, no traceback."""
    done = run_as_a_shell_would(checkout / "starter.py", "list")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"error: {system_python()} has no package 'typer' and there is no .venv here; "
        "run `make demo` (or `make dev`) once to set up .venv, or `pip install .`\n"
    )


def test_a_venv_without_the_packages_is_one_line_not_a_loop(checkout: Path) -> None:
    """A .venv whose Python lacks the packages too (a broken one: here, the system's Python
    without site-packages)
    runs the script once and then says in one line that .venv lacks the package and how to
    install it, instead of starting itself again and again."""
    broken = checkout / ".venv" / "bin" / "python"
    broken.parent.mkdir(parents=True)
    broken.write_text(f'#!/bin/sh\nexec {system_python()} -S "$@"\n')
    broken.chmod(0o755)
    done = run_as_a_shell_would(checkout / "starter.py", "list")
    assert done.returncode == 1
    assert done.stderr == (
        "error: .venv lacks the package 'typer'; run `make dev` (or `make demo`) to install "
        "what it needs\n"
    )
