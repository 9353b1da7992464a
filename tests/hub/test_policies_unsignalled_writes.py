"""A policy changed by ORM writes that send no signal is in force for the next decision.

``QuerySet.update``, ``bulk_update`` and rows created on the m2m's through
model send no post_save/m2m_changed, and append no trail entry: held policies
(``policies._held``) must not outlive such a change, here or in another process.
"""

import pytest
from django.contrib.auth.models import Group

from interrupts.hub import policies
from interrupts.models import Policy

from .. import factories as make
from .test_policies_held import raised, refusal_of

pytestmark = pytest.mark.django_db


def test_a_policy_tightened_by_a_queryset_update_is_in_force_for_the_next_decision():
    agent = make.agent()
    policy = make.policy(agent=agent)
    interrupt = raised(agent)
    assert policies.rule_for(interrupt).required_approvals == 1
    Policy.objects.filter(pk=policy.pk).update(required_approvals=2)
    assert policies.rule_for(raised(agent)).required_approvals == 2


def test_a_policy_narrowed_through_its_m2m_rows_is_in_force_for_the_next_decision():
    agent = make.agent()
    policy = make.policy(agent=agent)
    reviewer = make.user()
    shippers = Group.objects.create(name="Shippers")  # its own entry comes before the policies are held
    assert refusal_of(raised(agent), reviewer) is None
    Policy.groups.through.objects.create(policy=policy, group=shippers)
    Policy.objects.filter(pk=policy.pk).update(restricted=True)
    assert refusal_of(raised(agent), reviewer) == "NOT_ELIGIBLE"
