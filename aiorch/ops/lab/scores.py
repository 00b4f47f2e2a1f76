"""``--score``: a rule over a fork's output that passes or fails, scored for each of a run's
three outcomes (the original, the baseline, the candidate), so the report can give each kind's
pass rate.

A rule reads its own fork's ``fields`` (``fields.total``, ``fields.line_items[2].amount``),
``text``, ``problems`` (how many validation found) and ``needs_review``, and any of the run's
three outcomes by kind (``original.fields.total``, ``baseline.text``); ``matches(text,
"regex")`` searches text. A fork that failed fails every rule. An LLM judge is not offered
here: it would have to go through the workers' model-call path and limits.

`parse_outcome_rule` reads the same language over one outcome alone (its own names only), for
the judges of a rollout, which score a live run's outcome (`ScoreRule.judge`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Final, get_args

from pydantic import BaseModel, ConfigDict

from aiorch.ops.lab.expressions import Expression, ExpressionError, Vocabulary, parse
from aiorch.ops.lab.outcomes import ForkKind, ForkOutcome, RunComparison

KINDS: Final[tuple[ForkKind, ...]] = get_args(ForkKind)
# What a rule may read of a fork: its own, bare, or another's after its kind.
FORK_NAMES: Final = ("fields", "text", "problems", "needs_review")


def _matches(text: Any, pattern: Any) -> bool:
    return isinstance(text, str) and isinstance(pattern, str) and bool(re.search(pattern, text))


VOCABULARY: Final = Vocabulary(
    what="name",
    names=frozenset({*FORK_NAMES, *KINDS}),
    subscripts=True,
    functions={"matches": _matches},
)
# A judge of live runs reads one outcome: there is no baseline or candidate to name.
OUTCOME_VOCABULARY: Final = Vocabulary(
    what="name", names=frozenset(FORK_NAMES), subscripts=True, functions={"matches": _matches}
)


class Score(BaseModel):
    """How one fork did by the rule: ``passed``, or why it could not pass (``error``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: bool
    error: str | None = None


def _view(outcome: ForkOutcome) -> dict[str, Any]:
    return {
        "fields": outcome.fields,
        "text": outcome.text,
        "problems": len(outcome.problems),
        "needs_review": outcome.needs_review,
    }


@dataclass(frozen=True)
class ScoreRule:
    """A checked ``--score`` rule."""

    expression: Expression

    @property
    def text(self) -> str:
        """The rule as the user wrote it."""
        return self.expression.text

    def score(self, comparison: RunComparison, kind: ForkKind) -> Score:
        """How the ``kind`` outcome of ``comparison`` does by this rule."""
        own: ForkOutcome = getattr(comparison, kind)
        if own.error is not None:
            return Score(passed=False, error=f"the {kind} failed")
        scope: dict[str, Any] = _view(own)
        scope |= {other: _view(getattr(comparison, other)) for other in KINDS}
        return self._scored(scope)

    def judge(self, outcome: ForkOutcome) -> Score:
        """How one outcome does by this rule, read alone (a rule of `parse_outcome_rule`)."""
        if outcome.error is not None:
            return Score(passed=False, error=f"the {outcome.kind} failed")
        return self._scored(_view(outcome))

    def _scored(self, scope: dict[str, Any]) -> Score:
        try:
            value = self.expression.evaluate(scope)
        except ExpressionError as err:
            return Score(passed=False, error=str(err))
        if not isinstance(value, bool):
            return Score(passed=False, error=f"the rule gave {value!r}, not true or false")
        return Score(passed=value)


def _check_paths(expression: Expression) -> None:
    for path in expression.paths():
        if path[0] in KINDS and (len(path) < 2 or path[1] not in FORK_NAMES):
            step = f".{path[1]}" if len(path) > 1 else ""
            raise ExpressionError(
                f"{path[0]}{step}: name what of the {path[0]} to read "
                f"({', '.join(f'{path[0]}.{name}' for name in FORK_NAMES)})"
            )
        named = path[1:] if path[0] in KINDS else path
        if named[0] != "fields" and len(named) > 1:
            raise ExpressionError(f"{'.'.join(path)}: {named[0]} has no fields")


def _check_calls(expression: Expression) -> None:
    for node in ast.walk(expression.tree):
        if isinstance(node, ast.Call):
            pattern = node.args[1] if len(node.args) == 2 else None
            if not isinstance(pattern, ast.Constant) or not isinstance(pattern.value, str):
                raise ExpressionError('matches takes text and a quoted regex: matches(text, "x")')
            try:
                re.compile(pattern.value)
            except re.error as err:
                raise ExpressionError(f"matches: {pattern.value!r} is no regex: {err}") from None


def parse_score(text: str) -> ScoreRule:
    """``text`` as a score rule.

    Raises:
        ExpressionError: it does not parse, or reads what a fork has not.
    """
    return _checked(parse(text, VOCABULARY))


def parse_outcome_rule(text: str) -> ScoreRule:
    """``text`` as a rule over one outcome alone (``fields``, ``text``, ``problems``,
    ``needs_review``).

    Raises:
        ExpressionError: it does not parse, or reads what an outcome has not.
    """
    return _checked(parse(text, OUTCOME_VOCABULARY))


def _checked(expression: Expression) -> ScoreRule:
    _check_paths(expression)
    _check_calls(expression)
    return ScoreRule(expression)
