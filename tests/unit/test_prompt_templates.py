"""How a pipeline file's prompt template renders the run's data: a null as nothing (never the
word "None"), objects and lists as JSON (never Python's repr), other values as their text."""

from __future__ import annotations

from typing import Any

import pytest

from workflows.data import templates


def rendered(template: str, **given: Any) -> str:
    env = templates.environment()
    return templates.render(env.from_string(template), {"input": given, "steps": {}})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        ({"b": 1, "a": "é"}, '{"a": "é", "b": 1}'),
        ([1, None, "x"], '[1, null, "x"]'),
        ([], "[]"),
        (0, "0"),
        (False, "False"),
        ("", ""),
        ("None", "None"),
    ],
)
def test_a_value_renders_as_the_model_should_read_it(value: Any, text: str) -> None:
    """A null field renders as nothing, an object or a list as JSON (keys sorted, text as it
    is), anything else as its text."""
    assert rendered("[{{ input.v }}]", v=value) == f"[{text}]"


def test_a_null_takes_a_default_and_a_missing_field_renders_as_nothing() -> None:
    """``default(..., true)`` replaces a null; a field the input does not have renders as
    nothing, as a null does."""
    template = "Customer: {{ input.customer | default('unknown', true) }}"
    assert rendered(template, customer=None) == "Customer: unknown"
    assert rendered("Note: {{ input.note }}.", customer=None) == "Note: ."
