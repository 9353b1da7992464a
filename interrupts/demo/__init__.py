"""Built-in demo agents: Countersign works out of the box, with no LLM and no key."""

from datetime import timedelta

from ..conf import settings
from .deployer import Deployer
from .filing import Filing
from .janitor import Janitor
from .mailer import BulkMailer, Mailer
from .planner import Planner


def demo_agents() -> dict:
    """Every demo agent by name, as served at /agents/<name>/."""
    filing_expiry = timedelta(seconds=settings.DEMO_FILING_EXPIRES_IN)
    agents = [Deployer(), Mailer(), BulkMailer(), Filing(expires_in=filing_expiry), Planner(), Janitor()]
    return {agent.name: agent for agent in agents}


#: The policy each demo agent ships with: the README's tour is one person, starting runs and approving them.
DEMO_POLICY = "demo: {name} (self-approval allowed)"


def register_demo_agents(base_url: str) -> None:
    """Register (or re-point) every demo agent at ``base_url``/agents/<name>/, each with its demo policy.

    A demo policy is created once: an operator who changes or deletes it
    (to try quorums or groups on the demo agents) keeps their change.
    """
    from django.db import transaction

    from ..hub import agents, policies

    base = base_url.rstrip("/")
    # One commit, not twelve: this runs at every start and after every flush (each transactional test).
    with transaction.atomic():
        for name, agent in demo_agents().items():
            row, created = agents.update_or_create(
                name=name,
                defaults={"url": f"{base}/agents/{name}/", "description": agent.description, "builtin": True},
            )
            if created:
                policies.get_or_create(
                    agent=row, reason="", tool_name="",
                    defaults={"name": DEMO_POLICY.format(name=name), "allow_self_approval": True},
                )
