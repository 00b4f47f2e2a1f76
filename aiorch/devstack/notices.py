"""What the local stack says when one of its parts exits while it is up."""

from __future__ import annotations

from pathlib import Path

# The part a person can start again from another shell, and how.
RESTARTS = {"worker": "python worker.py"}


def exited(name: str, returncode: int | None, log_path: Path) -> str:
    """One line (console markup) for part ``name`` having exited: its code, its log, and, for
    a part one can start again by hand (the worker: runs wait until one polls), how."""
    line = f"[red]{name} exited (code {returncode})[/]; see {log_path}"
    if name in RESTARTS:
        line += (
            f"; runs wait until one is back: start one with `{RESTARTS[name]}` in a shell with "
            "the exports above"
        )
    return line
