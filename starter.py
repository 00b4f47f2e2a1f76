"""Start runs, review them and inspect them: ``python starter.py --help``."""

from __future__ import annotations

from aiorch.cli import app


def main() -> None:
    app()


if __name__ == "__main__":
    main()
