"""Prompt templates: Jinja2 in its immutable sandbox, with nothing but the run's data in reach.

A template reads ``input`` (the request's input object) and ``steps`` (each earlier step's
output, by step id): ``Ticket: {{ input.ticket }}``, ``{{ steps.classify.category }}``. The
environment has no globals (no ``range``, ``lipsum``, ``cycler``, ``namespace``), no ``random``
filter (a run must render the same on every replay) and no ``attr`` filter; the sandbox refuses
every attribute a template may not read. The check (`problems`) refuses more, before any run:
a name other than ``input``, ``steps`` and the template's own loop and ``set`` variables, any
``_``-name (``{{ ''.__class__ }}``), any call, any include, import, macro or block, and a field
the input or the step does not have.

A client's input is data: rendering puts its value in the text and never reads it as a
template, so ``{{ 7*7 }}`` in a ticket reaches the model as those characters.

Deterministic (no clock, no I/O): workflow code renders with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from jinja2 import TemplateError, meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Undefined

from workflows.data.contract import Rule
from workflows.data.template_bounds import MAX_RENDERED, BoundedEnvironment

ROOTS: Final = ("input", "steps")
# random: different on every replay; attr: reaches an attribute by a computed name.
REMOVED_FILTERS: Final = ("random", "attr")
# Names Jinja2 gives a template itself (the template, macro arguments), never the run's data.
SPECIAL_NAMES: Final = frozenset({"self", "caller", "varargs", "kwargs"})
# Statements that reach other templates or define code: a prompt needs none.
STATEMENTS: Final = (
    nodes.Include,
    nodes.Import,
    nodes.FromImport,
    nodes.Extends,
    nodes.Macro,
    nodes.CallBlock,
    nodes.Block,
)


@dataclass(frozen=True)
class TemplateProblem:
    """A problem in a template: its line within the template (1-based), the rule, a sentence."""

    line: int
    rule: Rule
    message: str


class RenderFailed(Exception):
    """A template failed at run time; the message is one line."""


def _finalize(value: Any) -> Any:
    # Objects and lists render as JSON (not Python's repr); nothing renders as "None".
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return "" if value is None else value


def environment() -> BoundedEnvironment:
    """A fresh sandboxed environment with nothing in reach but what a render is given, and
    bounds on what it computes (``workflows.data.template_bounds``)."""
    env = BoundedEnvironment(
        autoescape=False, undefined=Undefined, finalize=_finalize, keep_trailing_newline=True
    )
    env.globals.clear()
    for name in REMOVED_FILTERS:
        env.filters.pop(name, None)
    return env


FieldCheck = Callable[[tuple[str, ...]], str | None]
"""Why a path (``("input", "ticket")``) names nothing the run will have, or None."""


def problems(env: BoundedEnvironment, text: str, check: FieldCheck) -> list[TemplateProblem]:
    """Every problem in ``text``: syntax, what it may not reach, fields that do not exist."""
    try:
        tree = env.parse(text)
        env.compile(tree)  # unknown filters and tests are found here
    except TemplateError as err:
        line = getattr(err, "lineno", None) or 1
        return [TemplateProblem(line, Rule.TEMPLATE_SYNTAX, _one_line(err))]
    except RecursionError:
        # Jinja2's parser and compiler recurse once per nested expression.
        return [TemplateProblem(1, Rule.TEMPLATE_SYNTAX, "expressions nest too deeply")]
    found: list[TemplateProblem] = []
    nested = {
        id(inner): inner for loop in tree.find_all(nodes.For) for inner in loop.find_all(nodes.For)
    }
    for inner in nested.values():
        found.append(
            TemplateProblem(
                inner.lineno,
                Rule.TEMPLATE_UNSAFE,
                "a template nests no loop inside another (a client's lists would multiply)",
            )
        )
    for node in _lookups(tree):
        name = _key(node)
        if isinstance(name, str) and name.startswith("_"):
            found.append(
                TemplateProblem(
                    node.lineno,
                    Rule.TEMPLATE_UNSAFE,
                    f"{name!r} reaches Python internals; a template reads fields of input "
                    "and steps only",
                )
            )
    for call in tree.find_all(nodes.Call):
        found.append(
            TemplateProblem(
                call.lineno,
                Rule.TEMPLATE_UNSAFE,
                "a template calls nothing (filters such as |upper or |tojson are the way)",
            )
        )
    for statement in tree.find_all(STATEMENTS):
        found.append(
            TemplateProblem(
                statement.lineno,
                Rule.TEMPLATE_UNSAFE,
                f"a template has no {type(statement).__name__.lower()} (it reads input and "
                "steps, and may use if, for and set)",
            )
        )
    declared = meta.find_undeclared_variables(tree) | SPECIAL_NAMES
    for name in tree.find_all(nodes.Name):
        if name.ctx == "load" and name.name in declared and name.name not in ROOTS:
            found.append(
                TemplateProblem(
                    name.lineno,
                    Rule.UNKNOWN_TEMPLATE_FIELD,
                    f"{name.name!r} is not input or steps",
                )
            )
    if not found:
        for lineno, path in _paths(tree):
            problem = check(path)
            if problem is not None:
                found.append(TemplateProblem(lineno, Rule.UNKNOWN_TEMPLATE_FIELD, problem))
    return found


def _lookups(tree: nodes.Template) -> Iterator[nodes.Getattr | nodes.Getitem]:
    """Every attribute or item lookup in ``tree``."""
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Getattr | nodes.Getitem):
            yield node


def _key(node: nodes.Getattr | nodes.Getitem) -> Any:
    if isinstance(node, nodes.Getattr):
        return node.attr
    return node.arg.value if isinstance(node.arg, nodes.Const) else None


def _paths(tree: nodes.Template) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Each longest chain of constant field names from ``input`` or ``steps``."""
    lookups = list(_lookups(tree))
    inner = {id(node.node) for node in lookups}
    for node in lookups:
        if id(node) in inner:
            continue
        parts: list[Any] = []
        current: nodes.Node = node
        while isinstance(current, nodes.Getattr | nodes.Getitem):
            parts.append(_key(current))
            current = current.node
        if not (isinstance(current, nodes.Name) and current.name in ROOTS):
            continue
        parts.reverse()
        known = []
        for part in parts:
            if not isinstance(part, str):
                break
            known.append(part)
        yield node.lineno, (current.name, *known)


def _one_line(err: Exception) -> str:
    return " ".join(str(getattr(err, "message", None) or err).split())[:300]


def render(template: Any, values: dict[str, Any]) -> str:
    """``template`` (a compiled Jinja2 template) rendered with ``values``.

    Raises:
        RenderFailed: it reached something the sandbox refuses, or failed otherwise.
    """
    parts: list[str] = []
    length = 0
    try:
        # Piece by piece, so a render that outgrows the limit stops there.
        for part in template.generate(values):
            length += len(part)
            if length > MAX_RENDERED:
                raise RenderFailed(
                    f"the template rendered more than {MAX_RENDERED} characters "
                    "(a template's limit)"
                )
            parts.append(part)
    except SecurityError as err:
        raise RenderFailed(f"refused by the template sandbox: {_one_line(err)}") from None
    except (TemplateError, TypeError, ValueError, LookupError, ArithmeticError) as err:
        raise RenderFailed(f"{type(err).__name__}: {_one_line(err)}") from None
    return "".join(parts)
