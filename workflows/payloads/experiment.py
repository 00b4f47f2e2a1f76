"""A run's place in a rollout: the experiment it was planned under and the variant it got.

Recorded in the run's plan (``ModelSettings.assignment``) when the run is planned, so its
history, a replay and a continued run keep it; a plan made without an experiment has none.
"""

from __future__ import annotations

from pydantic import Field

from workflows.payloads._base import _Open
from workflows.payloads.variant import VARIANT_NAME_PATTERN, Variant

__all__ = ["EXPERIMENT_ID_PATTERN", "Assignment"]

# An experiment id: a key in the capacity store, a ledger value and a metric label.
EXPERIMENT_ID_PATTERN = VARIANT_NAME_PATTERN


class Assignment(_Open):
    """The experiment a run was planned under and its variant (``variant.name``; the
    control's variant changes nothing)."""

    experiment: str = Field(pattern=EXPERIMENT_ID_PATTERN)
    variant: Variant

    def describe(self) -> str:
        """One line: ``prompt-v2/B`` and what the variant changes."""
        return f"{self.experiment}/{self.variant.describe()}"
