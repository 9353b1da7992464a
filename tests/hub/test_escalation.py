"""Escalation: a request past its policy's target goes to the backup group, once, told and recorded."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.test import APIClient

from interrupts.hub import decisions, escalation, policies
from interrupts.hub.refusals import Refusal
from interrupts.hub.trail import verify
from interrupts.models import AuditEntry, Interrupt
from interrupts.reads import selectors
from interrupts.rules import eligibility, targets

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
_ids = iter(range(10**6))


def raised(agent, minutes_ago=0, **run_fields):
    run = make.run(make.thread(agent=agent), status="interrupted", **run_fields)
    interrupt_id = f"esc-{next(_ids)}"
    made = make.interrupt(run, interrupt_id=interrupt_id, response_schema=SCHEMA,
                          raw={"id": interrupt_id, "reason": "confirmation", "responseSchema": SCHEMA})
    Interrupt.objects.filter(pk=made.pk).update(created_at=timezone.now() - timedelta(minutes=minutes_ago))
    return Interrupt.objects.select_related("run").get(pk=made.pk)


@pytest.fixture
def team():
    """A policy for one agent: Alice's team decides within 30 minutes, else the on-call group may too."""
    agent = make.agent()
    deciders, oncall = Group.objects.create(name="Payments"), Group.objects.create(name="On call")
    alice, carol = make.user(username="alice"), make.user(username="carol")
    alice.groups.add(deciders)
    carol.groups.add(oncall)
    policy = make.policy(agent=agent, groups=[deciders], restricted=True, target_minutes=30, backup_group=oncall)
    return {"agent": agent, "policy": policy, "alice": alice, "carol": carol, "oncall": oncall}


def test_a_request_past_its_target_escalates_once_to_the_backup_group(team):
    late, early = raised(team["agent"], minutes_ago=31), raised(team["agent"], minutes_ago=5)
    with pytest.raises(Refusal) as refused:  # before: only the policy's own people
        decisions.decide(late, team["carol"], "resolved", {"approved": True})
    assert refused.value.code == "NOT_ELIGIBLE"

    assert escalation.escalate_due() == 1
    assert escalation.escalate_due() == 0  # once, however often the sweep runs
    late.refresh_from_db()
    assert late.escalated_to == team["oncall"] and late.escalated_at is not None
    assert Interrupt.objects.get(pk=early.pk).escalated_at is None
    [entry] = AuditEntry.objects.filter(kind=escalation.ESCALATED)
    assert entry.interrupt_id == late.pk and '"group":"On call"' in entry.content
    assert verify.verify().ok

    # The backup group now finds it waiting for them, and may decide it.
    assert selectors.waiting(team["carol"]).n == 1
    assert list(selectors.inbox(selectors.InboxFilters(), user=team["carol"])) == [late]
    decisions.decide(late, team["carol"], "resolved", {"approved": True})
    assert Interrupt.objects.get(pk=late.pk).status == "resolved"


def test_a_backup_member_may_not_decide_their_own_request(team):
    mine = raised(team["agent"], minutes_ago=40, requested_by=team["carol"])
    escalation.escalate_due()
    with pytest.raises(Refusal) as refused:
        decisions.decide(mine, team["carol"], "resolved", {"approved": True})
    assert refused.value.code == "SELF_APPROVAL"
    assert selectors.waiting(team["carol"]).n == 0


def test_nothing_escalates_without_a_backup_group_or_once_decided(team):
    policy = team["policy"]
    decided = raised(team["agent"], minutes_ago=45)
    decisions.decide(decided, team["alice"], "resolved", {"approved": True})
    assert escalation.escalate_due() == 0
    policy.backup_group = None
    policies.save(policy)
    raised(team["agent"], minutes_ago=45)
    assert escalation.escalate_due() == 0


def test_the_card_and_the_api_say_it_escalated(team, client):
    late = raised(team["agent"], minutes_ago=31)
    escalation.escalate_due()
    client.force_login(team["carol"])
    page = client.get("/inbox/").content.decode()
    assert 'data-testid="escalated"' in page and "On call" in page
    api = APIClient()
    api.force_authenticate(team["carol"])
    shown = api.get(f"/api/interrupts/{late.pk}/").json()
    assert shown["escalated_to"] == "On call" and shown["escalated_at"]
    assert shown["can_decide"] is True
    assert targets.target(late, eligibility.rule_for(late), timezone.now()).state == "breached"


def test_the_audit_page_tells_the_claims_and_the_escalation(team, client):
    from interrupts.hub import claims

    late = raised(team["agent"], minutes_ago=31)
    claims.claim(late, team["alice"])
    escalation.escalate_due()
    decisions.decide(late, team["carol"], "resolved", {"approved": True}, claim_confirmed=True)
    client.force_login(team["carol"])
    page = client.get("/audit/").content.decode()
    assert "claimed by alice" in page and "missed its 30 min target: escalated to On call" in page


def test_a_policy_s_backup_group_needs_a_target_and_is_in_the_trail(team):
    staff = make.user(is_staff=True, is_superuser=True)
    api = APIClient()
    api.force_authenticate(staff)
    refused = api.post("/api/policies/", {"name": "no-target", "backup_group": "On call"}, format="json")
    assert refused.status_code == 400 and "target" in str(refused.json())
    made = api.post("/api/policies/", {"name": "with-target", "reason": "deploy", "target_minutes": 10,
                                       "backup_group": "On call"}, format="json")
    assert made.status_code == 201, made.content
    entry = AuditEntry.objects.filter(subject__startswith="policy:").order_by("-seq").first()
    assert '"backupGroup":"On call"' in entry.content
    # Deleting the backup group changes the policies naming it: the trail follows, and still verifies.
    team["oncall"].delete()
    assert verify.verify().ok
    assert '"backupGroupId":null' in AuditEntry.objects.filter(subject__startswith="policy:").order_by(
        "-seq").first().content


def test_processes_sweeping_at_once_escalate_each_request_once(team):
    """Four sweeps at once (threads with their own connections: on PostgreSQL, truly concurrent)."""
    import threading

    from django.db import connection

    late = [raised(team["agent"], minutes_ago=31) for _ in range(3)]
    counts, barrier = [], threading.Barrier(4)

    def sweep():
        barrier.wait()
        try:
            counts.append(escalation.escalate_due())
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counts) == 3
    assert AuditEntry.objects.filter(kind=escalation.ESCALATED).count() == 3
    assert set(Interrupt.objects.filter(pk__in=[i.pk for i in late]).values_list("escalated_to", flat=True)) == {
        team["oncall"].pk}


def test_a_backup_group_decides_only_while_the_governing_policy_still_names_it(team):
    # Staff who move an agent's requests under a stricter policy (its own people, no backup) must not
    # find the old policy's on-call group still approving the ones that had escalated.
    late = raised(team["agent"], minutes_ago=31)
    escalation.escalate_due()
    assert selectors.waiting(team["carol"]).n == 1
    stricter = make.policy(agent=team["agent"], reason="confirmation", groups=list(team["policy"].groups.all()),
                           restricted=True)
    assert Interrupt.objects.get(pk=late.pk).policy_id == stricter.pk
    late = Interrupt.objects.select_related("run").get(pk=late.pk)
    with pytest.raises(Refusal) as refused:
        decisions.decide(late, team["carol"], "resolved", {"approved": True})
    assert refused.value.code == "NOT_ELIGIBLE"
    assert selectors.waiting(team["carol"]).n == 0
    assert list(selectors.inbox(selectors.InboxFilters(), user=team["carol"])) == []
