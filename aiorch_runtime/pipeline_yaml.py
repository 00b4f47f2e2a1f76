"""Reading a pipeline file's YAML into plain data, with the line and column of every value,
bounded by what the text expands to, not only by its bytes.

PyYAML shares an anchored value among its aliases and expands them while building Python
objects, so a few hundred bytes of nested aliases ("billion laughs") build billions of values,
and an alias inside its own anchor (``x: &a [*a]``) never ends. The reader first measures the
composed node graph once per node (shared nodes are measured once, by identity): a value
that holds itself, values nested deeper than ``MAX_DEPTH`` or more than ``MAX_VALUES`` values
once every alias is expanded are a problem of the file (``ReadRefused``, with the line of the
value), found before anything is expanded. Anchors and aliases within those bounds work as
YAML says.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

import yaml

from aiorch_runtime.pipeline_places import Loc, Marks
from workflows.data.contract import Rule

# A pipeline's own structure (steps, settings, JSON Schemas) nests a dozen levels; PyYAML's
# composer and the checks after it recurse once or more per level.
MAX_DEPTH: Final = 40
# A 64 KiB file without aliases holds at most about 33,000 values ("a: [1,1,1,...]").
MAX_VALUES: Final = 100_000


class ReadRefused(yaml.MarkedYAMLError):
    """The text is YAML but expands past the reader's bounds; ``rule`` names which."""

    def __init__(self, rule: Rule, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.rule = rule


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing nesting deeper than ``MAX_DEPTH`` while it composes (its
    composer recurses once per level)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                # Where the reader is: the line is the value's (the scanner reads a little on).
                raise ReadRefused(
                    Rule.FILE_TOO_LARGE,
                    f"values nest more than {MAX_DEPTH} levels deep",
                    self.get_mark(),
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def measure(root: yaml.Node) -> None:
    """Check what ``root`` expands to, each shared node measured once, without recursion.

    Raises:
        ReadRefused: a value holds itself, or the expanded values nest too deep or are too many.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node): (values, depth) once expanded
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        if leaving:
            open_nodes.discard(key)
            sizes = [measured[id(child)] for child in _children(node)]
            values = 1 + sum(size for size, _ in sizes)
            depth = 1 + max((depth for _, depth in sizes), default=0)
            if values > MAX_VALUES:
                raise ReadRefused(
                    Rule.FILE_TOO_LARGE,
                    f"its aliases expand to more than {MAX_VALUES} values",
                    node.start_mark,
                )
            if depth > MAX_DEPTH:
                raise ReadRefused(
                    Rule.FILE_TOO_LARGE,
                    f"its aliases nest values more than {MAX_DEPTH} levels deep",
                    node.start_mark,
                )
            measured[key] = (values, depth)
        elif key in open_nodes:
            raise ReadRefused(
                Rule.YAML, "an alias refers to a value that holds it", node.start_mark
            )
        elif key not in measured:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


class Reader:
    """YAML into plain data, keeping marks and refusing duplicate keys and non-JSON values;
    keys are taken as written (``on:`` is the key "on", not YAML 1.1's true)."""

    def __init__(self, text: str) -> None:
        self.loader = _Loader(text)
        self.marks = Marks()
        self.problems: list[tuple[Loc, Rule, str]] = []

    def read(self) -> Any:
        """The text's data.

        Raises:
            ReadRefused: as `measure`, or nested deeper than ``MAX_DEPTH`` as written.
            yaml.YAMLError: the text is not YAML.
        """
        try:
            node = self.loader.get_single_node()
            if node is None:
                return None
            measure(node)
            return self._data(node, ())
        finally:
            self.loader.dispose()

    def _mark(self, path: Loc, node: yaml.Node) -> None:
        self.marks.at[path] = (node.start_mark.line + 1, node.start_mark.column + 1)

    def _data(self, node: yaml.Node, path: Loc) -> Any:
        self.marks.at.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        self.marks.values[path] = node
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)
            data: dict[str, Any] = {}
            for key_node, value_node in node.value:
                # A key is its text: YAML 1.1 would read `on:` as true and `1:` as a number.
                if not isinstance(key_node, yaml.ScalarNode):
                    self._mark((*path,), key_node)
                    self.problems.append(((*path,), Rule.INVALID_VALUE, "a key must be a name"))
                    continue
                key = str(key_node.value)
                entry = (*path, key)
                if key in data:
                    self._mark(entry, key_node)
                    self.problems.append((entry, Rule.DUPLICATE_KEY, f"{key!r} is given twice"))
                    continue
                self._mark(entry, key_node)
                data[key] = self._data(value_node, entry)
            return data
        if isinstance(node, yaml.SequenceNode):
            items = []
            for index, item in enumerate(node.value):
                self._mark((*path, index), item)
                items.append(self._data(item, (*path, index)))
            return items
        value = self.loader.construct_object(node, deep=True)
        if isinstance(value, dt.datetime | dt.date):
            return value.isoformat()
        if isinstance(value, bytes):
            self.problems.append((path, Rule.INVALID_VALUE, "binary data is not allowed"))
            return None
        if isinstance(value, float) and value != value:  # NaN is no JSON
            self.problems.append((path, Rule.INVALID_VALUE, "NaN is not allowed"))
            return None
        return value
