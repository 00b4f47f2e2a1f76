"""The small expression language of ``--score`` and ``--fail-if``: comparisons joined by
``and``/``or``/``not``, ``+ - * /``, numbers, quoted text, ``true``/``false``/``none``, names
with ``.`` steps (``original.fields.total``) and, where the vocabulary allows, ``[n]`` steps
and calls of a few named functions.

An expression is parsed with `ast` and checked against a whitelist of node kinds before
anything is evaluated, and evaluated by the small interpreter below, never by ``eval``: a name
is looked up in the scope the caller gives, a ``.`` or ``[n]`` step only reads a key of a
mapping or an item of a list (a step that names nothing is ``none``), and only the
vocabulary's functions can be called. So ``__import__('os')``, a lambda, an attribute of a
Python object or a comprehension are refused as they are read.

Every number is read as a decimal (a float as it prints), so ``0.1 + 0.2 == 0.3`` holds and a
rate at a threshold compares as it is written.
"""

from __future__ import annotations

import ast
import difflib
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

# Longer is not a rule anyone writes, and a bound keeps the parser's recursion shallow.
MAX_LENGTH: Final = 1000

# The spellings a shell user types for JSON's three words, as Python spells them.
_WORDS: Final = {"true": True, "false": False, "none": None, "null": None}

_ARITHMETIC: Final[Mapping[type[ast.operator], Callable[[Any, Any], Any]]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_COMPARISONS: Final[Mapping[type[ast.cmpop], Callable[[Any, Any], Any]]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda item, container: item in container,
    ast.NotIn: lambda item, container: item not in container,
}
_CONSTANTS: Final = (int, float, str, bool, type(None))


class ExpressionError(ValueError):
    """An expression that does not parse, names what its vocabulary has not, or cannot be
    evaluated (the message says which, in one line)."""


@dataclass(frozen=True)
class Vocabulary:
    """What an expression may name: its root ``names`` (``what`` they are, for messages),
    whether ``[n]`` steps are allowed, and the functions it may call."""

    what: str
    names: frozenset[str]
    subscripts: bool = False
    functions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)


def unknown(what: str, name: str, known: Sequence[str]) -> ExpressionError:
    """The error for a name that is none of ``known``, with the nearest ones."""
    near = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {', '.join(near)}?" if near else f"known: {', '.join(sorted(known))}"
    return ExpressionError(f"unknown {what} {name!r} ({hint})")


def parse_tree(text: str) -> ast.expr:
    """``text`` as a Python expression tree, not yet checked.

    Raises:
        ExpressionError: empty, too long, or not an expression.
    """
    if not text.strip():
        raise ExpressionError("empty expression")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        # Python gives no column (0) for an expression that stops short.
        where = f"at column {err.offset}" if err.offset else "at the end"
        raise ExpressionError(f"bad syntax {where}: {err.msg} in {text.strip()!r}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError("expression nested too deeply") from None


def _check(node: ast.expr, vocabulary: Vocabulary) -> None:
    match node:
        case ast.BoolOp(values=values):
            for value in values:
                _check(value, vocabulary)
        case ast.UnaryOp(op=ast.Not() | ast.USub() | ast.UAdd(), operand=operand):
            _check(operand, vocabulary)
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _ARITHMETIC:
            _check(left, vocabulary)
            _check(right, vocabulary)
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            bad = [op for op in ops if type(op) not in _COMPARISONS]
            if bad:
                raise ExpressionError(f"the comparison {type(bad[0]).__name__} is not allowed")
            for operand in (left, *comparators):
                _check(operand, vocabulary)
        case ast.Constant(value=value) if isinstance(value, _CONSTANTS):
            pass
        case ast.Name(id=name):
            if name not in vocabulary.names and name not in _WORDS:
                raise unknown(vocabulary.what, name, sorted(vocabulary.names))
        case ast.Attribute(value=value, attr=attr):
            if attr.startswith("_"):
                raise ExpressionError(f"no name starts with '_' ({attr!r})")
            _check(value, vocabulary)
        case ast.Subscript(value=value, slice=ast.Constant(value=int() | str() as key)) if (
            vocabulary.subscripts and not isinstance(key, bool)
        ):
            _check(value, vocabulary)
        case ast.Subscript(slice=index) if vocabulary.subscripts:
            raise ExpressionError(
                f"[{ast.unparse(index)}]: an index is a whole number from 0, or a quoted key"
            )
        case ast.Call(func=ast.Name(id=name), args=args, keywords=keywords) if (
            name in vocabulary.functions
        ):
            if keywords or any(isinstance(arg, ast.Starred) for arg in args):
                raise ExpressionError(f"{name}() takes its arguments in order, nothing else")
            for arg in args:
                _check(arg, vocabulary)
        case ast.Call(func=ast.Name(id=name)) if not vocabulary.functions:
            raise ExpressionError(f"{name}(): nothing can be called here")
        case ast.Call(func=ast.Name(id=name)):
            raise unknown("function", name, sorted(vocabulary.functions))
        case _:
            raise ExpressionError(
                f"{ast.unparse(node)!r} is not allowed here: only names, numbers, quoted text, "
                "comparisons, and/or/not and + - * /"
            )


def exact(value: Any) -> Any:
    """A number as a `Decimal` (a float as it prints: ``0.1`` is ``Decimal("0.1")``); any
    other value as it is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _step(container: Any, key: str | int) -> Any:
    if isinstance(container, Mapping):
        return container.get(key)
    if isinstance(container, list) and isinstance(key, int) and key < len(container):
        return container[key]
    return None


@dataclass(frozen=True)
class Expression:
    """A checked expression; `evaluate` reads it over a scope of names."""

    text: str
    tree: ast.expr
    vocabulary: Vocabulary

    def paths(self) -> Iterator[tuple[str, ...]]:
        """Each name the expression reads with its ``.`` steps (``("original", "fields",
        "total")``), in the order written; a ``[n]`` step ends a path."""
        return _paths(self.tree)

    def evaluate(self, scope: Mapping[str, Any]) -> Any:
        """The expression's value with each root name read from ``scope``.

        Raises:
            ExpressionError: an operation its values do not support (``none > 1``, ``1 / 0``).
        """
        return self._value(self.tree, scope)

    def _value(self, node: ast.expr, scope: Mapping[str, Any]) -> Any:
        match node:
            case ast.BoolOp(op=ast.And(), values=values):
                return all(bool(self._value(value, scope)) for value in values)
            case ast.BoolOp(values=values):
                return any(bool(self._value(value, scope)) for value in values)
            case ast.UnaryOp(op=ast.Not(), operand=operand):
                return not self._value(operand, scope)
            case ast.UnaryOp(op=sign, operand=operand):
                how = operator.neg if isinstance(sign, ast.USub) else operator.pos
                return _arithmetic(how, self._value(operand, scope))
            case ast.BinOp(left=left, op=arithmetic, right=right):
                left_value, right_value = self._value(left, scope), self._value(right, scope)
                return _arithmetic(_ARITHMETIC[type(arithmetic)], left_value, right_value)
            case ast.Compare(left=left, ops=ops, comparators=comparators):
                before = self._value(left, scope)
                for comparison, comparator in zip(ops, comparators, strict=True):
                    after = self._value(comparator, scope)
                    if not _applied(_COMPARISONS[type(comparison)], before, after):
                        return False
                    before = after
                return True
            case ast.Constant(value=value):
                return exact(value)
            case ast.Name(id=name):
                return exact(scope[name] if name in scope else _WORDS.get(name))
            case ast.Attribute(value=value, attr=attr):
                return exact(_step(self._value(value, scope), attr))
            case ast.Subscript(value=value, slice=ast.Constant(value=str() | int() as key)):
                return exact(_step(self._value(value, scope), key))
            case ast.Call(func=ast.Name(id=name), args=args):
                return self.vocabulary.functions[name](*(self._value(a, scope) for a in args))
        raise ExpressionError(f"cannot evaluate {ast.unparse(node)!r}")  # _check let it in


def _shown(values: Sequence[Any]) -> str:
    return ", ".join("none" if value is None else repr(value) for value in values)


def _applied(how: Callable[..., Any], *values: Any) -> Any:
    try:
        return how(*values)
    except (TypeError, ArithmeticError) as err:
        raise ExpressionError(f"cannot compute with {_shown(values)}: {err}") from None


def _arithmetic(how: Callable[..., Any], *values: Any) -> Any:
    # Numbers only: "a" * 10**9 would take the memory of the machine.
    if not all(isinstance(value, Decimal) for value in values):
        raise ExpressionError(f"arithmetic takes numbers, not {_shown(values)}")
    return _applied(how, *values)


def _path(node: ast.AST) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name):
        return None if node.id in _WORDS else (node.id,)
    if isinstance(node, ast.Attribute):
        inner = _path(node.value)
        return None if inner is None else (*inner, node.attr)
    return None


def _paths(node: ast.AST) -> Iterator[tuple[str, ...]]:
    found = _path(node)
    if found is not None:
        yield found
        return
    children = node.args if isinstance(node, ast.Call) else ast.iter_child_nodes(node)
    for child in children:
        yield from _paths(child)


def parse(text: str, vocabulary: Vocabulary) -> Expression:
    """``text`` checked against ``vocabulary``.

    Raises:
        ExpressionError: it does not parse, or uses what the vocabulary does not allow.
    """
    return checked(text, parse_tree(text), vocabulary)


def checked(text: str, tree: ast.expr, vocabulary: Vocabulary) -> Expression:
    """``tree`` (read from ``text``, maybe rewritten) checked against ``vocabulary``.

    Raises:
        ExpressionError: it uses what the vocabulary does not allow.
    """
    try:
        _check(tree, vocabulary)
    except RecursionError:
        raise ExpressionError("expression nested too deeply") from None
    return Expression(text, tree, vocabulary)
