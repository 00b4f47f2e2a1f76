"""Durations as operators type and read them: ``90s``, ``15m``, ``1h30m``, ``2d``."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h30m``, ``2d``, ``500ms`` as a timedelta.

    Raises:
        ValueError: not a sequence of number+unit parts (units: ms, s, m, h, d, w).
    """
    compact = text.strip().lower().replace(" ", "")
    if not compact or _DURATION.sub("", compact):
        raise ValueError(
            f"{text!r} is not a duration; write it like 90s, 15m, 1h30m or 2d "
            "(units: ms, s, m, h, d, w)"
        )
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(compact))
    return timedelta(seconds=seconds)


def format_duration(value: timedelta | None) -> str:
    """A short human form: ``850ms``, ``12.3s``, ``4m05s``, ``3h12m``, ``2d04h``; ``?`` for an
    unknown one."""
    if value is None:
        return "?"
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
