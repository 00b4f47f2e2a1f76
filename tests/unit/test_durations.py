"""Durations as operators type and read them (`aiorch.ops.durations`)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from aiorch.ops.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h", 3600),
        ("2s", 2),
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("500ms", 0.5),
        ("1.5h", 5400),
        (" 1H 30M ", 5400),
        ("0s", 0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    """--older-than takes number+unit parts."""
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "1h-", "-1h", "soon"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    """Anything else is an error that shows the accepted form."""
    with pytest.raises(ValueError, match="90s, 15m, 1h30m"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.25, "250ms"),
        (12.34, "12.3s"),
        (245, "4m05s"),
        (3 * 3600 + 720, "3h12m"),
        (180000, "2d02h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    """Ages and averages print short."""
    assert format_duration(timedelta(seconds=seconds)) == text


def test_unknown_duration_prints_as_a_question_mark() -> None:
    """An age that is not known (a message without a send time) prints as ``?``."""
    assert format_duration(None) == "?"
