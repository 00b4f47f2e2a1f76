"""Review policies as pure data and functions: the auto-approve rules' tests over a result's
facts, the quorum arithmetic, and the operator's REVIEW_POLICIES and REVIEW_GROUPS checked when
the settings load and when the worker starts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aiorch.worker.options import check_review_policies
from aiorch_runtime.config import ConfigError, Settings, load_settings
from tests.support.builders import AT, prompt_plan
from workflows.engine.policies import decides, holds, matching_rule, progress, voter
from workflows.llm.graph import GRAPH, State
from workflows.orchestrator import SHIPPED
from workflows.payloads import (
    AutoApproveRule,
    Condition,
    FactValue,
    ReviewKey,
    ReviewProgress,
    ReviewStage,
    RunState,
    Vote,
)

FACTS: dict[str, FactValue] = {
    "problems": 0,
    "confidence": 0.93,
    "needs_review": True,
    "fields.total": "1234.50",
    "fields.currency": "EUR",
    "fields.note": None,
}


def test_a_key_for_named_reviewers_is_one_voter_whatever_name_it_signs() -> None:
    """A vote is cast by the key that signed it when that key signs for named reviewers (two
    names, one voter), and by the reviewer named when the key signs for anyone (the inbox's)
    or is not known (authentication off): each name is a voter."""
    plan = prompt_plan(
        review_keys=[
            ReviewKey(key_id="team", public_key="k", reviewers=["bob", "carol"]),
            ReviewKey(key_id="inbox", public_key="k", reviewers=None),
        ]
    )
    assert voter(plan, "bob", "team") == voter(plan, "carol", "team")
    assert voter(plan, "bob", "inbox") != voter(plan, "carol", "inbox")
    assert voter(plan, "bob", None) != voter(plan, "carol", None)
    assert voter(plan, "bob", "team") != voter(plan, "bob", "inbox")


def passes(fact: str, op: str, value: Any) -> bool:
    return holds(Condition(fact=fact, op=op, value=value), FACTS)


def test_comparisons_read_numbers_and_decimal_text_alike() -> None:
    """Comparisons take numbers and texts written as decimals (an invoice's money) alike, and
    nothing else: a text that is not a decimal, a bool or a missing value never compares."""
    assert passes("confidence", ">=", 0.9) and not passes("confidence", ">=", 0.95)
    assert passes("fields.total", "<=", 2000) and not passes("fields.total", "<", 1000)
    assert passes("problems", "==", 0) and not passes("problems", "!=", 0)
    assert passes("fields.total", "==", 1234.5)
    assert not passes("fields.currency", "<", 10)
    assert not passes("needs_review", ">", 0)  # a bool is no number
    assert not passes("fields.note", ">=", 0)


@pytest.mark.parametrize(
    ("op", "below", "at", "above"),
    [
        (">=", False, True, True),
        (">", False, False, True),
        ("<=", True, True, False),
        ("<", True, False, False),
    ],
)
def test_each_comparison_at_its_boundary(op: str, below: bool, at: bool, above: bool) -> None:
    """Each comparison decides the value equal to its bound as its operator says (``>=`` and
    ``<=`` take it, ``>`` and ``<`` do not), for a number and for a decimal text alike, and the
    values just either side of it the other way or the same."""
    for bound, facts in ((0.9, (0.89, 0.9, 0.91)), (2000, ("1999.99", "2000", "2000.01"))):
        outcomes = [holds(Condition(fact="x", op=op, value=bound), {"x": fact}) for fact in facts]
        assert outcomes == [below, at, above], (op, bound)


def test_a_missing_fact_never_passes_any_test() -> None:
    """A fact the result does not have fails every test, ``!=`` and ``not_in`` included, so a
    mistyped fact can only keep a rule from approving."""
    for op, value in (("==", None), ("!=", 1), ("not_in", [1]), ("<", 1), ("in", [None])):
        assert not passes("confidance", op, value), op


def test_equality_and_membership_keep_types_apart() -> None:
    """True is not 1, "EUR" is in ["EUR", "USD"], None equals only None."""
    assert passes("needs_review", "==", True) and not passes("needs_review", "==", 1)
    assert passes("fields.currency", "in", ["EUR", "USD"])
    assert passes("fields.currency", "not_in", ["GBP"])
    assert passes("fields.note", "==", None) and not passes("fields.currency", "==", None)


def test_a_rule_approves_only_when_every_test_passes() -> None:
    """The first rule whose every test passes is the one that approves; none matches when any
    test fails."""
    clean = AutoApproveRule(
        name="clean",
        when=[
            Condition(fact="problems", op="==", value=0),
            Condition(fact="confidence", op=">=", value=0.99),
        ],
    )
    sure = AutoApproveRule(name="sure", when=[Condition(fact="confidence", op=">=", value=0.9)])
    assert matching_rule([clean], FACTS) is None
    found = matching_rule([clean, sure], FACTS)
    assert found is not None and found.name == "sure"


def test_a_quorum_counts_distinct_reviewers() -> None:
    """A vote decides once, with it, as many distinct reviewers agree as needed; the same
    reviewer twice is one; a reedit always decides."""
    tally = ReviewProgress(approvals=["alice"], approvals_needed=2, rejections_needed=2)
    assert not decides(tally, "approve", "alice")
    assert decides(tally, "approve", "bob")
    assert not decides(tally, "reject", "bob")
    assert decides(tally, "reedit", "bob")
    assert decides(ReviewProgress(), "approve", "alice")  # the engine's rule: one decides


def test_a_revoked_reviewers_vote_stops_counting_toward_the_quorum() -> None:
    """Votes cast before a revocation stop counting once their reviewer (or the key that
    signed them) is revoked for the run: the round needs as many approvals again."""
    stage = ReviewStage(reviewers=["alice", "bob", "carol"], approvals=3)
    votes = [
        Vote(reviewer="alice", decision="approve", at=AT),
        Vote(reviewer="bob", decision="approve", at=AT, key_id="inbox"),
        Vote(reviewer="carol", decision="reject", at=AT),
    ]
    run = RunState(
        state=State.AWAIT_REVIEW,
        review_round=1,
        plan=prompt_plan(review_stages=[stage, stage], rejections=2),
        votes=votes,
    )

    def tally(**revoked: list[str]) -> tuple[list[str], list[str]]:
        found = progress(GRAPH, run.model_copy(update=revoked))
        assert found is not None
        return found.approvals, found.rejections

    assert tally() == (["alice", "bob"], ["carol"])
    assert tally(revoked_reviewers=["alice", "carol"]) == (["bob"], [])
    assert tally(revoked_keys=["inbox"]) == (["alice"], ["carol"])


def settings(policies: dict[str, Any], groups: dict[str, Any] | None = None) -> Settings:
    return Settings(
        review_policies=json.dumps(policies),
        review_groups=json.dumps(groups if groups is not None else {"finance": ["a", "b"]}),
    )


@pytest.mark.parametrize(
    ("policies", "groups", "message"),
    [
        (
            {"documents": {"stages": [{"group": "legal"}]}},
            None,
            "REVIEW_POLICIES: documents: stage 1 names group 'legal', which REVIEW_GROUPS does "
            "not define",
        ),
        (
            {"documents": {"stages": [{"group": "finance", "approvals": 3}]}},
            None,
            "REVIEW_POLICIES: documents: stage 1 needs 3 approvals from group 'finance', which "
            "has 2 member(s)",
        ),
        (
            {"Documents!": {}},
            None,
            "REVIEW_POLICIES: 'Documents!' is not PIPELINE or PIPELINE@TENANT",
        ),
    ],
)
def test_a_policy_that_cannot_work_stops_the_settings(
    policies: dict[str, Any], groups: dict[str, Any] | None, message: str
) -> None:
    """A group no REVIEW_GROUPS entry has, a quorum larger than its group, or a key that is not
    PIPELINE[@TENANT]: one line naming the variable and the policy."""
    with pytest.raises(ConfigError) as info:
        settings(policies, groups)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "policy",
    [
        {"stages": [{"group": "finance", "quorum": 2}]},
        {"auto_approve": [{"name": "r", "when": [{"fact": "problems", "op": "<", "value": "0"}]}]},
        {"auto_approve": [{"name": "r", "when": [{"fact": "problems", "op": "in", "value": 0}]}]},
        {"auto_approve": [{"name": "r", "when": []}]},
        {"stages": [{}, {}, {}]},
        {"rejections": 0},
    ],
)
def test_a_malformed_policy_is_refused_when_the_settings_load(
    policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unknown keys, a comparison with a non-number, membership in a non-list, a rule with no
    test, more than two stages, no rejection at all: refused, naming REVIEW_POLICIES."""
    monkeypatch.setenv("REVIEW_POLICIES", json.dumps({"llm": policy}))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith("invalid configuration: REVIEW_POLICIES.LLM.")


@pytest.mark.parametrize("groups", [{"finance": []}, {"finance": ["  "]}, {"bad name!": ["a"]}])
def test_groups_hold_reviewer_names(
    groups: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group without members, with a blank member, or with a name that cannot be a group is
    refused, naming REVIEW_GROUPS."""
    monkeypatch.setenv("REVIEW_GROUPS", json.dumps(groups))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith("invalid configuration: REVIEW_GROUPS=")


def test_the_worker_refuses_a_policy_for_no_pipeline_or_a_fact_it_lacks() -> None:
    """At start the worker checks every policy against its pipelines: an unknown pipeline, or a
    rule reading a fact the pipeline's results lack, stops it with one line; fields.* facts of
    the document pipeline and engine facts pass."""
    with pytest.raises(ConfigError) as unknown:
        check_review_policies(settings({"invoices": {}}), SHIPPED)
    assert str(unknown.value).startswith("REVIEW_POLICIES: 'invoices' names no pipeline")
    rule = {"name": "r", "when": [{"fact": "problems", "op": "==", "value": 0}]}
    with pytest.raises(ConfigError) as lacking:
        check_review_policies(settings({"llm": {"auto_approve": [rule]}}), SHIPPED)
    assert "rule r reads 'problems', which the llm pipeline does not give" in str(lacking.value)
    fine = {
        "name": "r",
        "when": [
            {"fact": "problems", "op": "==", "value": 0},
            {"fact": "fields.total", "op": "<=", "value": 10},
            {"fact": "attempts", "op": "<=", "value": 1},
        ],
    }
    check_review_policies(settings({"documents@acme": {"auto_approve": [fine]}}), SHIPPED)
