"""Built-in demo agents: Countersign works out of the box, with no LLM and no key."""

from datetime import timedelta

from django.conf import settings

from .deployer import Deployer
from .filing import Filing
from .janitor import Janitor
from .mailer import BulkMailer, Mailer
from .planner import Planner


def demo_agents() -> dict:
    """Every demo agent by name, as served at /agents/<name>/."""
    filing_expiry = timedelta(seconds=getattr(settings, "DEMO_FILING_EXPIRES_IN", 3600))
    agents = [Deployer(), Mailer(), BulkMailer(), Filing(expires_in=filing_expiry), Planner(), Janitor()]
    return {agent.name: agent for agent in agents}


def register_demo_agents(base_url: str) -> None:
    """Register (or re-point) every demo agent at ``base_url``/agents/<name>/."""
    from ..models import Agent

    base = base_url.rstrip("/")
    for name, agent in demo_agents().items():
        Agent.objects.update_or_create(
            name=name,
            defaults={"url": f"{base}/agents/{name}/", "description": agent.description, "builtin": True},
        )
