"""Register, change and remove agents, each change with its audit entry in the same transaction.

Every door calls these (the Agents page, the API, the admin, ``manage.py
agents``, the demo agents' registration), as Django's admin calls
``log_change``: the entry is written by the change, not by a signal.
"""

from __future__ import annotations

from django.db import transaction

from ..models import Agent
from . import policies
from .trail import changes


def save(agent: Agent) -> Agent:
    """Create or change ``agent``; an entry when it is new or where its requests go, or what they carry, changed."""
    created = agent._state.adding
    with transaction.atomic():
        agent.save()
        changes.record_agent(agent, created)
    return agent


def update_or_create(name: str, defaults: dict) -> tuple[Agent, bool]:
    """The agent named ``name`` with ``defaults``, created if there is none; as ``QuerySet.update_or_create``."""
    with transaction.atomic():
        agent, created = Agent.objects.update_or_create(name=name, defaults=defaults)
        changes.record_agent(agent, created)
    return agent, created


def rotate_signing_secret(agent: Agent) -> str:
    """Give ``agent`` a new signing secret (``Agent.rotate_signing_secret``) and return it, shown this once."""
    with transaction.atomic():
        secret = agent.rotate_signing_secret()
        changes.record_agent(agent, created=False)
    return secret


def delete(agent: Agent) -> None:
    """Remove ``agent`` and the policies naming it (CASCADE), an entry for each, policies first."""
    pk, name = agent.pk, agent.name
    with transaction.atomic():
        going = list(agent.policies.order_by("pk").values_list("pk", "name"))
        agent.delete()
        for policy_pk, policy_name in going:
            changes.record_policy_deleted(policy_pk, policy_name)
        changes.record_agent_deleted(pk, name)
        if going:
            transaction.on_commit(policies.reassign_pending)
