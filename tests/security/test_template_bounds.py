"""Attacks on what a prompt template computes, as the author of a contributed pipeline file or
a client choosing its input would try them: printf widths, string repetition, powers, a width
taken from the input, a string repeated by a filter, loops that multiply a client's lists, and
output that grows past any prompt. Each is refused or bounded in well under a second, at check
time without computing anything and at render time before the value is built."""

from __future__ import annotations

import time
from typing import Any

import pytest

from aiorch.ops.pipelines import reserved_names
from aiorch_runtime.pipeline_files import check_text
from tests.support.pipeline_files import TRIAGE_V1
from workflows.data import CATALOG, templates
from workflows.data.template_bounds import MAX_RENDERED
from workflows.orchestrator import SHIPPED

pytestmark = pytest.mark.e2e

# In this process's CPU time: what the check or render itself computes, whatever else the
# machine runs (unbounded, the attacks took seconds to minutes of CPU).
FAST_S = 0.5
# The review's inputs, and the filters that repeat a string a client chooses.
ATTACKS = {
    "{{ '%0999999999d' | format(1) }}": "width or precision is at most 1000",
    "{{ '%0999999999d' % 1 }}": "width or precision is at most 1000",
    "{{ '%*d' | format(999999999, 1) }}": "not *",
    "{{ 'x' * 100000000 }}": "more than 1000000 characters or items",
    "{{ [1] * 100000000 }}": "more than 1000000 characters or items",
    "{{ 9 ** (9 ** 7) }}": "an integer of more than 4096 bits",
    "{{ input.ticket | center(input.width) }}": "center takes a size of at most 1000",
    "{{ input.ticket | indent(input.width) }}": "indent takes a size of at most 1000",
    "{{ input.ticket | replace('', input.ticket) }}": "more than 1000000 characters",
    "{{ input.tags | join(input.ticket) }}": "more than 1000000 characters",
    "{{ input.ticket | wordwrap(1, true, input.ticket) }}": "more than 1000000 characters",
    "{{ input.tags | tojson(input.width) }}": "tojson takes a size of at most 8",
    "{{ input.tags | slice(input.width) | list }}": "slice takes a size of at most 1000",
}
INPUT: dict[str, Any] = {"ticket": "y" * 100_000, "width": 300_000_000, "tags": ["a"] * 1_000}


def pipeline_with(template: str) -> str:
    text = TRIAGE_V1.replace("{{ input.ticket }}", template, 1)
    assert text != TRIAGE_V1
    return text


@pytest.mark.parametrize("template", ATTACKS)
def test_a_check_computes_nothing_a_template_would(template: str) -> None:
    """The check of a pipeline file holding the attack returns at once: it parses and
    compiles the template without folding its constants."""
    started = time.process_time()
    check_text(pipeline_with(template), "contributed.yaml", CATALOG, reserved_names(SHIPPED))
    assert time.process_time() - started < FAST_S


@pytest.mark.parametrize(("template", "limit"), ATTACKS.items())
def test_a_render_refuses_before_it_builds_the_value(template: str, limit: str) -> None:
    """Rendering the attack with a client's input fails with one line naming the limit, in
    well under a second."""
    env = templates.environment()
    started = time.process_time()
    with pytest.raises(templates.RenderFailed, match="a template's limit") as failure:
        templates.render(env.from_string(template), {"input": INPUT})
    assert time.process_time() - started < FAST_S
    assert limit in str(failure.value) and "\n" not in str(failure.value)


def test_output_that_grows_past_the_limit_stops_there() -> None:
    """A loop over a client's list that writes a large field each time stops as soon as the
    text passes a million characters, not when the loop ends."""
    env = templates.environment()
    template = env.from_string("{% for tag in input.tags %}{{ input.ticket }}{% endfor %}")
    started = time.process_time()
    with pytest.raises(templates.RenderFailed, match=f"more than {MAX_RENDERED} characters"):
        templates.render(template, {"input": {**INPUT, "tags": ["a"] * 100_000}})
    assert time.process_time() - started < FAST_S


def test_a_loop_inside_a_loop_is_refused_at_check_time() -> None:
    """Nested loops would multiply a client's lists (with no output to stop them): the check
    refuses the inner loop at its line."""
    template = "{% for a in input.tags %}\n{% for b in input.tags %}{% endfor %}\n{% endfor %}"
    found = templates.problems(templates.environment(), template, lambda _: None)
    assert [(p.line, str(p.rule)) for p in found] == [(2, "template-unsafe")]
    assert "nests no loop inside another" in found[0].message


def test_bounded_templates_render_as_before() -> None:
    """Widths, repetitions, powers and filters within the limits render as Jinja2 does."""
    env = templates.environment()
    template = env.from_string(
        "{{ '%05.1f' % input.f }}|{{ '%-4s' | format('ab') }}|{{ 'ab' * 3 }}|{{ 2 ** 10 }}|"
        "{{ 'x' | center(5) }}|{{ input.tags | join(',') }}|{{ 'a-b' | replace('-', '+') }}"
    )
    rendered = templates.render(template, {"input": {"f": 3.14159, "tags": ["a", "b"]}})
    assert rendered == "003.1|ab  |ababab|1024|  x  |a,b|a+b"
