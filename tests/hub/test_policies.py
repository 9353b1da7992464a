"""Who may decide, in process: the permission, policies, self-approval, quorums and the attestation."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from interrupts.hub import automatic, decisions, grants, policies, runs
from interrupts.hub.refusals import Refusal
from interrupts.hub.trail import chain
from interrupts.models import Decision, Interrupt, Policy, Run
from interrupts.protocol import signing, trail
from interrupts.protocol.errors import ContractViolation, ProtocolError
from interrupts.reads import selectors
from interrupts.rules import eligibility, grant_scope, targets

from .. import factories as make
from ..sdk.test_passkeys import Authenticator

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
    rule = lambda i: eligibility.rule_for(i).name  # noqa: E731
    assert rule(raised(other)) == "everyone's"
    assert rule(raised(agent, interrupt_id="a")) == "agent's"
    assert rule(raised(agent, tool_name="send_email", interrupt_id="b")) == "agent's mail"
    # Naming the tool beats naming the agent...
    assert rule(raised(other, reason="payment", tool_name="send_email", interrupt_id="c")) == "any agent's payments"
    # ...and among those naming the tool, naming the agent beats naming a reason.
    assert rule(raised(agent, reason="payment", tool_name="send_email", interrupt_id="d")) == "agent's mail"


def test_without_policies_the_site_default_admits_every_reviewer_but_the_requester():
    assert eligibility.rule_for(raised()) == eligibility.SITE_DEFAULT
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
    # Carol's plain approval joins Bob's final args only if they are what she saw.
    problem = pytest.raises(Refusal, decisions.decide, interrupt, carol, "resolved", APPROVE,
                            seen=decisions.answer_digest(None)).value
    assert (problem.code, problem.status) == ("ANSWER_CHANGED", 409)
    assert refused_code(lambda: decisions.decide(interrupt, carol, "resolved", APPROVE)) == "ANSWER_CHANGED"
    standing = decisions.standing_answer(decisions.approvals(interrupt))
    decision = decisions.decide(interrupt, carol, "resolved", APPROVE, seen=decisions.answer_digest(standing))
    assert decision.edited_args == {"to": "bob@y.z"} and decision.action == "approve"
    [entry] = resume_of(interrupt).input["resume"]
    assert entry["payload"] == {"approved": True, "editedArgs": {"to": "bob@y.z"}}
    assert [d["username"] for d in entry["metadata"]["countersign"]["decisions"]] == [bob.username, carol.username]
    assert entry["metadata"]["countersign"]["fingerprint"] == signing.fingerprint(
        thread_id=interrupt.run.thread.thread_id, run_id=interrupt.run.run_id, interrupt_id="int-1",
        tool_call_id="call-1", status="resolved", payload=entry["payload"])
    # And what will run, named with it.
    assert {k: entry["metadata"]["countersign"][k] for k in ("toolCallId", "toolName", "args")} == {
        "toolCallId": "call-1", "toolName": "send_email", "args": {"to": "bob@y.z"}}


def test_an_approval_stops_counting_when_its_author_loses_the_right_to_decide():
    agent, finance = make.agent(), Group.objects.create(name="Finance")
    make.policy(agent=agent, groups=[finance], required_approvals=2)
    bob, carol, dave = make.user(), make.user(), make.user()
    for person in (bob, carol, dave):
        person.groups.add(finance)
    interrupt = raised(agent)
    decisions.decide(interrupt, bob, "resolved", APPROVE)
    bob.groups.remove(finance)
    decisions.decide(interrupt, carol, "resolved", APPROVE)
    assert status(interrupt) == "pending"  # Bob's approval no longer counts
    assert [d.user for d in decisions.approvals(interrupt)] == [carol]
    decisions.decide(interrupt, dave, "resolved", APPROVE)
    [entry] = resume_of(interrupt).input["resume"]
    assert [d["username"] for d in entry["metadata"]["countersign"]["decisions"]] == [carol.username, dave.username]


def test_a_tool_policy_beats_a_reason_policy_the_agent_could_pick():
    agent = make.agent()
    make.policy(name="low risk", reason="countersign:lowrisk", allow_self_approval=True)
    make.policy(name="chat", agent=agent, reason="chat", allow_self_approval=True)
    make.policy(name="money", tool_name="transferFunds", required_approvals=3)
    assert eligibility.rule_for(raised(reason="countersign:lowrisk", tool_name="transferFunds")).name == "money"
    # Even a reason policy on the agent itself: the agent chooses its reason, not the tool it calls.
    assert eligibility.rule_for(raised(agent, reason="chat", tool_name="transferFunds", interrupt_id="x")).name \
        == "money"


def test_a_policy_whose_named_groups_were_deleted_admits_nobody():
    agent, finance = make.agent(), Group.objects.create(name="Finance")
    make.policy(agent=agent, groups=[finance], name="finance only")
    reviewer = make.user()
    interrupt = raised(agent)
    finance.delete()
    rule = eligibility.rule_for(interrupt)
    assert rule.restricted and not rule.admits(reviewer) and "nobody" in rule.waiting_for
    assert refused_code(lambda: decisions.decide(interrupt, reviewer, "resolved", APPROVE)) == "NOT_ELIGIBLE"
    assert selectors.waiting(reviewer).n == 0
    # Naming people again, on purpose, by staff, opens it to them.
    policy = policies.Policy.objects.get(name="finance only")
    policies.save(policy, users=[reviewer])
    assert eligibility.rule_for(interrupt).admits(reviewer)
    decisions.decide(interrupt, reviewer, "resolved", APPROVE)


def test_answers_are_compared_as_signed_not_as_python_compares_them():
    agent = make.agent()
    make.policy(agent=agent, required_approvals=2)
    bob, mallory = make.user(), make.user()
    interrupt = raised(agent, tool_name="pay")
    decisions.decide(interrupt, bob, "resolved", {"approved": True, "editedArgs": {"amount": 1, "cap": 0}})
    decisions.decide(interrupt, mallory, "resolved", {"approved": True, "editedArgs": {"amount": True, "cap": False}})
    assert status(interrupt) == "pending"  # 1 == True to Python, not to the agent
    assert [d.user for d in decisions.approvals(interrupt)] == [mallory]


def test_a_batch_waits_again_when_a_closed_interrupts_approver_lost_the_right_to_decide():
    bob, carol, dave = make.user(), make.user(), make.user()
    run = make.run(status="interrupted")
    first, second = raised(run=run), raised(run=run, interrupt_id="int-2")
    decisions.decide(first, bob, "resolved", APPROVE)
    bob.is_active = False
    bob.save()
    decisions.decide(second, carol, "resolved", APPROVE)
    assert status(first) == "pending" and resume_of(first) is None
    decisions.decide(first, dave, "resolved", APPROVE)
    entries = {e["interruptId"]: e for e in resume_of(first).input["resume"]}
    assert [d["username"] for d in entries["int-1"]["metadata"]["countersign"]["decisions"]] == [dave.username]


def test_a_policy_name_must_be_addressable():
    from django.core.exceptions import ValidationError

    for name in (".", "..", "a/b"):
        with pytest.raises(ValidationError):
            policies.Policy(name=name).full_clean()


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


def test_an_answer_may_not_write_tanstack_s_continuation_itself():
    # TanStack rebuilds its pending batch from the continuation alone: written by a
    # reviewer, it could make the answer resolve another request of the agent's.
    interrupt = raised()
    problem = pytest.raises(ContractViolation, decisions.decide, interrupt, make.user(), "resolved", APPROVE,
                            metadata={"tanstack:interruptContinuation": {"definitionId": "transfer-funds"}}).value
    assert problem.code == "RESERVED_METADATA_KEY" and "tanstack:interruptContinuation" in problem.message
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
    assert selectors.waiting(alice).n == 3
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


# --- the REST API says the same ---------------------------------------------------


def _api(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_api_shows_each_interrupts_policy_progress_and_whether_the_caller_may_decide():
    agent, finance = make.agent(), Group.objects.create(name="Finance")
    make.policy(agent=agent, groups=[finance], required_approvals=2, name="two from finance")
    alice, outsider = make.user(), make.user()
    alice.groups.add(finance)
    interrupt = raised(agent)
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    [shown] = _api(outsider).get("/api/interrupts/").json()["results"]
    assert shown["policy"] == {"name": "two from finance", "required_approvals": 2, "allow_self_approval": False,
                               "waiting_for": "Finance"}
    assert (shown["approvals"], shown["can_decide"], shown["refusal"]) == (1, False, "NOT_ELIGIBLE")
    assert _api(outsider).get("/api/interrupts/", {"scope": "mine"}).json()["results"] == []
    refused = _api(outsider).post(f"/api/interrupts/{interrupt.pk}/decide/", {"action": "approve"}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "NOT_ELIGIBLE"
    detail = _api(alice).get(f"/api/interrupts/{interrupt.pk}/").json()
    assert [(d["user"]["username"], d["action"], d["policy"]) for d in detail["decisions"]] == [
        (alice.username, "approve", "two from finance")]


def test_the_api_list_reads_policies_once_whatever_the_page_size(django_assert_max_num_queries):
    agent = make.agent()
    make.policy(agent=agent, required_approvals=2)
    reader = make.user()
    for n in range(30):
        raised(agent, interrupt_id=f"int-{n}")
    client = _api(reader)
    with django_assert_max_num_queries(12):
        assert len(client.get("/api/interrupts/", {"scope": "mine"}).json()["results"]) == 30


# --- the Agents page, for staff ---------------------------------------------------


def _browser(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def test_staff_add_edit_and_delete_policies_on_the_agents_page():
    agent, finance = make.agent(name="mailer-x"), Group.objects.create(name="Finance")
    staff = _browser(make.user(is_staff=True))
    added = staff.post("/policies/add/", {"name": "finance mail", "agent": agent.pk, "reason": "", "tool_name": "",
                                          "groups": [finance.pk], "required_approvals": 2})
    assert added.status_code == 302
    policy = policies.Policy.objects.get(name="finance mail")
    page = staff.get("/registry/").content.decode()
    assert "finance mail" in page and "Finance" in page
    # The same scope twice is a form error, not a crash.
    again = staff.post("/policies/add/", {"name": "another", "agent": agent.pk, "required_approvals": 1})
    assert again.status_code == 200 and "already" in again.content.decode().lower()
    staff.post(f"/policies/{policy.pk}/edit/", {"name": "finance mail", "agent": agent.pk, "required_approvals": 3})
    assert policies.Policy.objects.get(pk=policy.pk).required_approvals == 3
    staff.post(f"/policies/{policy.pk}/delete/")
    assert not policies.Policy.objects.filter(pk=policy.pk).exists()


def test_a_reviewer_reads_policies_but_cannot_change_them():
    reviewer = _browser(make.user())
    assert reviewer.get("/registry/").status_code == 200
    refused = reviewer.post("/policies/add/", {"name": "mine", "required_approvals": 1})
    assert refused.status_code == 302 and "/login" in refused["Location"]
    assert not policies.Policy.objects.filter(name="mine").exists()


def test_a_signing_secret_is_shown_once_when_registered_and_when_rotated():
    staff = _browser(make.user(is_staff=True))
    made = staff.post("/registry/add/", {"name": "signed", "url": "https://agent.example/run/"})
    agent = policies.Policy._meta.apps.get_model("interrupts", "Agent").objects.get(name="signed")
    assert made.status_code == 200 and agent.signing_secret in made.content.decode()
    assert made["Cache-Control"] == "no-store"
    assert agent.signing_secret not in staff.get("/registry/").content.decode()
    old = agent.signing_secret
    rotated = staff.post("/registry/signed/rotate-secret/")
    agent.refresh_from_db()
    assert agent.signing_secret != old and agent.signing_secret in rotated.content.decode()
    assert _browser(make.user()).post("/registry/signed/rotate-secret/").status_code == 302  # to the login page
    agent.refresh_from_db()
    assert agent.signing_secret in rotated.content.decode()


def test_the_inbox_card_is_read_only_for_whom_the_policy_does_not_admit():
    agent, finance = make.agent(), Group.objects.create(name="Finance")
    make.policy(agent=agent, groups=[finance], required_approvals=2)
    alice, outsider = make.user(), make.user()
    alice.groups.add(finance)
    interrupt = raised(agent)
    seen = _browser(outsider).get("/inbox/?scope=all").content.decode()
    assert "Waiting for Finance." in seen and f'action="/interrupts/{interrupt.pk}/decide/"' not in seen
    assert "0 of 2 approvals" in seen
    assert "Nothing waits for you" in _browser(outsider).get("/inbox/").content.decode()
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    mine = _browser(alice).get("/inbox/?scope=all").content.decode()
    assert "1 of 2 approvals" in mine and "You approved this" in mine


def test_the_inbox_reads_policies_once_per_page(django_assert_max_num_queries):
    agent = make.agent()
    make.policy(agent=agent, required_approvals=2)
    for n in range(20):
        raised(agent, run=make.run(make.thread(agent=agent), status="interrupted"), interrupt_id=f"i-{n}")
    client = _browser(make.user())
    with django_assert_max_num_queries(25):
        assert client.get("/inbox/").status_code == 200


def test_waiting_for_me_follows_policy_changes_and_stays_one_plain_filter(django_capture_on_commit_callbacks):
    agent, finance = make.agent(), Group.objects.create(name="Finance")
    reviewer = make.user()
    interrupt = raised(agent)
    assert selectors.waiting(reviewer).n == 1
    with django_capture_on_commit_callbacks(execute=True):  # resolved again once the policy is committed
        policy = make.policy(agent=agent, groups=[finance])
    assert Interrupt.objects.get(pk=interrupt.pk).policy_id == policy.pk
    assert selectors.waiting(reviewer).n == 0
    with django_capture_on_commit_callbacks(execute=True):
        policies.delete(policy)
    assert selectors.waiting(reviewer).n == 1
    # A hundred policies make a filter a hundred terms long, not ten thousand.
    for n in range(100):
        make.policy(agent=make.agent(), reason=f"r-{n}")
    sql = str(Interrupt.objects.filter(eligibility.decidable_by(reviewer)).query)
    assert len(sql) < 5_000, len(sql)


def test_a_second_approver_approves_a_form_answer_with_one_click():
    import html
    import re

    agent = make.agent()
    make.policy(agent=agent, required_approvals=2)
    form = {"type": "object", "properties": {"build": {"type": "integer"}}, "required": ["build"]}
    run = make.run(make.thread(agent=agent), status="interrupted")
    interrupt = make.interrupt(run, interrupt_id="ask", reason="input_required", response_schema=form,
                               raw={"id": "ask", "reason": "input_required", "responseSchema": form})
    alice, bob = make.user(), make.user()
    decisions.decide(interrupt, alice, "resolved", {"build": 42})
    page = _browser(bob).get("/inbox/").content.decode()
    concur = re.search(r'<form[^>]*class="concur">(.*?)</form>', page, re.S).group(1)
    fields = {name: html.unescape(value) for name, value in
              re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', concur)}
    assert fields["action"] == "respond" and json.loads(fields["payload"]) == {"build": 42}
    _browser(bob).post(f"/interrupts/{interrupt.pk}/decide/", fields)
    assert status(interrupt) == "resolved"
    [entry] = resume_of(interrupt).input["resume"]
    assert entry["payload"] == {"build": 42}
    assert [d["username"] for d in entry["metadata"]["countersign"]["decisions"]] == [alice.username, bob.username]


# --- target times -----------------------------------------------------------------------


@pytest.mark.parametrize("minutes_ago, state", [(1, "on_track"), (8, "at_risk"), (11, "breached")])
def test_a_policy_s_target_time_says_whether_a_request_is_on_track_at_risk_or_breached(minutes_ago, state):
    agent = make.agent()
    make.policy(agent=agent, target_minutes=10)
    interrupt = raised(agent)
    now = interrupt.created_at + timedelta(minutes=minutes_ago)
    found = targets.target(interrupt, eligibility.rule_for(interrupt), now)
    assert (found.state, found.due_at) == (state, interrupt.created_at + timedelta(minutes=10))
    assert targets.target(raised(make.agent()), eligibility.SITE_DEFAULT, timezone.now()) is None


def test_the_card_shows_a_breached_target():
    agent = make.agent()
    make.policy(agent=agent, target_minutes=5)
    interrupt = raised(agent)
    Interrupt.objects.filter(pk=interrupt.pk).update(created_at=interrupt.created_at - timedelta(minutes=7))
    page = _browser(make.user()).get("/inbox/?scope=all").content.decode()
    assert 'data-testid="target" data-state="breached"' in page and "target missed" in page


def test_the_api_gives_a_pending_interrupt_s_target():
    from rest_framework.test import APIClient

    agent = make.agent()
    make.policy(agent=agent, target_minutes=60)
    interrupt = raised(agent)
    client = APIClient()
    client.force_authenticate(make.user())
    target = client.get(f"/api/interrupts/{interrupt.pk}/").json()["target"]
    assert target["state"] == "on_track" and target["due_at"].startswith(
        (interrupt.created_at + timedelta(minutes=60)).strftime("%Y-%m-%dT%H:%M"))
    assert client.get(f"/api/interrupts/{raised(make.agent()).pk}/").json()["target"] is None


def test_a_passkey_joining_a_quorum_must_sign_the_answer_it_joins():
    agent, alice, bob = make.agent(), make.user(), make.user()
    make.policy(agent=agent, required_approvals=2, require_passkey=True)
    interrupt = raised(agent, tool_name="send_email")
    key = Authenticator()

    def signed(payload):
        return key.countersign(runs.answer_fingerprint(interrupt, interrupt.run.thread.thread_id, "resolved", payload))

    edited = {"approved": True, "editedArgs": {"to": "alice@y.z"}}
    decisions.decide(interrupt, alice, "resolved", edited, passkey=signed(edited))
    seen = decisions.answer_digest(decisions.standing_answer(decisions.approvals(interrupt)))
    # Signed over a plain approval, it would attest an answer other than the one it takes.
    assert refused_code(lambda: decisions.decide(interrupt, bob, "resolved", APPROVE, seen=seen,
                                                 passkey=signed(APPROVE))) == "PASSKEY_INVALID"
    assert status(interrupt) == "pending" and len(decisions.approvals(interrupt)) == 1
    joined = decisions.answer_to_sign(interrupt, bob, decisions.answer_for(interrupt, "approve"))
    assert joined == ("resolved", edited)
    decision = decisions.decide(interrupt, bob, "resolved", APPROVE, seen=seen, passkey=signed(edited))
    assert decision.edited_args == {"to": "alice@y.z"} and status(interrupt) == "resolved"
    data = b"".join(trail.export_chunks(chain.head().as_dict(), chain.export(chain.head())))
    assert trail.check_export(data).ok, trail.check_export(data).problems


def test_a_yes_beside_a_no_of_another_field_is_no_rejection_and_does_not_end_a_quorum():
    # The schema's yes/no field is confirm: a rejection ends the interrupt whatever the quorum or passkey,
    # so only confirm may say no. approved: false beside confirm: true is an answer like any other.
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
    agent, alice = make.agent(), make.user()
    make.policy(agent=agent, required_approvals=2)
    run = make.run(make.thread(agent=agent), status="interrupted")
    interrupt = make.interrupt(run, interrupt_id="int-1", raw={"id": "int-1", "reason": "confirmation",
                                                               "responseSchema": schema}, response_schema=schema)
    disguised = {"confirm": True, "approved": False}
    assert decisions.action_of(interrupt, "resolved", disguised) == "respond"
    assert decisions.action_of(interrupt, "resolved", {"confirm": False}) == "reject"
    assert decisions.action_of(interrupt, "resolved", {"confirm": False, "why": "no"}) == "respond"
    decisions.decide(interrupt, alice, "resolved", disguised)
    assert status(interrupt) == "pending" and resume_of(interrupt) is None


def test_a_passkey_approval_is_taken_once_even_where_its_sign_count_stays_0():
    agent, alice = make.agent(), make.user()
    make.policy(agent=agent, required_approvals=2, require_passkey=True)
    interrupt = raised(agent)
    evidence = Authenticator().countersign(
        runs.answer_fingerprint(interrupt, interrupt.run.thread.thread_id, "resolved", APPROVE))
    decisions.decide(interrupt, alice, "resolved", APPROVE, passkey=evidence)
    # The same assertion again (read back from the trail or the API): refused, nothing changes.
    assert refused_code(lambda: decisions.decide(interrupt, alice, "resolved", APPROVE,
                                                 passkey=evidence)) == "PASSKEY_INVALID"
    assert [d.passkey == evidence for d in decisions.approvals(interrupt)] == [True]


def test_approvals_without_a_passkey_stop_counting_once_the_policy_asks_for_one():
    agent, alice, bob = make.agent(), make.user(), make.user()
    policy = make.policy(agent=agent, required_approvals=2)
    interrupt = raised(agent)
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    policy.require_passkey = True
    policy.save()
    evidence = Authenticator().countersign(
        runs.answer_fingerprint(interrupt, interrupt.run.thread.thread_id, "resolved", APPROVE))
    decisions.decide(interrupt, bob, "resolved", APPROVE, passkey=evidence)
    # Alice's unsigned approval no longer counts: one signed approval of two.
    assert status(interrupt) == "pending"
    assert [d.user for d in decisions.approvals(interrupt)] == [bob]


def test_a_grant_scope_holds_what_the_card_showed_and_args_that_are_no_object_whole():
    scope = grants.scope_from({"env": "staging", "message": "hi"}, ["env"])
    assert grant_scope.covers(scope, {"env": "staging", "message": "another"})
    assert not grant_scope.covers(scope, {"env": "prod", "message": "hi"})
    assert not grant_scope.covers(scope, {"env": "staging", "message": "hi", "force": True})  # not on the card
    # As a script or a policy's rule may write it, without "type": "object": a string or a list is no object.
    loose = {"properties": {"env": {"const": "staging"}}, "required": ["env"]}
    assert grant_scope.covers(loose, {"env": "staging"})
    assert not grant_scope.covers(loose, "rm -rf /") and not grant_scope.covers(loose, ["env", "staging"])
    assert grant_scope.covers({"const": "ls"}, "ls") and not grant_scope.covers({"const": "ls"}, "rm")


def test_a_rule_approves_no_call_whose_args_or_name_were_doubted():
    setter = make.user()
    agent = make.agent()
    policies.save(Policy(name="auto deploy", agent=agent, tool_name="deploy", auto_approve=True,
                         auto_approve_args={}), users=[setter], by=setter)
    run = make.run(make.thread(agent=agent), status="streaming")

    def row(**fields):
        return Interrupt(run=run, interrupt_id="i-1", reason="tool_call", tool_name="deploy", raw={},
                         proposed_args={"env": "staging"}, **fields)

    now = timezone.now()
    assert automatic.standing(run, [row()], now) is not set  # the rule covers a clean call
    assert automatic.standing(run, [row(problems=[{"code": "DOUBTFUL_PROPOSAL"}])], now) is set


def test_a_passkey_approval_revised_away_cannot_be_replayed_even_spelt_otherwise():
    agent, alice = make.agent(), make.user()
    make.policy(agent=agent, require_passkey=True)
    interrupt = raised(agent)
    raised(run=interrupt.run, interrupt_id="int-2")  # its batch stays open: the answer may still be revised
    evidence = Authenticator().countersign(
        runs.answer_fingerprint(interrupt, interrupt.run.thread.thread_id, "resolved", APPROVE))
    decisions.decide(interrupt, alice, "resolved", APPROVE, passkey=evidence)
    decisions.decide(interrupt, alice, "resolved", {"approved": False})  # revised to a rejection before it went
    response = evidence["assertion"]["response"]
    respelt = {**response, "signature": response["signature"] + "."}  # base64url decoders skip the dot
    for again in (evidence, {**evidence, "assertion": {**evidence["assertion"], "response": respelt}}):
        assert refused_code(lambda again=again: decisions.decide(interrupt, alice, "resolved", APPROVE,
                                                                 passkey=again)) == "PASSKEY_INVALID"
    [standing] = decisions.approvals(interrupt)
    assert standing.action == "reject"
