"""The worker process: its activities wired to real clients, polling until SIGTERM."""

from aiorch.worker.app import main

__all__ = ["main"]
