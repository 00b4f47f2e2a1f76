"""Seeding: a fork answers the activities its original ran before the fork state from the
original's recorded outputs, instead of running them again.

``commands.execute`` asks `recorded` before it schedules an activity: for a run whose workflow
instance carries an active ``Seed`` (a replay lab's fork, ``workflows.engine.lab``), the next
recorded output of that activity type is the activity's result, and no command is issued. A
production run's instance carries none, so its commands are exactly what they were. The lab
ends the seed when the fork enters its fork state; from there every activity runs.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import TypeAdapter
from temporalio import workflow

from workflows.engine.forks import RecordedOutput
from workflows.errors import OrchestratorError

R = TypeVar("R")


class ForkDiverged(OrchestratorError):
    """Before its fork state, a fork asked for an activity its original did not run there
    (or ran fewer times): it cannot be seeded, and running it would not be a replay."""


class Seed:
    """The original's recorded outputs, by activity type in the order it ran them."""

    def __init__(self, recorded: Sequence[RecordedOutput]) -> None:
        self._left: dict[str, deque[Any]] = {}
        for output in recorded:
            self._left.setdefault(output.activity, deque()).append(output.result)
        self.active = True

    def end(self) -> None:
        """The fork reached its fork state: every activity from here on runs."""
        self.active = False
        self._left.clear()

    def take(self, activity: str) -> Any:
        """The next recorded output of ``activity``.

        Raises:
            ForkDiverged: none is left.
        """
        left = self._left.get(activity)
        if not left:
            raise ForkDiverged(
                f"the fork asked for {activity} before its fork state more often than the "
                "original ran it there"
            )
        return left.popleft()


def current() -> Seed | None:
    """The active seed of the running workflow, if it has one (a fork before its fork state)."""
    seed = getattr(workflow.instance(), "seed", None)
    return seed if isinstance(seed, Seed) and seed.active else None


def recorded(seed: Seed, activity: str, result_type: type[R]) -> R:
    """``activity``'s next recorded output from ``seed``, as a ``result_type``.

    Raises:
        ForkDiverged: the original has no output of it left.
    """
    value: R = TypeAdapter(result_type).validate_python(seed.take(activity))
    return value
