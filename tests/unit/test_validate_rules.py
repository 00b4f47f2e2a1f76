"""The validate step's declarative rules (a pipeline file's ``rules:``), each at its edges: the
bound itself passes, the value just past it is a problem; a pattern is the whole text; a rule
applies only to the kind of value it can measure; a missing field breaks only ``required``;
the problems are capped, and the schema's come alone. A file's broken pattern, and a route
case that is not a name, are refused at their line."""

from __future__ import annotations

from typing import Any

import pytest

from aiorch_runtime.pipeline_files import check_text
from workflows.data import CATALOG
from workflows.data.check_steps import RuleSpec, ValidateSettings, check_value, rule_problems
from workflows.steps.document_payloads import MAX_PROBLEMS


def problems(rule: dict[str, Any], value: Any) -> list[str]:
    """What ``value`` breaks of the rule written as a pipeline file writes it."""
    return rule_problems(RuleSpec.model_validate({"field": "x", **rule}), value)


@pytest.mark.parametrize(
    ("rule", "passing", "failing", "message"),
    [
        ({"min": 10}, [10, 10.0, 11, 1e9], [9.999, 9, -10], "is below 10"),
        ({"max": 10}, [10, 10.0, 9, -1e9], [10.001, 11, 1e9], "is above 10"),
        ({"min": -0.5}, [-0.5, 0], [-0.51], "is below -0.5"),
        ({"max": 0}, [0, 0.0, -0.01], [0.01, 1], "is above 0"),
        (
            {"min_length": 3},
            ["abc", "abcd", [1, 2, 3], {"a": 1, "b": 2, "c": 3}],
            ["ab", "", [1, 2], {"a": 1}],
            "is shorter than 3",
        ),
        (
            {"max_length": 3},
            ["abc", "", [1, 2, 3], {"a": 1, "b": 2, "c": 3}],
            ["abcd", [1, 2, 3, 4], {"a": 1, "b": 2, "c": 3, "d": 4}],
            "is longer than 3",
        ),
        ({"min_length": 0}, ["", [], {}], [], ""),
        ({"max_length": 0}, ["", [], {}], ["a", [None], {"a": 1}], "is longer than 0"),
        (
            {"pattern": "[A-Z]{3}"},
            ["USD", "EUR"],
            ["USDX", "XUSD", "US", "usd", "US D", "USD\n"],
            "does not match its pattern",
        ),
        ({"pattern": "a|ab"}, ["a", "ab"], ["abc", "b"], "does not match its pattern"),
        (
            {"in": ["low", "high", 3]},
            ["low", "high", 3],
            ["LOW", "medium", "", 4],
            "is not one of low, high, 3",
        ),
        ({"not_in": ["spam", 0]}, ["ham", "", 1], ["spam", 0], "is a value it may not be"),
        ({"required": True}, ["", 0, False, [], {}], [None], "is required"),
    ],
)
def test_each_rule_at_its_edges(
    rule: dict[str, Any], passing: list[Any], failing: list[Any], message: str
) -> None:
    """Each value at or inside the rule's bound passes; each just past it (or outside the
    set, or not matching the whole pattern) gives the rule's one problem."""
    for value in passing:
        assert problems(rule, value) == [], (rule, value)
    for value in failing:
        assert problems(rule, value) == [message], (rule, value)


def test_a_missing_field_breaks_only_required() -> None:
    """A field the value does not have (None) breaks ``required`` alone: every other rule
    checks a value that is there."""
    every = {"min": 1, "max": 2, "min_length": 1, "max_length": 2, "pattern": "x", "in": [1]}
    assert problems(every, None) == []
    assert problems({**every, "required": True}, None) == ["is required"]


def test_a_rule_measures_only_the_kinds_of_value_it_can() -> None:
    """min and max compare numbers (a bool is none, a numeric text is none); lengths measure
    texts, lists and objects (not numbers); a pattern matches text only."""
    assert problems({"min": 5, "max": 5}, True) == []
    assert problems({"min": 5}, "4") == []
    assert problems({"max_length": 1}, 12345) == []
    assert problems({"pattern": "[0-9]+"}, 123) == ["does not match its pattern"]


def test_a_rule_s_message_replaces_its_problems() -> None:
    """``message`` is the one problem a failing rule gives, however many checks it failed;
    a passing rule gives none."""
    rule = {"min_length": 3, "pattern": "[a-z]+", "message": "needs a lowercase code"}
    assert problems(rule, "A") == ["needs a lowercase code"]
    assert problems(rule, "abc") == []


def test_the_schema_s_problems_come_alone_and_every_list_is_capped() -> None:
    """A value that breaks the schema gets the schema's problems and no rule's; a value the
    schema accepts gets every rule's problems, at most MAX_PROBLEMS of them, in rule order."""
    rules = [{"field": f"f{n}", "required": True} for n in range(MAX_PROBLEMS + 1)]
    schema = {"type": "object", "properties": {"f0": {"type": "string"}}}
    settings = ValidateSettings.model_validate({"schema": schema, "rules": rules})
    [schema_problem] = check_value(settings, {"f0": 1})
    assert schema_problem.field == "f0"
    found = check_value(settings, {})
    assert len(found) == MAX_PROBLEMS
    assert [p.field for p in found] == [f"f{n}" for n in range(MAX_PROBLEMS)]
    assert check_value(settings, {f"f{n}": "x" for n in range(MAX_PROBLEMS + 1)}) == []


def test_a_rule_reads_its_field_by_its_dotted_path() -> None:
    """``field: a.b.1`` reads key ``b`` of ``a``, then its second item; an index past the end
    is a missing field."""
    settings = ValidateSettings.model_validate(
        {"rules": [{"field": "a.b.1", "required": True, "max": 3}]}
    )
    assert check_value(settings, {"a": {"b": [9, 3]}}) == []
    [too_big] = check_value(settings, {"a": {"b": [0, 4]}})
    assert (too_big.field, too_big.message) == ("a.b.1", "is above 3")
    [missing] = check_value(settings, {"a": {"b": [0]}})
    assert missing.message == "is required"


def file_with(rule: str, cases: str) -> str:
    """A pipeline file whose validate step has ``rule`` and whose route step has ``cases``."""
    return (
        "name: Rules\nversion: 1\ninput:\n  type: object\n  properties:\n"
        "    ticket: {type: string}\nsteps:\n"
        '  - id: draft\n    type: llm\n    prompt: "{{ input.ticket }}"\n'
        f"  - id: check\n    type: validate\n    rules:\n      - {rule}\n"
        f"  - id: pick\n    type: route\n    value: steps.draft.content\n    cases: {cases}\n"
        "  - id: store\n    type: store\n"
    )


@pytest.mark.parametrize(
    ("rule", "cases", "line", "message"),
    [
        (
            '{field: content, pattern: "[a-"}',
            "{ok: store}",
            14,
            "not a regular expression: unterminated character set at position 0",
        ),
        (
            "{field: content}",
            "{default: store}",
            18,
            "case 'default' is not a value a case can name",
        ),
        (
            "{field: content}",
            '{ok: store, "two words": store}',
            18,
            "case 'two words' is not a value a case can name",
        ),
        (
            "{field: content}",
            "{" + "c" * 70 + ": store}",
            18,
            f"case {'c' * 64!r} is not a value a case can name",
        ),
    ],
    ids=["pattern", "default-case", "case-with-a-space", "long-case"],
)
def test_a_file_s_broken_pattern_or_case_is_named_at_its_line(
    rule: str, cases: str, line: int, message: str
) -> None:
    """A pattern that is not a regular expression, and a route case named ``default`` or not
    a value a case can name (shown cut to 64 characters), are refused at their line with the
    reason."""
    record, problems = check_text(file_with(rule, cases), "rules.yaml", CATALOG)
    assert record is None
    assert [(p.line, p.rule, p.message) for p in problems] == [(line, "invalid-value", message)]


def test_a_file_s_valid_patterns_and_cases_check_clean() -> None:
    """A pattern that compiles and cases that are names check clean."""
    record, problems = check_text(
        file_with('{field: content, pattern: "[a-z]+"}', "{ok: store, not_ok: store}"),
        "rules.yaml",
        CATALOG,
    )
    assert problems == [] and record is not None
