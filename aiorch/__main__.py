"""``python -m aiorch``: the ``aiorch`` command line, as ``python starter.py`` runs it."""

from aiorch.cli import main

if __name__ == "__main__":
    main()
