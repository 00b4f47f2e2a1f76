"""Start runs, review them and inspect them: ``python starter.py --help``."""

from __future__ import annotations

import os
import sys

from aiorch.cli import app


def main() -> None:
    try:
        app()
        code = 0
    except SystemExit as stop:
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    # Skip interpreter teardown: the Temporal client's native threads can outlive it and abort
    # a command that has already succeeded (SIGABRT, "PyGILState_Release ... finalizing"; about
    # 1 run in 10 here, temporalio/sdk-python#300). Commands flush their own spans; flush output.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
