"""Where a problem is in a pipeline file's text: the marks the reader keeps for each value,
and a problem placed at its line and column (``FILE:LINE:COLUMN: RULE: what is wrong``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from workflows.data.compiler import CheckProblem
from workflows.data.spec import VERSION_AS_NUMBER
from workflows.payloads import printable

Loc = tuple[Any, ...]


@dataclass(frozen=True)
class FileProblem:
    """One problem in a pipeline file: where (1-based line and column), the rule, what."""

    file: str
    line: int
    column: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.rule}: {self.message}"


@dataclass
class Marks:
    """Where each value was in the text: the mark of a mapping entry is its key's."""

    at: dict[Loc, tuple[int, int]] = field(default_factory=dict)
    values: dict[Loc, yaml.Node] = field(default_factory=dict)

    def where(self, path: Loc) -> tuple[int, int]:
        """The line and column of ``path``, or of the nearest enclosing value."""
        current = tuple(path)
        while current and current not in self.at:
            current = current[:-1]
        return self.at.get(current, (1, 1))


def file_problem(name: str, text: str, marks: Marks, problem: CheckProblem) -> FileProblem:
    """``problem`` at its line and column in file ``name`` (``text``): a template's problem at
    its own line in the template; a version YAML read as a number quoted as the file wrote it
    (``1.10``, which YAML reads as 1.1)."""
    line, column = marks.where(problem.path)
    node = marks.values.get(tuple(problem.path))
    if problem.template_line and isinstance(node, yaml.ScalarNode):
        line, column = template_position(text, node, problem.template_line)
    message = problem.message
    if VERSION_AS_NUMBER in message and isinstance(node, yaml.ScalarNode):
        message = f"write it as a string ('{printable(node.value, 32)}'), {VERSION_AS_NUMBER}"
    return FileProblem(name, line, column, str(problem.rule), message)


def template_position(text: str, node: yaml.ScalarNode, template_line: int) -> tuple[int, int]:
    """Where line ``template_line`` of a scalar's value is in the file: a block scalar's text
    starts on the line after its indicator; a flow scalar's on its own line."""
    start = node.start_mark.line + 1
    if node.style in ("|", ">"):
        line = start + template_line
        lines = text.splitlines()
        body = lines[line - 1] if 0 < line <= len(lines) else ""
        return line, len(body) - len(body.lstrip()) + 1
    if template_line == 1:
        return start, node.start_mark.column + 1
    return start + template_line - 1, 1
