"""``--fail-if``: rules over the report's totals that fail a lab run, for CI.

A rule compares metrics, joined by ``and``/``or``/``not``: ``problems_rate > baseline + 0.02``,
``cost_delta_usd > 0.5 or error_rate > 0``. A bare metric is the candidate's (a delta metric is
candidate - baseline already); ``baseline.X`` and ``original.X`` are another kind's, and a bare
``baseline`` (or ``original``) is that kind's value of the one metric its comparison names. The
metrics are `KindTotals`' and `Deltas`' fields, so a new total is a new metric.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from aiorch.ops.lab.expressions import (
    Expression,
    ExpressionError,
    Vocabulary,
    checked,
    parse_tree,
    unknown,
)
from aiorch.ops.lab.report import Deltas, GateOutcome, KindTotals, LabReport
from aiorch.ops.lab.scores import KINDS

PER_KIND: Final = tuple(KindTotals.model_fields)
DELTAS: Final = tuple(Deltas.model_fields)
METRICS: Final = (*PER_KIND, *DELTAS)
# A kind named alone stands for the metric beside it; the candidate is the bare metric already.
_OTHERS: Final = ("baseline", "original")

VOCABULARY: Final = Vocabulary(what="metric", names=frozenset({*METRICS, *KINDS}))


def _bare_names(node: ast.AST) -> list[ast.Name]:
    """The names in ``node`` that are no ``.`` step's base."""
    if isinstance(node, ast.Attribute):
        return []
    if isinstance(node, ast.Name):
        return [node]
    return [name for child in ast.iter_child_nodes(node) for name in _bare_names(child)]


class _Named(ast.NodeTransformer):
    """Reads a bare ``baseline`` or ``original`` as that kind's ``metric``."""

    def __init__(self, metric: str) -> None:
        self.metric = metric

    def visit_Attribute(self, node: ast.Attribute) -> ast.Attribute:
        return node  # baseline.cost_usd names its metric itself

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id not in _OTHERS:
            return node
        named = ast.Attribute(value=ast.Name(id=node.id, ctx=ast.Load()), attr=self.metric)
        return ast.copy_location(named, node)


class _SameMetric(ast.NodeTransformer):
    """Reads ``baseline`` in ``problems_rate > baseline + 0.02`` as ``baseline.problems_rate``."""

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        names = _bare_names(node)
        kinds = [name.id for name in names if name.id in _OTHERS]
        if not kinds:
            return node
        metrics = sorted({name.id for name in names if name.id in METRICS})
        if len(metrics) != 1:
            raise ExpressionError(
                f"{kinds[0]} alone stands for the metric beside it, but {ast.unparse(node)!r} "
                f"names {len(metrics)} ({', '.join(metrics) or 'none'}): write {kinds[0]}.METRIC"
            )
        named: ast.expr = _Named(metrics[0]).visit(node)
        return named


def _is_condition(node: ast.expr) -> bool:
    match node:
        case ast.Compare():
            return True
        case ast.BoolOp(values=values):
            return all(_is_condition(value) for value in values)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return _is_condition(operand)
    return False


def _check_paths(expression: Expression) -> None:
    for path in expression.paths():
        metric = path[-1]
        if len(path) == 1 and path[0] in KINDS:
            raise ExpressionError(
                f"{path[0]} alone stands for the metric it is compared with: write it in a "
                f"comparison (problems_rate > {path[0]} + 0.02) or as {path[0]}.METRIC"
            )
        if len(path) > 2 or (len(path) == 2 and path[0] not in KINDS):
            raise ExpressionError(
                f"{'.'.join(path)}: only baseline, original and candidate have metrics after a '.'"
            )
        if metric not in METRICS:
            raise unknown("metric", metric, METRICS)
        if len(path) == 2 and metric in DELTAS:
            raise ExpressionError(
                f"{metric} is candidate - baseline already: {path[0]}.{metric} is nothing"
            )


@dataclass(frozen=True)
class Gate:
    """A checked ``--fail-if`` rule."""

    expression: Expression

    def check(self, report: LabReport) -> GateOutcome:
        """Whether the rule holds for ``report``, with the metrics it read.

        Raises:
            ExpressionError: a metric it reads has no value in this report (no run was
                compared, or ``score_rate`` without ``--score``).
        """
        scope: dict[str, Any] = {kind: report.totals[kind].model_dump() for kind in KINDS}
        scope |= report.totals["candidate"].model_dump() | report.deltas.model_dump()
        values: dict[str, float] = {}
        for path in self.expression.paths():
            value = scope[path[0]] if len(path) == 1 else scope[path[0]][path[1]]
            if value is None:
                raise ExpressionError(
                    f"{'.'.join(path)} has no value: no run was compared"
                    + (", or no --score was given" if path[-1] == "score_rate" else "")
                )
            values[".".join(path)] = value
        held = self.expression.evaluate(scope)
        return GateOutcome(rule=self.expression.text, held=bool(held), values=values)


def parse_gate(text: str) -> Gate:
    """``text`` as a ``--fail-if`` rule.

    Raises:
        ExpressionError: bad syntax, an unknown metric, or what the language does not have.
    """
    tree = _SameMetric().visit(parse_tree(text))
    expression = checked(text, tree, VOCABULARY)
    _check_paths(expression)
    if not _is_condition(tree):
        raise ExpressionError(
            f"{text.strip()!r} is no condition: compare metrics (problems_rate > 0.1), "
            "joined by and/or"
        )
    return Gate(expression)


def check_all(report: LabReport, gates: list[Gate]) -> LabReport:
    """``report`` with each gate's outcome.

    Raises:
        ExpressionError: a gate reads a metric this report has no value for.
    """
    return report.model_copy(update={"gates": [gate.check(report) for gate in gates]})


def shown(value: float | Decimal) -> str:
    """A metric's value as a rule's outcome prints it."""
    return format(Decimal(repr(value)) if isinstance(value, float) else value, "f")
