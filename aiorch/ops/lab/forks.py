"""Forking recorded runs: for each selected run, a baseline fork (the original's own settings)
and a candidate fork (the variant), both seeded with the original's outputs up to the fork
state. This module holds the driver's signature only; its body comes with the forks."""

from __future__ import annotations

from collections.abc import Callable

from temporalio.client import Client

from aiorch.ops.lab.outcomes import LabRun
from aiorch_runtime.config import Settings
from workflows.payloads import Variant


async def run_forks(
    client: Client,
    settings: Settings,
    run_ids: list[str],
    *,
    from_state: str,
    candidate: Variant,
    lab_id: str,
    spend_cap_usd: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> LabRun:
    """Fork each of ``run_ids`` from ``from_state`` twice (baseline and ``candidate``), wait
    for every fork to end, and return what each run and its forks did.

    Args:
        client: a client connected as the workers' (their converter and keys).
        settings: the process's settings.
        run_ids: the recorded runs to fork (the ledger's ``runs.run_id``).
        from_state: the state the forks start in, seeded with the original's outputs before it.
        candidate: the change the candidate forks run with.
        lab_id: this lab run's id, which names its forks.
        spend_cap_usd: stop starting forks once their model calls have cost this much.
        progress: called with one line per step worth telling the user.
    """
    raise NotImplementedError("the replay lab's forks are not part of this build")
