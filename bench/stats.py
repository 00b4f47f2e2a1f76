"""Small statistics for the report: medians over repetitions, each with its min and max."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One measured figure over repetitions: the median, the min and the max."""

    median: float
    min: float
    max: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Figure:
        """The figure of ``values`` (at least one)."""
        if not values:
            raise ValueError("a figure needs at least one value")
        return cls(statistics.median(values), min(values), max(values), tuple(values))

    def as_dict(self) -> dict[str, float | list[float]]:
        """The JSON form: median, min, max and every repetition's value."""
        return {"median": self.median, "min": self.min, "max": self.max, "values": [*self.values]}


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in [0, 1]) of ``values``."""
    if not values:
        raise ValueError("a percentile needs at least one value")
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def ratio(ours: Figure, baseline: Figure) -> Figure:
    """Ours over baseline, paired by repetition: the median, min and max of per-pair ratios.

    Each repetition runs baseline and ours back to back (alternating which goes first), so a
    pair shares the machine's state at that moment; on a shared, noisy machine the paired ratio
    is far steadier than the ratio of two medians taken minutes apart.
    """
    pairs = [o / b for o, b in zip(ours.values, baseline.values, strict=False) if b]
    if not pairs:
        return Figure(math.nan, math.nan, math.nan, ())
    return Figure.of(pairs)
