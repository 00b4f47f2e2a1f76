"""Run an ai-orchestrator worker: ``python worker.py`` (installed: ``aiorch-worker``).

Run by a Python without the project's packages (``.venv`` not activated), it runs itself with
the checkout's ``.venv`` (`aiorch.checkout`).
"""

try:
    from aiorch.worker import main
except ModuleNotFoundError as missing:
    from aiorch.checkout import run_with_checkout_venv

    run_with_checkout_venv(__file__, missing)

if __name__ == "__main__":
    main()
