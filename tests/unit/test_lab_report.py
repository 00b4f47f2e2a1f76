"""The replay lab's report from hand-built lab runs: field-by-field and text diffs, each kind's
rates, sums and medians, the deltas candidate - baseline, score rules, and the Markdown, HTML
and JSON renderings of untrusted replies."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from aiorch.ops.lab import report_html, report_markdown
from aiorch.ops.lab.expressions import ExpressionError
from aiorch.ops.lab.report import LabReport, build_report
from aiorch.ops.lab.report_diffs import FieldChange, field_changes, output_diff, text_diff
from aiorch.ops.lab.report_files import write_reports
from aiorch.ops.lab.scores import parse_score
from tests.support.lab_runs import comparison, lab_run, outcome, spent

INVOICE = {
    "vendor": "ACME",
    "total": 100.0,
    "tax": 10,
    "paid": 1,
    "notes": "net 30",
    "line_items": [{"amount": 60.0, "sku": "A"}, {"amount": 40.0}],
}
ANSWERED = {
    "vendor": "ACME",
    "total": 101.5,
    "tax": 10.0,
    "paid": True,
    "line_items": [{"amount": 60.0, "sku": "B"}, {"amount": 40.0}, {"amount": 1.5}],
    "currency": "EUR",
}
ATTACK = '<script>alert("x")</script><img src=x onerror=alert(1)> | ``` [link](http://evil)'


def test_the_field_diff_names_each_changed_added_and_removed_field_by_path() -> None:
    """Fields differ leaf by leaf, by the paths validation uses: a changed value with its
    before and after, a removed one with its before, an added one (a new line item too) with
    its after, in the original's order then the new ones'; 10 and 10.0 are the same number,
    while 1 and true are not the same value."""
    assert field_changes(INVOICE, ANSWERED) == [
        FieldChange(path="total", change="changed", before=100.0, after=101.5),
        FieldChange(path="paid", change="changed", before=1, after=True),
        FieldChange(path="notes", change="removed", before="net 30"),
        FieldChange(path="line_items[0].sku", change="changed", before="A", after="B"),
        FieldChange(path="line_items[2].amount", change="added", after=1.5),
        FieldChange(path="currency", change="added", after="EUR"),
    ]
    assert field_changes(INVOICE, INVOICE) == []
    assert field_changes(None, {"total": 1}) == [FieldChange(path="total", change="added", after=1)]


def test_a_reply_s_diff_is_unified_and_names_both_sides() -> None:
    """Text is compared line by line as a unified diff headed by the two kinds; equal texts
    have no diff, and a missing text is an empty one."""
    diff = text_diff("Dear Ann,\nyour refund is on its way.", "Dear Ann,\nno refund.", "a", "b")
    assert diff == "\n".join(
        [
            "--- a",
            "+++ b",
            "@@ -1,2 +1,2 @@",
            " Dear Ann,",
            "-your refund is on its way.",
            "+no refund.",
        ]
    )
    assert text_diff("same", "same", "a", "b") is None
    assert text_diff(None, "", "a", "b") is None
    assert text_diff(None, "new", "a", "b") == "--- a\n+++ b\n@@ -0,0 +1 @@\n+new"


def test_a_failed_fork_is_compared_with_nothing_and_says_why() -> None:
    """When the candidate (or the outcome it is compared with) failed, its diff holds no
    changes, is not the same output, and notes which failed and how."""
    failed = outcome("candidate", error="ModelServerError: 503")
    diff = output_diff(outcome("original", fields=INVOICE), failed)
    assert (diff.same, diff.fields, diff.text) == (False, [], None)
    assert diff.note == "the candidate failed: ModelServerError: 503"


def test_each_run_diffs_the_candidate_against_the_original_and_the_baseline() -> None:
    """A run's report holds the candidate's field changes against the original's and against
    the baseline's separately, and which outcomes changed from the original."""
    run = comparison(
        original={"fields": INVOICE},
        baseline={"fields": {**INVOICE, "total": 101.5}},
        candidate={"fields": {**INVOICE, "total": 101.5}},
    )
    [report] = build_report(lab_run([run])).runs
    assert report.vs_original.fields == [
        FieldChange(path="total", change="changed", before=100.0, after=101.5)
    ]
    assert (report.vs_baseline.same, report.vs_baseline.fields) == (True, [])
    assert (report.original.changed, report.baseline.changed, report.candidate.changed) == (
        False,
        True,
        True,
    )


def test_rates_count_every_compared_run_and_a_failed_fork_as_one_with_a_problem() -> None:
    """Each kind's rates are shares of all compared runs: with problems (a failed fork counts),
    needs review, failed, changed from the original; 1 of 4 is exactly 0.25."""
    runs = [
        comparison("r1", candidate={"problems": ["total: mismatch"], "needs_review": True}),
        comparison("r2", candidate={"error": "timed out"}),
        comparison("r3", baseline={"needs_review": True}),
        comparison("r4"),
    ]
    totals = build_report(lab_run(runs)).totals
    candidate, baseline, original = totals["candidate"], totals["baseline"], totals["original"]
    assert (candidate.runs, candidate.with_problems, candidate.failed) == (4, 2, 1)
    assert (candidate.problems_rate, candidate.error_rate) == (0.5, 0.25)
    assert (candidate.needs_review_rate, baseline.needs_review_rate) == (0.25, 0.25)
    assert (candidate.changed_rate, baseline.changed_rate, original.changed_rate) == (0.25, 0, 0)
    assert (original.problems_rate, original.score_rate) == (0, None)


def test_with_no_run_compared_every_rate_and_median_is_none() -> None:
    """An empty lab run has no rates and no medians (not zeros), and sums of zero."""
    report = build_report(lab_run([], skipped={"r1": "no such run"}))
    empty = report.totals["candidate"]
    assert (empty.runs, empty.problems_rate, empty.median_cost_usd, empty.cost_usd) == (
        0,
        None,
        None,
        0,
    )
    assert (report.deltas.median_tokens_delta, report.deltas.tokens_delta) == (None, 0)
    assert report.skipped == {"r1": "no such run"}


def test_deltas_are_candidate_minus_baseline_in_sum_and_at_the_median_run() -> None:
    """Tokens, cost and latency: each kind's sums and medians, the sums' differences and the
    median of each run's difference; float sums are rounded, so 0.1 + 0.2 + 0.3 - 0.1 is 0.5."""
    runs = [
        comparison(
            f"r{n}",
            baseline={"use": spent(0.1 if n == 0 else 0.0, (10, 5), 1.0)},
            candidate={"use": spent(cost, (12, 5 + n), latency)},
        )
        for n, (cost, latency) in enumerate([(0.1, 0.5), (0.2, 0.7), (0.3, 3.0)])
    ]
    report = build_report(lab_run(runs))
    candidate, baseline = report.totals["candidate"], report.totals["baseline"]
    assert (candidate.cost_usd, baseline.cost_usd) == (0.6, 0.1)
    assert (candidate.tokens, candidate.median_tokens, candidate.median_latency_s) == (54, 18, 0.7)
    assert report.deltas.cost_delta_usd == 0.5
    assert report.deltas.tokens_delta == 54 - 45
    assert report.deltas.latency_delta_s == pytest.approx(1.2)
    assert report.deltas.median_cost_delta_usd == 0.2
    assert [run.tokens_delta for run in report.runs] == [2, 3, 4]
    assert report.deltas.median_tokens_delta == 3


def test_a_score_rule_is_scored_for_each_kind_and_gives_its_pass_rate() -> None:
    """``fields.total == original.fields.total`` passes where a fork kept the original's
    total; a failed fork fails; each kind's score_rate is its share of passes."""
    runs = [
        comparison(
            "r1",
            original={"fields": INVOICE},
            candidate={"fields": ANSWERED},
            baseline={"fields": INVOICE},
        ),
        comparison(
            "r2",
            original={"fields": INVOICE},
            candidate={"fields": INVOICE},
            baseline={"error": "boom"},
        ),
    ]
    rule = parse_score("fields.total == original.fields.total")
    report = build_report(lab_run(runs), rule)
    assert [run.candidate.score.passed for run in report.runs if run.candidate.score] == [
        False,
        True,
    ]
    assert report.runs[1].baseline.score is not None
    assert report.runs[1].baseline.score.error == "the baseline failed"
    assert report.score_rule == "fields.total == original.fields.total"
    scores = {kind: report.totals[kind].score_rate for kind in report.totals}
    assert scores == {"original": 1.0, "baseline": 0.5, "candidate": 0.5}


@pytest.mark.parametrize(
    ("rule", "passes"),
    [
        ("problems == 0", True),
        ("problems > 0 or needs_review", False),
        ('matches(text, "(?i)REFUND")', True),
        ('"refund" in text and not matches(text, "^no")', True),
        ("fields.line_items[1].amount == 40", True),
        ("fields.line_items[9].amount == none", True),
        ("fields.tax + fields.total == 110.0", True),
        ("baseline.text != text", True),
    ],
)
def test_score_rules_read_the_fork_s_fields_text_problems_and_review(
    rule: str, passes: bool
) -> None:
    """The rule set: counts of problems, needs_review, a regex on the text, a field by path
    (a path to nothing is none), arithmetic in exact decimals, another kind's output."""
    run = comparison(
        pipeline="llm",
        baseline={"text": "other"},
        candidate={"text": "Your refund is on its way", "fields": INVOICE},
    )
    score = parse_score(rule).score(run, "candidate")
    assert (score.passed, score.error) == (passes, None)


def test_a_rule_that_cannot_be_computed_fails_the_fork_with_the_reason() -> None:
    """Arithmetic on text (``text * 10**9`` would take the machine's memory) or an order of
    none, and a rule that is no yes-or-no, fail the fork and say why."""
    run = comparison(candidate={"text": "x"})
    for rule, reason in [
        ("text * 1000000000 == text", "arithmetic takes numbers"),
        ("fields.total > 1", "cannot compute with none"),
        ("problems", "the rule gave"),
    ]:
        score = parse_score(rule).score(run, "candidate")
        assert not score.passed
        assert score.error is not None and score.error.startswith(reason), score.error


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("field.total == 1", "unknown name 'field' (did you mean fields?)"),
        ("original == 1", "original: name what of the original to read"),
        ("text.total == 1", "text.total: text has no fields"),
        ('matches(text, "(")', "matches: '(' is no regex"),
        ("matches(text)", "matches takes text and a quoted regex"),
        ('matches(text, pattern="x")', "matches() takes its arguments in order"),
        ("open('/etc/passwd') == 1", "unknown function 'open'"),
        ("fields.__class__ == 1", "no name starts with '_'"),
        ("fields.line_items[-1] == 1", "[-1]: an index is a whole number from 0"),
    ],
)
def test_a_score_rule_that_reads_what_no_fork_has_is_refused(rule: str, message: str) -> None:
    """A bad rule is refused when it is read, in one line that says what is wrong."""
    with pytest.raises(ExpressionError, match=re.escape(message)):
        parse_score(rule)


class _Elements(HTMLParser):
    """The start tags of a page, with their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _attacked() -> LabReport:
    run = comparison(
        ATTACK,
        pipeline="llm",
        original={"text": "Hello", "fields": {"name": "Ann"}},
        baseline={"text": "Hello"},
        candidate={"text": ATTACK, "fields": {"name": ATTACK}, "problems": [ATTACK]},
    )
    return build_report(lab_run([run], skipped={ATTACK: ATTACK}))


def test_the_html_page_shows_an_attacker_s_reply_as_text() -> None:
    """A reply, a field, a problem and a run id holding markup are escaped: the page has no
    script element, no event handler attribute and no link, loads nothing (its policy allows
    no script or source), and shows the reply's characters as written."""
    page = report_html.render(_attacked())
    parser = _Elements()
    parser.feed(page)
    tags = {tag for tag, _ in parser.tags}
    assert not tags & {"script", "img", "a", "iframe", "link"}
    assert not [attrs for _, attrs in parser.tags if any(k.startswith("on") for k in attrs)]
    policy = next(a for t, a in parser.tags if t == "meta" and "http-equiv" in a)["content"]
    assert policy == "default-src 'none'; style-src 'unsafe-inline'"
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page


def test_the_markdown_keeps_a_reply_inert() -> None:
    """In Markdown a reply can neither add a table column, a link or HTML, nor close the
    fence its diff sits in: cells escape what Markdown acts on, and the fence is longer than
    any run of backticks in the diff."""
    text = report_markdown.render(_attacked())
    assert "<script>" not in text.split("````diff", 1)[0]
    assert "\\<script\\>" in text and "\\[link\\](http://evil)" in text
    fenced = text.split("````diff\n", 1)[1].split("\n````", 1)[0]
    assert ATTACK in fenced
    rows = [line for line in text.splitlines() if line.startswith("| problems |")]
    assert rows and all(len(re.split(r"(?<!\\)\|", row)) == 6 for row in rows)


def test_the_three_files_hold_the_same_report(tmp_path: Path) -> None:
    """``report.json`` reads back as the report itself; the Markdown and HTML files are the
    renderings of it."""
    report = _attacked()
    written = write_reports(report, tmp_path / "out")
    assert [path.name for path in written] == ["report.md", "report.html", "report.json"]
    assert LabReport.model_validate_json(written[2].read_text()) == report
    assert written[0].read_text() == report_markdown.render(report)
    assert written[1].read_text() == report_html.render(report)
    assert json.loads(written[2].read_text())["runs"][0]["candidate"]["outcome"]["text"] == ATTACK
