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
