"""A route case no value can match is named by the check: against the routed value's enum,
const or type, as the route compares it (as text); a schema that allows any text names none."""

from __future__ import annotations

from typing import Any

import pytest

from workflows.data import CATALOG, check
from workflows.data.route_cases import never_matched
from workflows.data.spec import PipelineSpec

CASES = ["refund", "refunds", "True", "true", "1", "01", ""]


@pytest.mark.parametrize(
    ("schema", "unmatched"),
    [
        (
            {"type": "string", "enum": ["refund", "other"]},
            ["refunds", "True", "true", "1", "01", ""],
        ),
        ({"const": "refund"}, ["refunds", "True", "true", "1", "01", ""]),
        ({"type": "boolean"}, ["refund", "refunds", "true", "1", "01", ""]),
        ({"enum": [True, 1, None]}, ["refund", "refunds", "true", "01"]),
        ({"type": "integer"}, ["refund", "refunds", "True", "true", "01", ""]),
        ({"type": ["integer", "null"]}, ["refund", "refunds", "True", "true", "01"]),
        ({"type": "string"}, []),
        ({"type": "number"}, []),
        ({"anyOf": [{"type": "boolean"}]}, []),
        (None, []),
    ],
)
def test_cases_no_value_of_the_schema_can_match(schema: Any, unmatched: list[str]) -> None:
    """Each case outside what the schema allows, as ``str(value)`` (``""`` for null), is named;
    the rest are not."""
    assert never_matched(schema, CASES)[0] == unmatched


def test_a_case_outside_the_input_enum_is_refused_by_the_check() -> None:
    """The check reads an input field's schema too, and names the case with the allowed values
    at the case's place in the file."""
    spec = PipelineSpec.model_validate(
        {
            "name": "Triage",
            "version": "1",
            "input": {
                "type": "object",
                "properties": {"kind": {"type": "string", "enum": ["a", "b"]}},
            },
            "steps": [
                {"id": "route", "type": "route", "value": "input.kind", "cases": {"c": "look"}},
                {"id": "look", "type": "review", "reedit": "route", "next": "store"},
                {"id": "store", "type": "store"},
            ],
        }
    )
    [problem] = check(spec, CATALOG)
    assert (problem.path, problem.rule.value) == (("steps", 0, "cases", "c"), "unknown-case")
    assert problem.message == "'c' is not a value of input.kind (a, b)"
