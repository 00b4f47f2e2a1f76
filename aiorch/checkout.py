"""The entry points of a checkout (``python starter.py``, ``python worker.py``) run by an
interpreter without the project's packages, as a shell that has not activated ``.venv`` runs
them: the checkout's own ``.venv`` (which ``make demo`` and ``make dev`` set up) runs the script
instead, or, without one, one line says how to get it.

Standard library only: it runs before any of the project's dependencies can be imported.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

VENV = ".venv"
# Set for the script run by the venv's Python: if that one lacks the packages too, it says so
# instead of starting itself again, forever.
_RUN_BY_VENV = "AIORCH_RUN_BY_CHECKOUT_VENV"


def run_with_checkout_venv(script: str, missing: ModuleNotFoundError) -> NoReturn:
    """Run ``script`` (with this process's arguments) by the checkout's ``.venv`` Python in
    place of this process, unless that Python runs it already.

    Raises:
        SystemExit: no usable ``.venv``; its message is the one line that says what to do.
    """
    path = Path(script).resolve()
    python = path.parent / VENV / "bin" / "python"
    if python.is_file() and not os.environ.get(_RUN_BY_VENV):
        os.environ[_RUN_BY_VENV] = "1"
        os.execv(python, [str(python), str(path), *sys.argv[1:]])
    if python.is_file():
        raise SystemExit(
            f"error: {VENV} lacks the package {missing.name!r}; run `make dev` (or `make demo`) "
            "to install what it needs"
        )
    raise SystemExit(
        f"error: {sys.executable} has no package {missing.name!r} and there is no {VENV} here; "
        f"run `make demo` (or `make dev`) once to set up {VENV}, or `pip install .`"
    )
