"""The operator's command line (``python starter.py``, installed: ``aiorch``): one Typer app."""

from __future__ import annotations

import os
import sys

from aiorch.cli.app import build_app

__all__ = ["build_app", "main"]


def main() -> None:
    """Run the CLI and exit with its status."""
    try:
        build_app(sys.argv[1] if len(sys.argv) > 1 else None)()
        code = 0
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    # Skip interpreter teardown: the Temporal client's native threads can outlive it and abort
    # a command that has already succeeded (SIGABRT, "PyGILState_Release ... finalizing";
    # temporalio/sdk-python#300). Commands flush their own spans; flush output.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
