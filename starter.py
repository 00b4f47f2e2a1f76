"""Start, review and inspect runs: ``python starter.py --help`` (installed: ``aiorch``)."""

from aiorch.cli import main

if __name__ == "__main__":
    main()
