"""``--fail-if``: rules over a report's totals, each comparison at its boundary, the baseline's
and the original's metrics, and every rule outside the language refused before anything runs
(never evaluated by Python)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiorch.ops.lab.expressions import ExpressionError
from aiorch.ops.lab.gates import METRICS, check_all, parse_gate
from aiorch.ops.lab.report import LabReport, build_report
from aiorch.ops.lab.scores import parse_score
from tests.support import ROOT
from tests.support.lab_runs import comparison, lab_run, spent


def _report(problems: int = 3, baseline_problems: int = 1, runs: int = 10) -> LabReport:
    """``runs`` runs whose candidate has problems in the first ``problems`` and the baseline
    in the first ``baseline_problems``; the candidate costs 0.1 more per run."""
    return build_report(
        lab_run(
            [
                comparison(
                    f"r{n}",
                    candidate={
                        "problems": ["total: off"] if n < problems else [],
                        "use": spent(0.15),
                    },
                    baseline={
                        "problems": ["total: off"] if n < baseline_problems else [],
                        "use": spent(0.05),
                    },
                )
                for n in range(runs)
            ]
        )
    )


@pytest.mark.parametrize(
    ("rule", "held"),
    [
        # The candidate's problems_rate is 0.3, the baseline's 0.1: 0.1 + 0.2 is 0.3 exactly.
        ("problems_rate > baseline + 0.2", False),
        ("problems_rate >= baseline + 0.2", True),
        ("problems_rate < 0.3", False),
        ("problems_rate <= 0.3", True),
        ("problems_rate == 0.3", True),
        ("problems_rate != 0.3", False),
        # Ten runs at 0.15 against 0.05: the delta's sum is 1.0 after float sums.
        ("cost_delta_usd > 1", False),
        ("cost_delta_usd >= 1.0", True),
        ("cost_usd > baseline.cost_usd * 3", False),
        ("cost_usd >= 3 * baseline", True),
        ("0.2 < problems_rate <= 0.3", True),
        ("with_problems - baseline.with_problems == 2", True),
        ("problems_rate > 0.5 or needs_review_rate >= 0", True),
        ("problems_rate > 0.2 and not error_rate > 0", True),
        ("problems_rate > 0.2 and error_rate > 0", False),
        ("original.problems_rate == 0 and changed_rate == 0", True),
    ],
)
def test_each_comparison_holds_from_its_boundary_on(rule: str, held: bool) -> None:
    """Each operator holds or not exactly at its threshold, with decimal arithmetic (no float
    error moves a boundary); ``baseline`` alone is the baseline's value of the metric beside
    it, ``baseline.X`` and ``original.X`` another kind's, and and/or/not join comparisons."""
    [outcome] = check_all(_report(), [parse_gate(rule)]).gates
    assert outcome.held is held, outcome


def test_a_rule_s_outcome_names_the_values_it_read() -> None:
    """The outcome keeps the rule as written and each metric it read (the baseline's by its
    kind), so a CI log says why it failed."""
    report = check_all(_report(), [parse_gate("problems_rate > baseline + 0.02")])
    [outcome] = report.gates
    assert outcome.rule == "problems_rate > baseline + 0.02"
    assert outcome.values == {"problems_rate": 0.3, "baseline.problems_rate": 0.1}
    assert report.held == [outcome]


def test_a_metric_with_no_value_is_an_error_not_a_pass() -> None:
    """A rule over an empty lab run, or over ``score_rate`` when nothing was scored, cannot be
    decided: it is an error, so a gate never passes by reading nothing."""
    empty = build_report(lab_run([]))
    with pytest.raises(ExpressionError, match="problems_rate has no value: no run was compared"):
        check_all(empty, [parse_gate("problems_rate > 0.1")])
    with pytest.raises(ExpressionError, match="or no --score was given"):
        check_all(_report(), [parse_gate("score_rate < baseline - 0.05")])
    scored = build_report(lab_run([comparison()]), parse_score("problems == 0"))
    [outcome] = check_all(scored, [parse_gate("score_rate < baseline - 0.05")]).gates
    assert not outcome.held


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("problem_rate > 0.1", "unknown metric 'problem_rate' (did you mean problems_rate"),
        ("baseline.cost > 1", "unknown metric 'cost' (did you mean"),
        ("problems_rate > 0.1 andd cost_usd > 1", "bad syntax at column"),
        ("problems_rate >", "bad syntax at the end"),
        ("", "empty expression"),
        ("problems_rate", "is no condition"),
        ("problems_rate + 1", "is no condition"),
        ("baseline > 0.1", "baseline alone stands for the metric beside it"),
        ("problems_rate > baseline + cost_usd", "names 2 (cost_usd, problems_rate)"),
        ("baseline.cost_delta_usd > 0", "cost_delta_usd is candidate - baseline already"),
        ("problems_rate.x > 0", "only baseline, original and candidate have metrics"),
        ("problems_rate > 0.1 " * 60, "longer than 1000 characters"),
        ("problems_rate ** 2 > 0", "is not allowed here"),
        ("problems_rate[0] > 0", "is not allowed here"),
    ],
)
def test_a_rule_outside_the_language_is_refused_in_one_line(rule: str, message: str) -> None:
    """Unknown metrics (with the nearest names), bad syntax, a rule that is no condition and a
    lone ``baseline`` with no one metric to stand for are refused as the rule is read."""
    with pytest.raises(ExpressionError, match=re.escape(message)) as refused:
        parse_gate(rule)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "rule",
    [
        "__import__('os').system('touch {marker}') == 0",
        "open('{marker}', 'w') == 0",
        "problems_rate.__class__.__base__ == 0",
        "().__class__.__bases__[0].__subclasses__() == 0",
        "[c for c in ()] == 0",
        "(lambda: open('{marker}', 'w'))() == 0",
        "(problems_rate := 1) > 0",
        'f\'{{open("{marker}", "w")}}\' == 0',
        "problems_rate if open('{marker}', 'w') else 0 > 0",
        "eval(\"open('{marker}', 'w')\") == 0",
        "'a' * 10 ** 10 == 0",
        "problems_rate > 0; import os",
    ],
)
def test_code_in_a_rule_is_refused_and_never_runs(rule: str, tmp_path: Path) -> None:
    """Calls, attributes of Python objects, comprehensions, lambdas, assignments, f-strings,
    conditionals, powers and statements are refused when read; what they would have done (make
    a file) is never done."""
    marker = tmp_path / "ran"
    with pytest.raises(ExpressionError):
        parse_gate(rule.format(marker=marker))
    assert not marker.exists()


def test_the_docs_list_every_metric() -> None:
    """docs/lab.md names each metric a rule may read (the totals' and the deltas' fields)."""
    page = (ROOT / "docs" / "lab.md").read_text(encoding="utf-8")
    missing = [metric for metric in METRICS if f"`{metric}`" not in page]
    assert missing == []
