"""Who may decide, in process: the permission, policies, self-approval, quorums and the attestation."""

import pytest
from django.contrib.auth.models import Group

from interrupts import decisions, policies, runs, selectors
from interrupts.models import Decision, Interrupt, Run
from interrupts.protocol import signing
from interrupts.protocol.errors import ContractViolation, ProtocolError
from interrupts.refusals import Refusal

from . import factories as make

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {
    "approved": {"type": "boolean"},
    "editedArgs": {"type": "object"},
}, "required": ["approved"]}
APPROVE = {"approved": True}


def raised(agent=None, requester=None, *, reason="confirmation", tool_name="", interrupt_id="int-1", run=None):
    run = run or make.run(make.thread(**({"agent": agent} if agent else {})), status="interrupted",
                          requested_by=requester)
    raw = {"id": interrupt_id, "reason": reason, "responseSchema": SCHEMA}
    fields = {"tool_call_id": "call-1", "tool_name": tool_name, "proposed_args": {"to": "a@b.c"}} if tool_name else {}
    return make.interrupt(run, interrupt_id=interrupt_id, reason=reason, raw=raw, response_schema=SCHEMA, **fields)


def refused_code(call) -> str:
    with pytest.raises(ProtocolError) as caught:
        call()
    return caught.value.code


def status(interrupt) -> str:
    return Interrupt.objects.get(pk=interrupt.pk).status


def resume_of(interrupt) -> Run | None:
    return Run.objects.filter(parent=interrupt.run, resume_key__isnull=False).first()


# --- who may decide ---------------------------------------------------------------


def test_deciding_takes_the_permission():
    interrupt, reader = raised(), make.user(reviewer=False)
    problem = pytest.raises(Refusal, decisions.decide, interrupt, reader, "resolved", APPROVE).value
    assert (problem.code, problem.status) == ("NOT_ELIGIBLE", 403)
    assert "Reviewers" in problem.message
    assert status(interrupt) == "pending" and not Decision.objects.exists()


def test_a_superuser_holds_the_permission_without_the_group():
    admin = make.user(reviewer=False, is_superuser=True)
    decisions.decide(raised(), admin, "resolved", APPROVE)
    assert Decision.objects.get().user == admin


def test_a_policy_admits_only_its_groups_and_users():
    agent = make.agent()
    finance = Group.objects.create(name="Finance")
    member, named, outsider = make.user(), make.user(), make.user()
    member.groups.add(finance)
    make.policy(agent=agent, groups=[finance], users=[named], name="finance only")
    first, second, third = (raised(agent, interrupt_id=f"int-{n}") for n in range(3))
    problem = pytest.raises(Refusal, decisions.decide, first, outsider, "resolved", APPROVE).value
    assert problem.code == "NOT_ELIGIBLE" and "finance only" in problem.message and "Finance" in problem.message
    decisions.decide(second, member, "resolved", APPROVE)
    decisions.decide(third, named, "resolved", APPROVE)
    assert status(first) == "pending" and status(second) == status(third) == "resolved"


def test_the_requester_may_not_approve_their_own_run_unless_the_policy_allows_it():
    agent, requester = make.agent(), make.user()
    interrupt = raised(agent, requester)
    problem = pytest.raises(Refusal, decisions.decide, interrupt, requester, "resolved", APPROVE).value
    assert (problem.code, problem.status) == ("SELF_APPROVAL", 403)
    # Cancelling is deciding too.
    assert refused_code(lambda: decisions.decide(interrupt, requester, "cancelled")) == "SELF_APPROVAL"
    make.policy(agent=agent, allow_self_approval=True)
    decisions.decide(interrupt, requester, "resolved", APPROVE)
    assert status(interrupt) == "resolved"


def test_not_eligible_is_reported_before_self_approval():
    agent, requester, finance = make.agent(), make.user(), Group.objects.create(name="Finance")
    make.policy(agent=agent, groups=[finance])
    assert refused_code(lambda: decisions.decide(raised(agent, requester), requester, "resolved", APPROVE)) \
        == "NOT_ELIGIBLE"


def test_the_most_specific_policy_wins():
    agent, other = make.agent(), make.agent()
    ops, finance, legal = (Group.objects.create(name=n) for n in ("Ops", "Finance", "Legal"))
    make.policy(name="everyone's", groups=[ops])
    make.policy(name="agent's", agent=agent, groups=[finance])
    make.policy(name="agent's mail", agent=agent, tool_name="send_email", groups=[legal])
    make.policy(name="any agent's payments", reason="payment", tool_name="send_email", required_approvals=2)
    rule = lambda i: policies.rule_for(i).name  # noqa: E731
    assert rule(raised(other)) == "everyone's"
    assert rule(raised(agent, interrupt_id="a")) == "agent's"
    assert rule(raised(agent, tool_name="send_email", interrupt_id="b")) == "agent's mail"
    # Two narrowing fields beat one, whichever they are.
    assert rule(raised(other, reason="payment", tool_name="send_email", interrupt_id="c")) == "any agent's payments"
    # A tie on how many: the one naming the agent wins.
    assert rule(raised(agent, reason="payment", tool_name="send_email", interrupt_id="d")) == "agent's mail"


def test_without_policies_the_site_default_admits_every_reviewer_but_the_requester():
    assert policies.rule_for(raised()) == policies.SITE_DEFAULT
    requester = make.user()
    assert refused_code(lambda: decisions.decide(raised(requester=requester, interrupt_id="x"), requester,
                                                 "resolved", APPROVE)) == "SELF_APPROVAL"


# --- quorums ----------------------------------------------------------------------


def test_a_quorum_of_two_stays_pending_until_the_second_approval():
    agent = make.agent()
    make.policy(agent=agent, required_approvals=2, name="two keys")
    alice, bob = make.user(), make.user()
    interrupt = raised(agent)
    decisions.decide(interrupt, alice, "resolved", APPROVE, comment="looks right")
    assert status(interrupt) == "pending" and resume_of(interrupt) is None
    # Approving twice is still one person.
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    assert status(interrupt) == "pending"
    assert [d.user for d in decisions.approvals(interrupt)] == [alice]
    decisions.decide(interrupt, bob, "resolved", APPROVE)
    assert status(interrupt) == "resolved"
    [entry] = resume_of(interrupt).input["resume"]
    attested = entry["metadata"]["countersign"]
    assert [(d["username"], d["action"]) for d in attested["decisions"]] == [(alice.username, "approve"),
                                                                           (bob.username, "approve")]
    assert attested["policy"] == {"name": "two keys", "requiredApprovals": 2}
    assert attested["fingerprint"] == signing.fingerprint(
        thread_id=interrupt.run.thread.thread_id, run_id=interrupt.run.run_id, interrupt_id="int-1",
        tool_call_id=None, status="resolved", payload=APPROVE)


def test_one_rejection_ends_a_quorum_at_once():
    agent = make.agent()
    make.policy(agent=agent, required_approvals=3)
    interrupt = raised(agent)
    decisions.decide(interrupt, make.user(), "resolved", APPROVE)
    decisions.decide(interrupt, make.user(), "resolved", {"approved": False})
    assert status(interrupt) == "resolved"
    [entry] = resume_of(interrupt).input["resume"]
    assert entry["payload"] == {"approved": False}
    assert [d["action"] for d in entry["metadata"]["countersign"]["decisions"]] == ["reject"]


def test_a_later_approval_applies_to_the_edited_args_and_editing_again_starts_over():
    agent = make.agent()
    make.policy(agent=agent, required_approvals=2)
    alice, bob, carol = make.user(), make.user(), make.user()
    interrupt = raised(agent, tool_name="send_email")
    first = {"approved": True, "editedArgs": {"to": "x@y.z"}}
    decisions.decide(interrupt, alice, "resolved", first)
    # Bob edits differently: Alice's approval no longer counts.
    decisions.decide(interrupt, bob, "resolved", {"approved": True, "editedArgs": {"to": "bob@y.z"}})
    assert [d.user for d in decisions.approvals(interrupt)] == [bob]
    assert status(interrupt) == "pending"
    # Carol's plain approval approves Bob's final args.
    decision = decisions.decide(interrupt, carol, "resolved", APPROVE)
    assert decision.edited_args == {"to": "bob@y.z"} and decision.action == "approve"
    [entry] = resume_of(interrupt).input["resume"]
    assert entry["payload"] == {"approved": True, "editedArgs": {"to": "bob@y.z"}}
    assert [d["username"] for d in entry["metadata"]["countersign"]["decisions"]] == [bob.username, carol.username]
    assert entry["metadata"]["countersign"]["fingerprint"] == signing.fingerprint(
        thread_id=interrupt.run.thread.thread_id, run_id=interrupt.run.run_id, interrupt_id="int-1",
        tool_call_id="call-1", status="resolved", payload=entry["payload"])


def test_under_a_quorum_a_closed_interrupt_cannot_be_revised():
    agent = make.agent()
    make.policy(agent=agent, required_approvals=2)
    alice, bob = make.user(), make.user()
    run = make.run(make.thread(agent=agent), status="interrupted")
    interrupt, sibling = raised(run=run), raised(run=run, interrupt_id="int-2")
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    decisions.decide(interrupt, bob, "resolved", APPROVE)
    assert status(interrupt) == "resolved" and status(sibling) == "pending"
    assert refused_code(lambda: decisions.decide(interrupt, alice, "resolved", {"approved": False})) \
        == "ALREADY_DECIDED"


# --- what an answer may carry ----------------------------------------------------


def test_an_answer_may_not_write_the_attestation_itself():
    interrupt = raised()
    problem = pytest.raises(ContractViolation, decisions.decide, interrupt, make.user(), "resolved", APPROVE,
                            metadata={"countersign": {"decisions": [{"username": "ceo"}]}}).value
    assert problem.code == "RESERVED_METADATA_KEY"
    assert not Decision.objects.exists()


def test_a_reviewers_own_metadata_travels_beside_the_attestation():
    interrupt, reviewer = raised(), make.user()
    decisions.decide(interrupt, reviewer, "resolved", APPROVE, metadata={"ticket": "OPS-1"})
    [entry] = resume_of(interrupt).input["resume"]
    assert entry["metadata"]["ticket"] == "OPS-1"
    assert entry["metadata"]["countersign"]["decisions"][0]["userId"] == reviewer.pk


def test_an_answer_that_cannot_be_fingerprinted_is_refused_before_anything_is_written():
    interrupt = raised()
    assert refused_code(lambda: decisions.decide(interrupt, make.user(), "resolved",
                                                 {"approved": True, "n": 2 ** 60})) \
        == "UNSIGNABLE_PAYLOAD"
    assert status(interrupt) == "pending"


# --- the inbox's "waiting for me" -------------------------------------------------


def test_waiting_for_me_counts_what_the_reader_may_decide_and_has_not():
    agent, other = make.agent(), make.agent()
    finance = Group.objects.create(name="Finance")
    make.policy(agent=agent, groups=[finance], required_approvals=2)
    alice, bob, reader = make.user(), make.user(), make.user(reviewer=False)
    alice.groups.add(finance)
    guarded = raised(agent, interrupt_id="guarded")
    open_to_all = raised(other, interrupt_id="open")
    own = raised(other, requester=bob, interrupt_id="own")
    mine = lambda user: set(selectors.inbox(selectors.InboxFilters(), user=user)  # noqa: E731
                            .values_list("interrupt_id", flat=True))
    assert mine(alice) == {"guarded", "open", "own"}
    assert mine(bob) == {"open"}  # not Finance; and "own" is his own request
    assert mine(reader) == set()
    assert selectors.waiting_count(alice) == 3
    decisions.decide(guarded, alice, "resolved", APPROVE)
    assert mine(alice) == {"open", "own"}  # she approved; it waits for someone else now
    assert status(guarded) == "pending"
    everything = selectors.inbox(selectors.InboxFilters(scope="all"), user=bob)
    assert {i.interrupt_id for i in everything} == {guarded.interrupt_id, open_to_all.interrupt_id,
                                                    own.interrupt_id}


def test_a_resume_carries_the_requester_on_and_the_decider_is_not_it():
    requester, reviewer = make.user(), make.user()
    interrupt = raised(requester=requester)
    decisions.decide(interrupt, reviewer, "resolved", APPROVE)
    resume = resume_of(interrupt)
    assert resume.created_by == reviewer and resume.requested_by == requester
    assert runs.resume_entries(interrupt.run)[0]["metadata"]["countersign"]["decisions"][0]["username"] \
        == reviewer.username
