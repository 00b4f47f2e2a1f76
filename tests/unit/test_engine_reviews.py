"""Reviewer authority: who may decide, when, only once per round, and (with keys) proven."""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from pydantic import ValidationError

from aiorch.ops.reviews import ReviewOutcome, decision_for_round, update_id
from aiorch.ops.signing import SigningKey
from tests.support.builders import AT, history_entry, prompt_plan
from workflows.documents.graph import GRAPH as DOCUMENTS
from workflows.engine.graph import Event
from workflows.engine.pipeline import Context
from workflows.engine.policies import signing_key
from workflows.engine.record import MAX_REFUSAL_CHARS
from workflows.engine.review_rules import Asked, Refusal, count_refusal, invalid, refusal
from workflows.engine.reviews import (
    MAX_REVOKED,
    decision_detail,
    escalation_detail,
    escalation_group,
    event_of,
    operator_reason,
    revoke,
    take_forced_reason,
)
from workflows.llm.graph import GRAPH, State
from workflows.payloads import (
    MAX_FEEDBACK_CHARS,
    OperatorRequest,
    PipelineRequest,
    PromptPlan,
    ReviewDecision,
    ReviewProgress,
    Revocation,
    RunOptions,
    RunState,
    RunStatus,
    Vote,
)

RUN = "0123456789abcdef01234567"
KEY = SigningKey.generate("inbox")


def plan(
    allowed: list[str] | None = None,
    max_feedback: int = 100,
    requested_by: str | None = None,
    keys: bool = False,
) -> PromptPlan:
    return prompt_plan(
        allowed_reviewers=allowed,
        max_feedback_chars=max_feedback,
        requested_by=requested_by,
        review_keys=[*_keys()] if keys else [],
    )


def _keys() -> list[object]:
    from workflows.engine.identity import parse_review_keys

    return list(parse_review_keys(KEY.public_entry()))


def decide(reviewer: str = "alice", **fields: object) -> ReviewDecision:
    return ReviewDecision.model_validate({"decision": "approve", "reviewer": reviewer, **fields})


def why(
    decision: ReviewDecision,
    *,
    state: State = State.AWAIT_REVIEW,
    review_round: int = 1,
    pending: ReviewDecision | None = None,
    run_plan: PromptPlan | None = None,
    now: datetime = AT,
) -> str | None:
    run = RunState(state=state, review_round=review_round, plan=run_plan or plan())
    found = refusal(GRAPH, run, decision, pending, Asked(RUN, now))
    return found.reason if found else None


def test_allowed_reviewer_in_a_review_state_is_accepted() -> None:
    """In await_review and escalate, an allowed reviewer's first decision is taken."""
    assert why(decide("alice"), run_plan=plan(["alice", "bob"])) is None
    assert why(decide("bob"), state=State.ESCALATE, run_plan=plan(["alice", "bob"])) is None
    assert why(decide("anyone")) is None  # no list: anyone may review


def test_reviewer_outside_the_set_is_refused_by_name_and_run() -> None:
    """The refusal names the reviewer and the run (and not who else is allowed)."""
    message = why(decide("mallory"), run_plan=plan(["alice"]))
    assert message == f"reviewer 'mallory' is not allowed to review run {RUN}"


def test_requester_may_not_review_their_own_run() -> None:
    """A run's requester (requested_by) is refused as its reviewer, even when allowed."""
    assert why(decide("alice"), run_plan=plan(["alice"], requested_by="alice")) == (
        "'alice' requested this run"
    )
    assert why(decide("bob"), run_plan=plan(requested_by="alice")) is None


def test_not_awaiting_review_keeps_the_contract_message() -> None:
    """Outside a review state the message is the contract's one, naming the state."""
    assert why(decide(), state=State.INVOKE_LLM) == "run is not awaiting review (state: invoke_llm)"


def test_second_decision_for_a_round_is_refused() -> None:
    """While a decision for the round is pending, another one (any reviewer) is refused."""
    message = why(decide("bob"), pending=decide("alice"))
    assert message is not None
    assert "already has a decision" in message and "applied once" in message


def test_decision_for_another_round_is_refused() -> None:
    """A decision naming a round that is over (or not begun) never lands on the current one."""
    assert why(decide(review_round=2), review_round=2) is None
    message = why(decide(review_round=1), review_round=2)
    assert message == f"review for round 1 refused: run {RUN} is at review round 2"


def test_feedback_over_the_runs_limit_is_refused() -> None:
    """Feedback longer than the run's MAX_FEEDBACK_CHARS is refused with both sizes."""
    message = why(decide(feedback="x" * 101))
    assert message == f"feedback is 101 characters; run {RUN} accepts at most 100"


def signed(decision: ReviewDecision, *, key: SigningKey = KEY, **claims: object) -> ReviewDecision:
    fields: dict[str, object] = {"workflow_id": RUN, "review_round": 1, "now": AT}
    fields.update(claims)
    return key.sign(decision, **fields)  # type: ignore[arg-type]


def test_with_keys_only_a_valid_signature_for_this_decision_is_accepted() -> None:
    """With reviewer keys in the plan, a decision needs a token signed by a configured key for
    exactly this run, round, decision, reviewer and feedback, not yet expired."""
    keyed = plan(keys=True)
    good = signed(decide(feedback="ok"))
    assert why(good, run_plan=keyed) is None
    cases = {
        "review is not signed": decide(),
        "signed with a key this run does not know": signed(
            decide(), key=SigningKey.generate("inbox2")
        ),
        "signature does not verify": signed(decide(), key=SigningKey.generate("inbox")),
        "issued for another run": signed(decide(), workflow_id="f" * 24),
        "is for round 2": signed(decide(), review_round=2).model_copy(
            update={"review_round": None}
        ),
        "has expired": signed(decide(), now=AT - timedelta(minutes=11)),
        "issued in the future": signed(decide(), now=AT + timedelta(minutes=5)),
        "issued for other feedback": good.model_copy(update={"feedback": "changed"}),
        "issued for another decision": good.model_copy(update={"decision": "reject"}),
        "issued to another reviewer": good.model_copy(update={"reviewer": "mallory"}),
        "token is malformed": decide(token="not.a.token"),
    }
    for words, decision in cases.items():
        message = why(decision, run_plan=keyed)
        assert message is not None and words in message, (words, message)


def test_a_personal_key_signs_only_for_its_reviewer() -> None:
    """A key configured without a reviewer list signs only for the reviewer named like it."""
    from workflows.engine.identity import parse_review_keys

    alice = SigningKey.generate("alice")
    keyed = plan().model_copy(
        update={"review_keys": parse_review_keys(alice.public_entry(["alice"]))}
    )
    assert why(signed(decide("alice"), key=alice), run_plan=keyed) is None
    message = why(signed(decide("bob"), key=alice), run_plan=keyed)
    assert message == "key 'alice' may not sign for this reviewer"


def test_refusals_are_counted_and_the_last_reason_is_bounded() -> None:
    """A refused signal adds nothing to the history: a count and the last reason, cut short."""
    run = RunState(state=State.AWAIT_REVIEW)
    for _ in range(1000):
        count_refusal(run, Refusal("invalid_payload", "x" * 5000))
    assert run.reviews_refused == 1000 and run.history == []
    assert run.last_refusal is not None and len(run.last_refusal) <= MAX_REFUSAL_CHARS


def test_contract_caps_feedback_and_reviewer_names() -> None:
    """The payload itself caps feedback, reviewer names and tokens, and refuses invalid
    Unicode, whatever the run allows."""
    with pytest.raises(ValidationError, match="feedback"):
        decide(feedback="x" * (MAX_FEEDBACK_CHARS + 1))
    with pytest.raises(ValidationError, match="feedback"):
        decide(feedback="\ud800")
    with pytest.raises(ValidationError, match="reviewer"):
        decide("r" * 201)
    with pytest.raises(ValidationError, match="token"):
        decide(token="t" * 10_000)
    with pytest.raises(ValidationError, match="allowed_reviewers"):
        RunOptions(allowed_reviewers=[])
    with pytest.raises(ValidationError, match="allowed_reviewers"):
        RunOptions(allowed_reviewers=[" "])


def test_update_id_is_per_run_round_and_reviewer() -> None:
    """Re-sending the same reviewer's review of the same round reuses the update id."""
    assert update_id(RUN, 2, "alice") == update_id(RUN, 2, "alice")
    assert (
        len({update_id(RUN, 2, "alice"), update_id(RUN, 3, "alice"), update_id(RUN, 2, "bob")}) == 3
    )


def test_outcome_says_when_the_round_was_decided_by_someone_else() -> None:
    """When the round's recorded decision differs from the one sent, the CLI says so."""
    recorded = history_entry(
        "await_review", "generate_embedding", "approve", reviewer="alice", review_round=1
    )
    status = RunStatus(state="generate_embedding", status="Processing", progress=85, attempts=1)
    assert decision_for_round([recorded], 1) == recorded
    assert decision_for_round([recorded], 2) is None
    mine = ReviewOutcome(decide("alice", review_round=1), status, recorded)
    theirs = ReviewOutcome(
        ReviewDecision(decision="reject", reviewer="bob", review_round=1), status, recorded
    )
    assert mine.applied_as_sent and "approve accepted (round 1)" in mine.describe(RUN)
    assert not theirs.applied_as_sent
    assert "round 1 was already decided (approve by alice)" in theirs.describe(RUN)


def refused(
    decision: ReviewDecision,
    run: RunState,
    *,
    pending: ReviewDecision | None = None,
    chain_id: str | None = None,
    digest: Callable[[], str] | None = None,
) -> Refusal | None:
    asked = Asked(RUN, AT, chain_id=chain_id, digest=digest)
    return refusal(GRAPH, run, decision, pending, asked)


def test_each_refusal_has_its_code_and_its_sentence() -> None:
    """Every rule refuses with a stable code (the refusal metric's label) and one sentence
    naming the run; a reviewer's name is cut to 80 characters in it."""
    waiting = RunState(state=State.AWAIT_REVIEW, review_round=1, plan=plan(["alice"]))
    long_name = "m" * 200
    cases = [
        (
            decide(),
            RunState(state=State.INVOKE_LLM, plan=plan()),
            Refusal("not_awaiting_review", "run is not awaiting review (state: invoke_llm)"),
        ),
        (
            decide(review_round=2),
            waiting,
            Refusal("wrong_round", f"review for round 2 refused: run {RUN} is at review round 1"),
        ),
        (
            decide("alice"),
            RunState(state=State.AWAIT_REVIEW, review_round=1),
            Refusal("not_awaiting_review", "run has no plan yet"),
        ),
        (
            decide("alice"),
            waiting.model_copy(update={"revoked_reviewers": ["alice"]}),
            Refusal("reviewer_revoked", f"reviewer 'alice' was revoked for run {RUN}"),
        ),
        (
            decide(long_name),
            waiting,
            Refusal(
                "reviewer_not_allowed",
                f"reviewer {'m' * 80!r} is not allowed to review run {RUN}",
            ),
        ),
        (
            decide("alice"),
            waiting.model_copy(update={"plan": plan(["alice"], requested_by="alice")}),
            Refusal("own_run", "'alice' requested this run"),
        ),
        (
            decide("alice", feedback="x" * 101),
            waiting,
            Refusal(
                "feedback_too_long", f"feedback is 101 characters; run {RUN} accepts at most 100"
            ),
        ),
        (
            decide("alice", fields={"total": 3}),
            waiting,
            Refusal("no_corrections", f"run {RUN} takes no corrected fields"),
        ),
        (
            decide("alice", decision="reedit", fields={"total": 3}),
            waiting,
            Refusal("no_corrections", "corrected fields come with an approval only"),
        ),
    ]
    for decision, run, expected in cases:
        assert refused(decision, run) == expected
    assert refused(decide("bob"), waiting, pending=decide("alice")) == Refusal(
        "already_decided",
        f"review round 1 of run {RUN} already has a decision; a decision is applied once",
    )
    assert refused(decide("alice", feedback="x" * 100), waiting) is None  # at the limit


def test_a_revoked_key_no_longer_signs_for_the_run() -> None:
    """A token signed by a key the run has revoked is refused as signed by an unknown key."""
    keyed = RunState(state=State.AWAIT_REVIEW, review_round=1, plan=plan(keys=True))
    assert refused(signed(decide()), keyed) is None
    revoked = keyed.model_copy(update={"revoked_keys": ["inbox"]})
    assert refused(signed(decide()), revoked) == Refusal(
        "unauthenticated", "review token is signed with a key this run does not know"
    )


def test_the_plan_says_whether_a_token_names_the_run_chain_and_how_long_it_lives() -> None:
    """With ``review_token_binds_run`` a token must name the run chain it decides; without, the
    chain is not asked. With ``review_token_ttl_s`` a longer-lived token is refused."""
    keyed = plan(keys=True)
    binding = RunState(
        state=State.AWAIT_REVIEW,
        review_round=1,
        plan=keyed.model_copy(update={"review_token_binds_run": True}),
    )
    other_chain = signed(decide(), run_id="chain-2")
    assert refused(other_chain, binding, chain_id="chain-1") == Refusal(
        "unauthenticated", "review token was issued for another run of this workflow id"
    )
    assert refused(signed(decide(), run_id="chain-1"), binding, chain_id="chain-1") is None
    loose = RunState(state=State.AWAIT_REVIEW, review_round=1, plan=keyed)
    assert refused(other_chain, loose, chain_id="chain-1") is None
    short_lived = RunState(
        state=State.AWAIT_REVIEW,
        review_round=1,
        plan=keyed.model_copy(update={"review_token_ttl_s": 60.0}),
    )
    assert refused(signed(decide()), short_lived) == Refusal(
        "unauthenticated",
        "review token lives 600 s; the run accepts at most 60 s (REVIEW_TOKEN_TTL_S)",
    )
    shown = RunState(state=State.AWAIT_REVIEW, review_round=1, plan=keyed)
    assert refused(signed(decide(), digest="c0ffee"), shown, digest=lambda: "decaf") == Refusal(
        "unauthenticated", "review token was issued for other content than the run shows"
    )


def test_an_accepted_decision_is_described_in_one_line() -> None:
    """An applied decision's detail names the decision and reviewer, then how many fields
    the correction changed from the result under review (naming them), then the feedback; its
    event is the decision's own, or ``correct`` for an approval with corrected fields."""
    assert decision_detail(decide("alice")) == "approve by alice"
    reedit = decide("bob", decision="reedit", feedback="shorter")
    assert decision_detail(reedit) == "reedit by bob: shorter"
    reviewed = {"total": 2, "vendor": "x", "tax": 1}
    corrected = decide("ann", fields={**reviewed, "total": 3}, feedback="fixed")
    assert decision_detail(corrected, before=reviewed) == (
        "approve by ann with 1 changed field (total): fixed"
    )
    resent = decide("ann", fields=reviewed)
    assert decision_detail(resent, before=reviewed) == "approve by ann with no field changed"
    many = {f"f{n}": n for n in range(8)}
    assert decision_detail(decide("ann", fields=many), before={}) == (
        "approve by ann with 8 changed fields (f0, f1, f2, f3, f4 and 3 more)"
    )
    assert (event_of(decide()), event_of(reedit), event_of(corrected)) == (
        Event.APPROVE,
        Event.REEDIT,
        Event.CORRECT,
    )
    assert event_of(decide(decision="reject")) == Event.REJECT
    assert invalid("no reviewer") == Refusal("invalid_payload", "invalid review: no reviewer")


def test_an_operator_action_on_a_review_records_who_and_why() -> None:
    """An operator's action on a waiting review records its name, the operator and the reason;
    outside a review state it records nothing."""
    waiting = RunState(state=State.AWAIT_REVIEW)
    request = OperatorRequest(operator="oncall", reason="stale")
    assert operator_reason(GRAPH, waiting, request, "expire_review") == (
        "expire_review by oncall: stale"
    )
    assert operator_reason(GRAPH, waiting, OperatorRequest(operator="oncall"), "x") == "x by oncall"
    assert operator_reason(GRAPH, RunState(state=State.INVOKE_LLM), request, "x") is None


def test_revocations_add_up_without_repeats_and_stay_bounded() -> None:
    """Revoked keys and reviewers accumulate in the order revoked, each once, keeping the
    newest 100 of each."""
    run = RunState(state=State.AWAIT_REVIEW)
    revoke(run, Revocation(operator="sec", key_ids=["k1", "k2"], reviewers=["mallory"]))
    revoke(run, Revocation(operator="sec", key_ids=["k2", "k3"], reviewers=["mallory", "eve"]))
    assert (run.revoked_keys, run.revoked_reviewers) == (["k1", "k2", "k3"], ["mallory", "eve"])
    for batch in range(3):  # 150 more keys, in revocations of 50
        ids = [f"x{n}" for n in range(batch * 50, batch * 50 + 50)]
        revoke(run, Revocation(operator="sec", key_ids=ids))
    assert len(run.revoked_keys) == MAX_REVOKED
    assert run.revoked_keys[-1] == "x149" and run.revoked_keys[0] == "x50"


def test_an_operators_forced_end_is_taken_once_and_a_dead_letter_request_stays() -> None:
    """A forced end of a review wait is consumed when taken; a dead-letter request ends every
    wait until the run is dead-lettered, so it stays."""
    run = RunState(state=State.AWAIT_REVIEW, forced_timeout="expire_review by oncall")
    assert take_forced_reason(run) == "expire_review by oncall"
    assert take_forced_reason(run) is None
    run.dead_letter_requested = "dead-lettered by oncall"
    assert take_forced_reason(run) == "dead-lettered by oncall"
    assert take_forced_reason(run) == "dead-lettered by oncall"


def test_corrected_fields_come_with_an_approval_where_the_pipeline_takes_them() -> None:
    """In a pipeline whose review can correct fields (documents), an approval with corrected
    fields is taken and any other decision with fields refused; the LLM pipeline, which takes
    none, refuses them even with an approval."""
    run = RunState(state="await_review", review_round=1, plan=plan())
    approve = decide("alice", fields={"total": 3})
    assert refusal(DOCUMENTS, run, approve, None, Asked(RUN, AT)) is None
    reedit = decide("alice", decision="reedit", fields={"total": 3})
    assert refusal(DOCUMENTS, run, reedit, None, Asked(RUN, AT)) == Refusal(
        "no_corrections", "corrected fields come with an approval only"
    )
    assert refusal(GRAPH, run, approve, None, Asked(RUN, AT)) == Refusal(
        "no_corrections", f"run {RUN} takes no corrected fields"
    )


def test_a_long_reviewer_name_is_cut_in_every_refusal() -> None:
    """A reviewer's name (up to 200 characters) appears in a refusal cut to its first 80."""
    name = "r" * 200
    waiting = RunState(state=State.AWAIT_REVIEW, review_round=1, plan=plan(requested_by=name))
    assert refused(decide(name), waiting) == Refusal("own_run", f"{'r' * 80!r} requested this run")
    revoked = waiting.model_copy(update={"revoked_reviewers": [name]})
    assert refused(decide(name), revoked) == Refusal(
        "reviewer_revoked", f"reviewer {'r' * 80!r} was revoked for run {RUN}"
    )


LONG = "w" * 200


def policy_plan(escalation: dict[str, object] | None = None) -> PromptPlan:
    """A plan under review policy ``two-man``: two approvals from group writers (ann, bob and
    a reviewer with a 200-character name) decide the review, then ``escalation`` (by default
    one approval from group leads: lea) after 1200 s."""
    return prompt_plan(
        review_policy="two-man",
        escalation_timeout_s=1200,
        review_stages=[
            {"group": "writers", "reviewers": ["ann", "bob", LONG], "approvals": 2},
            escalation or {"group": "leads", "reviewers": ["lea"], "approvals": 1},
        ],
    )


def test_under_a_policy_the_stages_group_decides_and_each_member_once_a_round() -> None:
    """Under a review policy only the current stage's group may decide (the review's, then
    after escalation the escalation's), and a member who voted this round is refused naming
    the vote; each refusal has its code and names the reviewer cut to 80 characters."""
    waiting = RunState(state=State.AWAIT_REVIEW, review_round=1, plan=policy_plan())
    escalated = waiting.model_copy(update={"state": State.ESCALATE})
    assert refused(decide("ann"), waiting) is None
    assert refused(decide("lea"), escalated) is None
    assert refused(decide("lea"), waiting) == Refusal(
        "not_in_group", f"reviewer 'lea' is not in group writers, which decides run {RUN} now"
    )
    assert refused(decide("ann"), escalated) == Refusal(
        "not_in_group", f"reviewer 'ann' is not in group leads, which decides run {RUN} now"
    )
    assert refused(decide(LONG), escalated) == Refusal(
        "not_in_group",
        f"reviewer {'w' * 80!r} is not in group leads, which decides run {RUN} now",
    )

    votes = [Vote(reviewer=name, decision="approve", at=AT) for name in ("ann", LONG)]
    voted = waiting.model_copy(update={"votes": votes})
    assert refused(decide("bob"), voted) is None
    assert refused(decide("ann", decision="reject"), voted) == Refusal(
        "already_voted",
        f"'ann' already voted approve in round 1 of run {RUN}; a reviewer counts once a round",
    )
    assert refused(decide(LONG), voted) == Refusal(
        "already_voted",
        f"{'w' * 80!r} already voted approve in round 1 of run {RUN}; a reviewer counts once "
        "a round",
    )


def test_a_decision_that_ends_a_policy_round_names_the_tally_it_completes() -> None:
    """Under a policy an approval or a rejection that decides the round says so with the
    tally it completes (its reviewer last); a reedit, a correction or a decision without a
    policy names no tally."""
    tally = ReviewProgress(
        policy="two-man",
        approvals=["ann"],
        approvals_needed=2,
        rejections=["cy", "dan"],
        rejections_needed=3,
    )
    assert decision_detail(decide("bob"), tally) == "approve by bob (2 of 2 approvals: ann, bob)"
    assert decision_detail(decide("bob", decision="reject", feedback="no"), tally) == (
        "reject by bob (3 of 3 rejections: cy, dan, bob): no"
    )
    assert decision_detail(decide("bob", decision="reedit"), tally) == "reedit by bob"
    assert decision_detail(decide("bob", fields={"total": 3}), tally, before={"total": 2}) == (
        "approve by bob with 1 changed field (total)"
    )
    untallied = tally.model_copy(update={"policy": None})
    assert decision_detail(decide("bob"), untallied) == "approve by bob"


def test_an_escalation_says_whom_it_hands_the_round_to() -> None:
    """Under a policy the escalation names its group (or any allowed reviewer), the approvals
    it needs and its deadline, and hands the round to that group; without a policy there is
    nothing to say and no group."""
    assert escalation_detail(policy_plan()) == (
        "escalated to group leads, 1 approval, until the deadline in 1200s"
    )
    assert escalation_group(policy_plan()) == "leads"
    anyone = policy_plan({"approvals": 2})
    assert escalation_detail(anyone) == (
        "escalated to any allowed reviewer, 2 approvals, until the deadline in 1200s"
    )
    assert escalation_group(anyone) is None
    assert escalation_detail(plan()) is None
    assert escalation_group(plan()) is None


def test_a_vote_remembers_the_key_that_signed_it() -> None:
    """The key a vote was signed with is its token's ``kid``; an unsigned decision, a token
    that is not a JWT, and one whose ``kid`` is not a string name none."""
    assert signing_key(signed(decide())) == KEY.key_id
    assert signing_key(decide()) is None
    assert signing_key(decide(token="not a token")) is None
    header = base64.urlsafe_b64encode(b'{"alg":"EdDSA","kid":7}').rstrip(b"=").decode()
    assert signing_key(decide(token=f"{header}.e30.c2ln")) is None


def test_auto_approve_rules_read_the_engines_facts_beside_the_pipelines() -> None:
    """What an auto-approve rule reads: the pipeline's facts about its result, and the engine's
    own: the review round, the model attempts so far and the model."""
    run = RunState(state=State.AWAIT_REVIEW, review_round=2, attempts=3, model="sim-large")
    request = PipelineRequest(request_id=RUN, user_message="hi")
    ctx: Context[PipelineRequest, RunState] = Context(GRAPH, request, run)
    assert ctx.review_facts({"confidence": 0.9}) == {
        "confidence": 0.9,
        "review_round": 2,
        "attempts": 3,
        "model": "sim-large",
    }
