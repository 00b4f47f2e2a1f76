"""What a template may compute: Jinja2's sandbox stops attribute access, not computation, so
the operators and filters that build large values are bounded here.

- ``*`` repeats a string or list to at most ``MAX_RENDERED`` items, and multiplies integers
  to at most ``MAX_INT_BITS`` bits; ``**`` raises an integer to at most ``MAX_INT_BITS`` bits.
- ``%`` and the ``format`` filter take printf widths and precisions up to ``MAX_WIDTH``, never
  from an argument (``*``).
- ``center``, ``indent`` and ``slice`` take sizes up to ``MAX_WIDTH``, ``tojson`` an indent up
  to ``MAX_JSON_INDENT``; ``indent``, ``replace``, ``join`` and ``wordwrap`` may not repeat a
  string past ``MAX_RENDERED`` characters.
- A render stops once its text passes ``MAX_RENDERED`` characters (`render`).

Each refusal is a ``SecurityError`` naming the limit, found before the value is built, so a
client's number (``center(input.width)``) or a constant (``'%0999999999d'|format(1)``) costs
nothing. The environment does not fold constants while compiling, so a check never computes
the template's expressions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any, Final

from jinja2 import Environment, nodes
from jinja2.exceptions import SecurityError
from jinja2.filters import (
    do_center,
    do_format,
    do_indent,
    do_join,
    do_replace,
    do_slice,
    do_tojson,
    do_wordwrap,
)
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import pass_environment, pass_eval_context

# A prompt is an activity's input, kept in history (2 MB at most): a million characters.
MAX_RENDERED: Final = 1_000_000
MAX_WIDTH: Final = 1_000
MAX_JSON_INDENT: Final = 8
# Enough for any amount or count a prompt shows; 10**1000 takes 3,322.
MAX_INT_BITS: Final = 4_096
# A printf conversion: a mapping key, flags, then width and precision, each a number or "*".
_CONVERSION: Final = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _refuse(what: str) -> SecurityError:
    return SecurityError(f"{what} (a template's limit)")


def _width(filter_name: str, value: object, limit: int = MAX_WIDTH) -> None:
    if isinstance(value, int) and abs(value) > limit:
        raise _refuse(f"{filter_name} takes a size of at most {limit}, not {value}")


def _printf(text: object) -> None:
    if not isinstance(text, str):
        return
    for match in _CONVERSION.finditer(text):
        for size in match.groups():
            if size == "*":
                raise _refuse("a % format takes its width and precision from itself, not *")
            if size is not None and int(size) > MAX_WIDTH:
                raise _refuse(f"a % format's width or precision is at most {MAX_WIDTH}")


def _repeated(count: int, length: int) -> None:
    if count * length > MAX_RENDERED:
        raise _refuse(f"a value of more than {MAX_RENDERED} characters or items")


def _int_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise _refuse(f"an integer of more than {MAX_INT_BITS} bits")


def _multiply(left: Any, right: Any) -> None:
    for sized, count in ((left, right), (right, left)):
        if isinstance(sized, str | list | tuple) and isinstance(count, int):
            _repeated(count, len(sized))
    if isinstance(left, int) and isinstance(right, int):
        _int_bits(left.bit_length() + right.bit_length())


def _power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        _int_bits(base.bit_length() * exponent)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with ``*``, ``**`` and ``%`` bounded and no constant folding."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(optimized=False, **options)
        self.filters.update(BOUNDED_FILTERS)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _multiply(left, right)
        elif operator == "**":
            _power(left, right)
        elif operator == "%":
            _printf(left)
        return super().call_binop(context, operator, left, right)


def _center(value: str, width: int = 80) -> str:
    _width("center", width)
    return do_center(value, width)


def _indent(s: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    _width("indent", len(width) if isinstance(width, str) else width)
    _repeated(str(s).count("\n") + 1, len(width) if isinstance(width, str) else abs(width))
    return do_indent(s, width, first, blank)


def _format(value: str, *args: Any, **kwargs: Any) -> str:
    _printf(value)
    return do_format(value, *args, **kwargs)


def _slice(value: Any, slices: int, fill_with: Any = None) -> Any:
    _width("slice", slices)
    return do_slice(value, slices, fill_with)


@pass_eval_context
def _tojson(eval_ctx: nodes.EvalContext, value: Any, indent: int | None = None) -> Any:
    _width("tojson", indent, MAX_JSON_INDENT)
    return do_tojson(eval_ctx, value, indent)


@pass_eval_context
def _replace(
    eval_ctx: nodes.EvalContext, s: str, old: str, new: str, count: int | None = None
) -> str:
    text = str(s)
    found = text.count(str(old)) if str(old) else len(text) + 1
    if count is not None and count >= 0:
        found = min(found, count)
    _repeated(found, len(str(new)))
    return do_replace(eval_ctx, s, old, new, count)


@pass_eval_context
def _join(
    eval_ctx: nodes.EvalContext, value: Iterable[Any], d: str = "", attribute: Any = None
) -> str:
    items = list(value)
    _repeated(max(len(items) - 1, 0), len(str(d)))
    joined: str = do_join(eval_ctx, items, d, attribute)
    return joined


@pass_environment
def _wordwrap(
    environment: Environment,
    s: str,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    if wrapstring is not None:
        _repeated(len(str(s)) // max(width, 1) + 1, len(str(wrapstring)))
    return do_wordwrap(environment, s, width, break_long_words, wrapstring, break_on_hyphens)


BOUNDED_FILTERS: Final = MappingProxyType(
    {
        "center": _center,
        "indent": _indent,
        "format": _format,
        "slice": _slice,
        "tojson": _tojson,
        "replace": _replace,
        "join": _join,
        "wordwrap": _wordwrap,
    }
)
