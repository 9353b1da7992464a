"""/agents/<name>/: each demo agent as a real AG-UI endpoint of this app."""

from django.urls import path

from ..sdk.views import agent_view
from . import demo_agents

urlpatterns = [
    path(f"{name}/", agent_view(agent), name=f"demo-{name}") for name, agent in demo_agents().items()
]
