"""How a pipeline file's prompt template renders the run's data: a null as nothing (never the
word "None"), objects and lists as JSON (never Python's repr), other values as their text; what
its check refuses, each at its line with the sentence a file's author reads, and the fields it
asks about; the one line a failed render gives; the render's length limit at its edge."""

from __future__ import annotations

from typing import Any

import pytest

from workflows.data import templates
from workflows.data.template_bounds import MAX_RENDERED


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


def found(template: str) -> tuple[list[tuple[int, str, str]], list[tuple[str, ...]]]:
    """The check's problems of ``template`` (line, rule, sentence), and the field paths it
    asked about (only asked once nothing else is wrong)."""
    asked: list[tuple[str, ...]] = []

    def check(path: tuple[str, ...]) -> str | None:
        asked.append(path)
        return f"{'.'.join(path)} is not there" if path[-1] == "nope" else None

    problems = templates.problems(templates.environment(), template, check)
    return [(p.line, p.rule.value, p.message) for p in problems], asked


UNSAFE = "template-unsafe"
NESTED = "a template nests no loop inside another (a client's lists would multiply)"
INTERNALS = "reaches Python internals; a template reads fields of input and steps only"
STATEMENT = "(it reads input and steps, and may use if, for and set)"
CALL = "a template calls nothing (filters such as |upper or |tojson are the way)"


@pytest.mark.parametrize(
    ("template", "problems"),
    [
        (
            "Ticket:\n{{ input.x ",
            [
                (
                    2,
                    "template-syntax",
                    "unexpected end of template, expected 'end of print statement'.",
                )
            ],
        ),
        ("a\n{{ input.x | nofilter }}", [(2, "template-syntax", "No filter named 'nofilter'.")]),
        (
            "{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}",
            [(1, "template-syntax", "expressions nest too deeply")],
        ),
        (
            "{% for a in input.x %}\n{% for b in a %}\n{% for c in b %}{{ c }}"
            "{% endfor %}{% endfor %}{% endfor %}",
            [(2, UNSAFE, NESTED), (3, UNSAFE, NESTED)],
        ),
        (
            "{{ input._x }}\n{{ input['_y'] }} {{ input[0] }} {{ input.x_ }}",
            [(1, UNSAFE, f"'_x' {INTERNALS}"), (2, UNSAFE, f"'_y' {INTERNALS}")],
        ),
        ("\n{{ input.x.upper() }}", [(2, UNSAFE, CALL)]),
        (
            "{% macro m() %}{% endmacro %}\n{% include 'x' %}",
            [
                (
                    1,
                    UNSAFE,
                    f"a template has no macro {STATEMENT}",
                ),
                (
                    2,
                    UNSAFE,
                    f"a template has no include {STATEMENT}",
                ),
            ],
        ),
        (
            "{{ foo }}\n{{ self }}",
            [
                (1, "unknown-template-field", "'foo' is not input or steps"),
                (2, "unknown-template-field", "'self' is not input or steps"),
            ],
        ),
    ],
    ids=[
        "syntax",
        "unknown-filter",
        "nesting",
        "loops",
        "underscore",
        "call",
        "statements",
        "names",
    ],
)
def test_the_check_names_each_problem_at_its_line(
    template: str, problems: list[tuple[int, str, str]]
) -> None:
    """Each problem comes with its line in the template, its rule and the sentence a file's
    author reads; a template with any such problem has its fields checked only once fixed."""
    assert found(template) == (problems, [])


def test_the_check_asks_about_each_longest_constant_path_from_input_or_steps() -> None:
    """Each chain of constant names from input or steps is asked about once, cut at the first
    key that is not a name (an index, a computed key); loop and set variables are the
    template's own; a field that is not there is a problem at its line."""
    template = (
        "{% set n = input.x %}{{ n.deep }}{% for i in input.xs %}{{ i.name }}{% endfor %}\n"
        "{{ steps.s['x'].y }} {{ input.items[0].z }} {{ input[input.k] }}\n"
        "{{ input.a.nope }}"
    )
    problems, asked = found(template)
    assert problems == [(3, "unknown-template-field", "input.a.nope is not there")]
    assert asked == [
        ("input", "x"),
        ("input", "xs"),
        ("steps", "s", "x", "y"),
        ("input", "items"),
        ("input",),
        ("input", "k"),
        ("input", "a", "nope"),
    ]


def failure(template: str, **given: Any) -> str:
    """The one line a render of ``template`` fails with."""
    with pytest.raises(templates.RenderFailed) as failed:
        rendered(template, **given)
    return str(failed.value)


def test_a_render_fails_with_one_line_that_says_why() -> None:
    """What the sandbox refuses, and any other error, fails the render with one line: the
    sandbox's reason, or the error's type and message, cut to 300 characters."""
    assert failure("{{ input.x.__class__.__name__ }}", x="s") == (
        "refused by the template sandbox: access to attribute '__class__' of 'str' object is"
        " unsafe."
    )
    assert failure("{{ 1 / input.z }}", z=0) == "ZeroDivisionError: division by zero"
    assert failure("{{ input.a + 1 }}", a="x") == (
        'TypeError: can only concatenate str (not "int") to str'
    )
    long = "m" * 400
    message = failure(f"{{{{ input.a.{long}.more }}}}", a={})
    assert message == "UndefinedError: " + f"'dict object' has no attribute '{long}'"[:300]


def test_a_render_may_reach_its_limit_but_not_pass_it() -> None:
    """A render of exactly MAX_RENDERED characters is kept; one more, counted over all the
    template's pieces, fails the render."""
    assert len(rendered("{{ input.a }}", a="x" * MAX_RENDERED)) == MAX_RENDERED
    half = "x" * (MAX_RENDERED // 2)
    assert len(rendered("{{ input.a }}{{ input.b }}", a=half, b=half)) == MAX_RENDERED
    limit = f"the template rendered more than {MAX_RENDERED} characters (a template's limit)"
    assert failure("{{ input.a }}{{ input.b }}", a=half, b=half + "x") == limit
    assert failure("{{ input.a }}", a="x" * (MAX_RENDERED + 1)) == limit


def test_a_prompt_renders_as_written_with_nothing_else_in_reach() -> None:
    """Text is not HTML-escaped, a trailing newline is kept, and Jinja2's globals (``range``,
    ``lipsum``) are not there: they render as nothing, as any unknown name does."""
    assert rendered("<{{ input.v }}> & 'x'\n", v="a<b") == "<a<b> & 'x'\n"
    assert rendered("[{{ range }}{{ lipsum }}{{ cycler }}]") == "[]"
    assert [name for name in ("random", "attr") if name in templates.environment().filters] == []
