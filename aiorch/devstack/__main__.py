"""``python -m aiorch.devstack``: the dev stack's command line (`aiorch.devstack.cli`)."""

from aiorch.devstack.cli import app

if __name__ == "__main__":
    app()
