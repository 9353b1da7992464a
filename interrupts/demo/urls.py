"""/agents/<name>/: each demo agent as a real AG-UI endpoint of this app."""

from django.urls import path

from ..conf import settings
from . import demo_agents
from .views import agent_view


def signing_secret_of(name: str):
    """The demo agent's secret, read on every request.

    The hub and the demo share one database, so a rotation applies at once.
    """

    async def secret() -> str | None:
        from ..models import Agent

        return await Agent.objects.filter(name=name, builtin=True).values_list("signing_secret", flat=True).afirst()

    return secret


def require_signature() -> bool:
    # Read per request, not at import, so a changed setting applies without a restart of the URLconf.
    return settings.COUNTERSIGN_DEMO_REQUIRE_SIGNATURE


urlpatterns = [
    path(f"{name}/", agent_view(agent, signing_secret=signing_secret_of(name), require_signature=require_signature),
         name=f"demo-{name}")
    for name, agent in demo_agents().items()
]
