"""Run an ai-orchestrator worker: ``python worker.py`` (installed: ``aiorch-worker``)."""

from aiorch.worker import main

if __name__ == "__main__":
    main()
