"""Review policies as pure data and functions: the auto-approve rules' tests over a result's
facts, the quorum arithmetic, and the operator's REVIEW_POLICIES and REVIEW_GROUPS checked when
the settings load and when the worker starts."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from pydantic import ValidationError

from aiorch.worker.options import check_review_policies
from aiorch_runtime.config import ConfigError, Settings, load_settings
from aiorch_runtime.review_policies import (
    ConditionSpec,
    PolicySpec,
    PolicyUnmet,
    ResolvedReview,
    check_groups,
    check_policies,
    pipeline_of,
    policy_for,
    resolve,
)
from tests.support.builders import AT, prompt_plan
from workflows.engine.policies import (
    decides,
    eligible,
    holds,
    matching_rule,
    progress,
    same_voter,
    stage,
    stage_index,
    voter,
)
from workflows.llm.graph import GRAPH, State
from workflows.orchestrator import SHIPPED
from workflows.payloads import (
    MAX_REVIEWER_CHARS,
    POLICY_NAME_PATTERN,
    AutoApproveRule,
    Condition,
    FactValue,
    PromptPlan,
    ReviewDecision,
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


def _token(key_id: str) -> str:
    """A JWT-shaped token whose header names ``key_id`` (``signing_key`` reads only that)."""
    header = json.dumps({"alg": "EdDSA", "kid": key_id}).encode()
    return base64.urlsafe_b64encode(header).rstrip(b"=").decode() + ".e30.c2ln"


TWO_STAGES = [
    ReviewStage(group="writers", reviewers=["ann", "bob", "cy"], approvals=2),
    ReviewStage(group="leads", reviewers=["lea", "ann"], approvals=1),
]


def test_the_stage_of_a_state_is_its_review_role_and_the_last_stage_serves_beyond() -> None:
    """A run waiting for review is at stage 0, one escalated at stage 1, any other state at 0;
    an index past a plan's last stage is its last stage, and a plan without stages answers
    the engine's rule (anyone the plan allows, one approval) at every index."""
    assert [stage_index(GRAPH, s) for s in (State.AWAIT_REVIEW, State.ESCALATE)] == [0, 1]
    assert stage_index(GRAPH, State.INVOKE_LLM) == 0
    two = prompt_plan(review_stages=TWO_STAGES)
    assert [stage(two, n) for n in (0, 1, 2)] == [TWO_STAGES[0], TWO_STAGES[1], TWO_STAGES[1]]
    one = prompt_plan(review_stages=TWO_STAGES[:1])
    assert stage(one, 1) == TWO_STAGES[0]
    anyone = prompt_plan(allowed_reviewers=["ann", "bob"])
    assert stage(anyone, 1) == ReviewStage(reviewers=["ann", "bob"], approvals=1)


def test_a_reviewer_decides_only_within_both_the_plan_and_the_stage() -> None:
    """A reviewer may decide only when the plan allows them (or allows anyone) and the stage
    names them (or names no one)."""
    ann_only = ReviewStage(reviewers=["ann"])
    open_plan, narrow_plan = prompt_plan(), prompt_plan(allowed_reviewers=["bob"])
    assert eligible(open_plan, ReviewStage(), "zed")
    assert eligible(open_plan, ann_only, "ann") and not eligible(open_plan, ann_only, "bob")
    assert eligible(narrow_plan, ReviewStage(), "bob")
    assert not eligible(narrow_plan, ReviewStage(), "ann")
    assert not eligible(narrow_plan, ann_only, "ann")


def test_progress_shows_the_current_stage_and_counts_only_its_reviewers_votes() -> None:
    """While a run waits, its progress names the policy, the stage, the group, who may decide
    and each tally with what it needs; a vote counts where its reviewer may decide (after an
    escalation, ann's approval still counts; bob's does not), and a vote from no key stays
    counted when keys are revoked. Outside a review state, or without a plan, there is none."""
    votes = [
        Vote(reviewer="ann", decision="approve", at=AT),
        Vote(reviewer="bob", decision="approve", at=AT, key_id="k1"),
        Vote(reviewer="cy", decision="reject", at=AT),
    ]
    plan = prompt_plan(review_policy="two-man", review_stages=TWO_STAGES, rejections=2)
    run = RunState(state=State.AWAIT_REVIEW, plan=plan, votes=votes, revoked_keys=["k9"])
    assert progress(GRAPH, run) == ReviewProgress(
        policy="two-man",
        stage=0,
        stages=2,
        group="writers",
        reviewers=["ann", "bob", "cy"],
        approvals=["ann", "bob"],
        approvals_needed=2,
        rejections=["cy"],
        rejections_needed=2,
    )
    escalated = run.model_copy(update={"state": State.ESCALATE})
    assert progress(GRAPH, escalated) == ReviewProgress(
        policy="two-man",
        stage=1,
        stages=2,
        group="leads",
        reviewers=["lea", "ann"],
        approvals=["ann"],
        approvals_needed=1,
        rejections=[],
        rejections_needed=2,
    )
    one_stage = run.model_copy(update={"plan": plan.model_copy(update={"review_stages": []})})
    found = progress(GRAPH, one_stage)
    assert found is not None and (found.stages, found.reviewers) == (2, None)
    assert progress(GRAPH, run.model_copy(update={"state": State.INVOKE_LLM})) is None
    assert progress(GRAPH, run.model_copy(update={"plan": None})) is None


def test_a_reviewers_name_never_passes_for_a_key() -> None:
    """A reviewer who calls themself ``key:team`` is not the key ``team``: a key's vote and a
    name's vote are told apart whatever the name."""
    plan = prompt_plan(review_keys=[ReviewKey(key_id="team", public_key="k", reviewers=["bob"])])
    assert voter(plan, "key:team", None) != voter(plan, "bob", "team")
    assert voter(plan, "bob", "other") == voter(plan, "bob", None)


def test_a_key_already_counted_this_round_is_found_only_where_keys_count() -> None:
    """Where a plan counts keys, an approval or a rejection signed by a key that signs for
    named reviewers finds that key's earlier vote, under whichever name; a reedit, another
    key, and a plan that counts names find none."""
    keys = [ReviewKey(key_id="team", public_key="k", reviewers=["bob", "carol"])]
    plan = prompt_plan(review_keys=keys, quorum_counts_keys=True)
    earlier = Vote(reviewer="bob", decision="approve", at=AT, key_id="team")
    run = RunState(state=State.AWAIT_REVIEW, plan=plan, votes=[earlier])

    def found(plan: PromptPlan, decision: str, key_id: str) -> Vote | None:
        asked = ReviewDecision(decision=decision, reviewer="carol", token=_token(key_id))
        return same_voter(plan, run, asked)

    assert found(plan, "approve", "team") == earlier
    assert found(plan, "reject", "team") == earlier
    assert found(plan, "reedit", "team") is None
    assert found(plan, "approve", "other") is None
    assert found(plan.model_copy(update={"quorum_counts_keys": False}), "approve", "team") is None


def test_a_quorum_is_reached_at_exactly_its_count_for_either_decision() -> None:
    """An approval or a rejection decides when, with it, exactly as many distinct reviewers
    agree as needed; a repeat of a counted reviewer adds nobody; a correction decides."""
    tally = ReviewProgress(
        approvals=["ann"], approvals_needed=2, rejections=["cy"], rejections_needed=2
    )
    assert decides(tally, "reject", "dan")
    assert not decides(tally, "reject", "cy")
    assert not decides(tally, "approve", "ann")
    assert decides(tally, "correct", "dan")


def test_tests_that_need_a_list_or_a_number_never_pass_without_one() -> None:
    """``in``, ``not_in`` and ``!=`` against a value of the wrong kind never pass; a text that
    is not a plain decimal (``1e3``, digits past a float's range) never compares, while a
    negative decimal does; a text never equals a number it is not written as."""
    assert not passes("fields.currency", "in", "EUR")
    assert not passes("fields.currency", "not_in", "GBP")
    assert not passes("fields.currency", "!=", ["GBP"])
    assert passes("fields.currency", "!=", "GBP")
    for text in ("1e3", "9" * 400):
        assert not holds(Condition(fact="x", op=">", value=0), {"x": text}), text
    assert holds(Condition(fact="x", op="<", value=0), {"x": "-2.5"})
    assert not passes("fields.currency", "==", 0)
    assert not passes("problems", "==", "0")
    assert not holds(Condition(fact="x", op="<", value=None), {"x": 1})


def test_a_policy_key_names_its_pipeline_and_an_unreadable_key_names_itself() -> None:
    """``documents@acme`` and ``documents`` name the documents pipeline; a key that is no
    policy key is given back whole, so the worker's check names it as it was written."""
    assert pipeline_of("documents@acme") == "documents"
    assert pipeline_of("documents") == "documents"
    assert pipeline_of("Bad Key!") == "Bad Key!"


def test_a_tenants_own_policy_wins_over_its_pipelines() -> None:
    """``policy_for`` finds the tenant's policy first, then the pipeline's, else none."""
    own, shared = PolicySpec(name="own"), PolicySpec(name="shared")
    policies = {"documents@acme": own, "documents": shared}
    assert policy_for(policies, "documents", "acme") == ("documents@acme", own)
    assert policy_for(policies, "documents", "zeta") == ("documents", shared)
    assert policy_for(policies, "llm", "acme") is None


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ({"fact": "total", "op": "in", "value": 3}, "total in: the value must be a list"),
        ({"fact": "total", "op": "not_in", "value": "x"}, "total not_in: the value must be a list"),
        ({"fact": "total", "op": "==", "value": [1]}, "total ==: the value must be one value"),
        ({"fact": "total", "op": "<", "value": True}, "total <: the value must be a number"),
        ({"fact": "total", "op": ">=", "value": "9"}, "total >=: the value must be a number"),
    ],
)
def test_a_test_whose_value_does_not_fit_its_operator_is_refused_naming_both(
    condition: dict[str, Any], message: str
) -> None:
    """A membership test needs a list, every other test one value, a comparison a number (a
    bool is none): the refusal names the fact and the operator."""
    with pytest.raises(ValidationError, match=message):
        ConditionSpec.model_validate(condition)


def test_tests_whose_value_fits_their_operator_are_taken() -> None:
    """Membership tests take lists, comparisons take numbers (integers and decimals), and
    equality takes a text or a bool: the operator's rules as written."""
    fitting = [
        ("in", ["EUR"]),
        ("not_in", []),
        ("<", 1),
        ("<=", 0.5),
        (">", -1),
        (">=", 2),
        ("==", "EUR"),
        ("!=", True),
    ]
    for op, value in fitting:
        assert ConditionSpec(fact="total", op=op, value=value).value == value


def test_rule_names_that_repeat_are_refused_naming_each_once() -> None:
    """Two rules of one policy may not share a name (the history names the rule that
    approved): each repeated name is named once, sorted; distinct names are taken."""
    when = [{"fact": "problems", "op": "==", "value": 0}]
    rules = [{"name": n, "when": when} for n in ("b", "a", "b", "a", "c")]
    with pytest.raises(ValidationError, match="rule names repeat: a, b"):
        PolicySpec.model_validate({"auto_approve": rules})
    spec = PolicySpec.model_validate({"auto_approve": rules[:2] + rules[-1:]})
    assert [rule.name for rule in spec.auto_approve] == ["b", "a", "c"]


def exactly(message: str) -> pytest.RaisesExc[ValueError]:
    """Expects a ValueError whose message is ``message``, whole."""
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


def test_group_members_are_reviewer_names_up_to_their_length_limit() -> None:
    """A member name of ``MAX_REVIEWER_CHARS`` is a reviewer; one character more, or a blank
    one, is refused naming the group; a group name that cannot be one is named, cut to 70
    characters, with the pattern."""
    check_groups({"finance": ["a" * MAX_REVIEWER_CHARS, "b"]})
    for member in ("a" * (MAX_REVIEWER_CHARS + 1), " "):
        with exactly("group 'finance' holds a member name that cannot be a reviewer"):
            check_groups({"finance": ["a", member]})
    with exactly("group 'legal' has no members"):
        check_groups({"finance": ["a"], "legal": []})
    with exactly(f"{'!' + 'g' * 69!r} is not a group name ({POLICY_NAME_PATTERN})"):
        check_groups({"!" + "g" * 99: ["a"]})


def test_every_stage_of_every_policy_is_checked_against_its_group() -> None:
    """A stage without a group does not end the check of the next; a quorum counts a group's
    distinct members and may equal their number; a tenant that cannot be one, or a long bad
    key, is named (cut to 70 characters)."""
    groups = {"finance": ["a", "b", "a"], "leads": ["l"]}

    def check(key: str, stages: list[dict[str, Any]]) -> None:
        check_policies({key: PolicySpec.model_validate({"stages": stages})}, groups)

    check("documents@acme", [{"group": "finance", "approvals": 2}, {"group": "leads"}])
    with exactly("documents: stage 2 names group 'legal', which REVIEW_GROUPS does not define"):
        check("documents", [{}, {"group": "legal"}])
    short = "documents: stage 2 needs 3 approvals from group 'finance', which has 2 member(s)"
    with exactly(short):
        check("documents", [{"group": "leads"}, {"group": "finance", "approvals": 3}])
    for key in ("documents@bad tenant", "documents@"):
        with pytest.raises(ValueError, match="is not PIPELINE or PIPELINE@TENANT"):
            check(key, [{}])
    with exactly(f"{'X' * 70!r} is not PIPELINE or PIPELINE@TENANT"):
        check("X" * 100, [{}])


GROUPS = {"finance": ["ann", "bob", "ann", "cy"], "leads": ["lea"]}


def resolved(policy: dict[str, Any] | None, **asked: Any) -> ResolvedReview:
    """``resolve`` for the documents pipeline's policy ``policy`` (None: no policy), with the
    operator's deadlines 100 s and 200 s."""
    found = None if policy is None else ("documents", PolicySpec.model_validate(policy))
    fields: dict[str, Any] = {"allowed": None, "requested_by": None, **asked}
    return resolve(found, GROUPS, review_timeout_s=100, escalation_timeout_s=200, **fields)


def test_without_a_policy_a_run_keeps_the_operators_deadlines_or_lower_ones() -> None:
    """Without a policy the plan holds no policy fields, and the deadlines are the operator's,
    lowered (never raised) by the request's."""
    plain = resolved(None)
    assert (plain.review_timeout_s, plain.escalation_timeout_s) == (100, 200)
    assert plain.plan_fields() == {
        "review_policy": None,
        "review_stages": [],
        "rejections": 1,
        "auto_approve": [],
    }
    lowered = resolved(None, asked_review_timeout_s=50, asked_escalation_timeout_s=500)
    assert (lowered.review_timeout_s, lowered.escalation_timeout_s) == (50, 200)
    shorter = resolved(None, asked_review_timeout_s=500, asked_escalation_timeout_s=150)
    assert (shorter.review_timeout_s, shorter.escalation_timeout_s) == (100, 150)


def test_a_policy_resolves_into_the_plans_stages_deadlines_and_rules() -> None:
    """A policy's stages become the plan's: each group's distinct members in order, its
    quorum; a one-stage policy escalates to the same group; the stage deadlines replace the
    operator's and a request only lowers them; its name (or, unnamed, its key), rejections
    and rules travel in the plan fields."""
    rule = {"name": "clean", "when": [{"fact": "problems", "op": "==", "value": 0}]}
    two = resolved(
        {
            "name": "two-of-finance",
            "stages": [{"group": "finance", "approvals": 2, "timeout_s": 30}, {"group": "leads"}],
            "rejections": 2,
            "auto_approve": [rule],
        },
        asked_escalation_timeout_s=150,
    )
    assert two.plan_fields() == {
        "review_policy": "two-of-finance",
        "review_stages": [
            ReviewStage(group="finance", reviewers=["ann", "bob", "cy"], approvals=2),
            ReviewStage(group="leads", reviewers=["lea"], approvals=1),
        ],
        "rejections": 2,
        "auto_approve": [AutoApproveRule.model_validate(rule)],
    }
    assert (two.review_timeout_s, two.escalation_timeout_s) == (30, 150)
    one = resolved({"stages": [{"group": "leads", "timeout_s": 300}, {"timeout_s": 40}][:1]})
    assert one.name == "documents"
    assert [(s.group, s.reviewers) for s in one.stages] == [("leads", ["lea"])] * 2
    assert (one.review_timeout_s, one.escalation_timeout_s) == (300, 200)
    later = resolved({"stages": [{}, {"timeout_s": 40}]}, asked_review_timeout_s=60)
    assert (later.review_timeout_s, later.escalation_timeout_s) == (60, 40)
    assert later.stages == [ReviewStage(), ReviewStage()]


def test_a_request_narrows_each_stage_and_may_leave_it_exactly_its_quorum() -> None:
    """The run's allowed reviewers narrow each group (and fill a stage without one); a stage
    left exactly as many reviewers as its quorum, the requester not counted, still works."""
    policy = {"stages": [{"group": "finance", "approvals": 2}, {"approvals": 2}]}
    narrowed = resolved(policy, allowed=["bob", "cy", "zed"], requested_by="zed")
    assert [s.reviewers for s in narrowed.stages] == [["bob", "cy"], ["bob", "cy", "zed"]]


@pytest.mark.parametrize(
    ("policy", "asked", "message"),
    [
        (
            {"name": "pair", "stages": [{"group": "finance", "approvals": 2}]},
            {"allowed": ["ann", "bob"], "requested_by": "bob"},
            "review policy pair, stage 1: group finance leaves 1 reviewer(s)",
        ),
        (
            {"stages": [{"group": "leads"}, {"approvals": 3}]},
            {"allowed": ["lea", "ann", "bob"], "requested_by": "ann"},
            "review policy documents, stage 2: the allowed reviewers leaves 2 reviewer(s)",
        ),
        (
            {"stages": [{"group": "leads"}]},
            {"allowed": ["lea"], "requested_by": "lea"},
            "review policy documents, stage 1: group leads leaves 0 reviewer(s)",
        ),
    ],
)
def test_a_request_that_leaves_a_stage_short_of_its_quorum_is_refused(
    policy: dict[str, Any], asked: dict[str, Any], message: str
) -> None:
    """A stage left fewer reviewers than its quorum, the requester not counted, refuses the
    run, naming the policy (or its key), the stage, the group and what it leaves."""
    with pytest.raises(PolicyUnmet) as info:
        resolved(policy, **asked)
    assert str(info.value).startswith(message)


def test_membership_and_equality_read_each_value_as_its_type() -> None:
    """``in`` needs a list (a text is not one, even one containing the fact); ``not_in`` passes
    a fact absent from the list and fails one in it, ``None`` among the items included; a
    number equals only the same number, and a bool only the same bool (``1`` is not ``True``)."""
    assert not holds(Condition(fact="x", op="in", value="EUR"), {"x": "E"})
    assert holds(Condition(fact="x", op="not_in", value=[None]), {"x": "GBP"})
    assert not holds(Condition(fact="x", op="not_in", value=[None]), {"x": None})
    assert not passes("fields.currency", "not_in", ["EUR"])
    assert not passes("problems", "==", 1)
    assert not holds(Condition(fact="x", op="==", value=True), {"x": 1})


def test_a_plan_of_one_stage_shows_one_stage() -> None:
    """A plan whose chain has one stage shows one stage in its progress; the same stage
    decides after an escalation."""
    plan = prompt_plan(review_stages=TWO_STAGES[:1])
    run = RunState(state=State.ESCALATE, plan=plan)
    found = progress(GRAPH, run)
    assert found is not None and (found.stages, found.stage, found.group) == (1, 1, "writers")


def test_an_unsigned_voter_is_found_by_name_where_keys_count() -> None:
    """Where a plan counts keys, a decision signed by no key (or by a key that signs for
    anyone) is cast by its reviewer: it finds that reviewer's earlier vote, and no other."""
    plan = prompt_plan(
        review_keys=[ReviewKey(key_id="inbox", public_key="k", reviewers=None)],
        quorum_counts_keys=True,
    )
    earlier = Vote(reviewer="carol", decision="approve", at=AT)
    run = RunState(state=State.AWAIT_REVIEW, plan=plan, votes=[earlier])
    assert same_voter(plan, run, ReviewDecision(decision="approve", reviewer="carol")) == earlier
    by_inbox = ReviewDecision(decision="reject", reviewer="carol", token=_token("inbox"))
    assert same_voter(plan, run, by_inbox) == earlier
    assert same_voter(plan, run, ReviewDecision(decision="approve", reviewer="dan")) is None
