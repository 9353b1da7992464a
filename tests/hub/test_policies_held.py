"""The policies a process holds between decisions: read once, kept while the audit trail shows no change.

Each test changes who may decide by one of the ways staff do (a policy saved,
its groups or users changed, a group renamed, a named user deleted, a policy
removed) and decides at once in the same process: the change is in force for
that very decision, though the process held the policies read before it.
"""

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from interrupts.hub import decisions, policies
from interrupts.hub.refusals import Refusal
from interrupts.models import Interrupt, Policy
from interrupts.rules import eligibility

from .. import factories as make

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
APPROVE = {"approved": True}


def raised(agent):
    run = make.run(make.thread(agent=agent), status="interrupted")
    return make.interrupt(run, interrupt_id="int-1", response_schema=SCHEMA,
                          raw={"id": "int-1", "reason": "confirmation", "responseSchema": SCHEMA})


def refusal_of(interrupt, user) -> str | None:
    try:
        decisions.decide(interrupt, user, "resolved", APPROVE)
    except Refusal as refused:
        return refused.code
    return None


def status(interrupt) -> str:
    return Interrupt.objects.get(pk=interrupt.pk).status


def test_while_nothing_changes_the_policies_cost_one_query_per_decision():
    agent = make.agent()
    make.policy(agent=agent, groups=[Group.objects.get(name="Reviewers")])
    eligibility.rule_for(raised(agent))  # whatever this process held before, it holds these now
    for _ in range(3):
        interrupt = raised(agent)
        with CaptureQueriesContext(connection) as read:
            eligibility.rule_for(interrupt)
        assert len(read) == 1
        assert refusal_of(interrupt, make.user()) is None  # decisions are appended: still held


def test_a_policy_saved_is_in_force_for_the_next_decision():
    agent = make.agent()
    policy = make.policy(agent=agent)
    first, second = raised(agent), raised(agent)
    assert eligibility.rule_for(first).required_approvals == 1
    policy.required_approvals = 2
    policies.save(policy)
    decisions.decide(second, make.user(), "resolved", APPROVE)
    assert status(second) == "pending"  # one of two approvals
    assert eligibility.rule_for(first).required_approvals == 2


def test_a_policy_added_removed_or_whose_members_change_is_in_force_for_the_next_decision():
    agent = make.agent()
    shippers = Group.objects.create(name="Shippers")
    reviewer = make.user()
    assert refusal_of(raised(agent), reviewer) is None  # the site default, held
    policy = make.policy(agent=agent, groups=[shippers])
    assert refusal_of(raised(agent), reviewer) == "NOT_ELIGIBLE"
    policies.save(policy, users=[reviewer])
    assert refusal_of(raised(agent), reviewer) is None
    policies.save(policy, users=[])
    assert refusal_of(raised(agent), reviewer) == "NOT_ELIGIBLE"
    policies.delete(policy)
    assert refusal_of(raised(agent), reviewer) is None


def test_a_group_renamed_or_a_named_user_deleted_is_in_force_for_the_next_decision():
    agent = make.agent()
    shippers = Group.objects.create(name="Shippers")
    named = make.user(username="named")
    make.policy(agent=agent, groups=[shippers], users=[named])
    assert eligibility.rule_for(raised(agent)).waiting_for == "Shippers, named"
    shippers.name = "Carriers"
    shippers.save()
    assert eligibility.rule_for(raised(agent)).waiting_for == "Carriers, named"
    named.delete()
    shippers.delete()
    rule = eligibility.rule_for(raised(agent))
    assert rule.waiting_for.startswith("nobody") and not rule.admits(make.user())


@pytest.mark.django_db(transaction=True)
def test_policies_read_in_a_transaction_that_rolled_back_are_not_kept():
    agent = make.agent()
    interrupt = raised(agent)
    assert eligibility.rule_for(interrupt).name == "site default"
    with pytest.raises(RuntimeError), transaction.atomic():
        make.policy(name="never committed", agent=agent, required_approvals=3)
        assert eligibility.rule_for(interrupt).name == "never committed"
        raise RuntimeError("roll back")
    assert eligibility.rule_for(interrupt).name == "site default"
    # The trail grows again from where it was rolled back to: the same seq, another entry.
    make.policy(name="committed", agent=agent)
    assert eligibility.rule_for(interrupt).name == "committed"


def test_a_change_made_around_the_trail_is_in_force_within_the_held_time(monkeypatch):
    agent = make.agent()
    policy = make.policy(agent=agent)
    interrupt = raised(agent)
    assert eligibility.rule_for(interrupt).required_approvals == 1
    with connection.cursor() as cursor:  # raw SQL: no signal, no entry
        cursor.execute("UPDATE interrupts_policy SET required_approvals = 2 WHERE id = %s", [policy.pk])
    monkeypatch.setattr(eligibility, "HELD_SECONDS", 0)
    assert eligibility.rule_for(interrupt).required_approvals == 2


# --- ORM writes that send no signal (QuerySet.update, rows of the m2m's through model) ----------
# They append no trail entry either: the held policies must not outlive them.


def test_a_policy_tightened_by_a_queryset_update_is_in_force_for_the_next_decision():
    agent = make.agent()
    policy = make.policy(agent=agent)
    interrupt = raised(agent)
    assert eligibility.rule_for(interrupt).required_approvals == 1
    Policy.objects.filter(pk=policy.pk).update(required_approvals=2)
    assert eligibility.rule_for(raised(agent)).required_approvals == 2


def test_a_policy_narrowed_through_its_m2m_rows_is_in_force_for_the_next_decision():
    agent = make.agent()
    policy = make.policy(agent=agent)
    reviewer = make.user()
    shippers = Group.objects.create(name="Shippers")  # its own entry comes before the policies are held
    assert refusal_of(raised(agent), reviewer) is None
    Policy.groups.through.objects.create(policy=policy, group=shippers)
    Policy.objects.filter(pk=policy.pk).update(restricted=True)
    assert refusal_of(raised(agent), reviewer) == "NOT_ELIGIBLE"
