"""The registry page: agents and the policies in force, and registering or editing an agent."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..hub import agents as hub_agents
from ..models import Agent
from ..reads import selectors
from .forms import AgentForm


def agents(request):
    return render(request, "interrupts/agents.html", {
        "agents": selectors.agents_overview(),
        "policies": selectors.policies_overview(),  # with their agents, to name them
    })


def _secret_shown_once(request, agent: Agent, secret: str, *, rotated: bool):
    # Rendered, not redirected with a message: a secret in the session or a
    # cookie would outlive this one page.
    response = render(request, "interrupts/agent_secret.html", {"agent": agent, "secret": secret, "rotated": rotated})
    response["Cache-Control"] = "no-store"
    return response


@staff_member_required
def agent_edit(request, name: str | None = None):
    agent = get_object_or_404(Agent, name=name) if name else None
    form = AgentForm(request.POST or None, instance=agent)
    if request.method == "POST" and form.is_valid():
        saved = hub_agents.save(form.save(commit=False))
        messages.success(request, f"Saved agent {saved.name}.")
        for notice in form.notices:  # e.g. the credential was dropped: the URL moved to another origin
            messages.warning(request, notice)
        if agent is None:  # registered just now: its signing secret is shown this once
            return _secret_shown_once(request, saved, saved.signing_secret, rotated=False)
        return redirect("agents")
    return render(request, "interrupts/agent_form.html", {"form": form, "agent": agent})


@staff_member_required
@require_POST
def agent_rotate_secret(request, name: str):
    """Rotate an agent's signing secret and show the new one, once; the old one stops verifying at once."""
    agent = get_object_or_404(Agent, name=name)
    return _secret_shown_once(request, agent, hub_agents.rotate_signing_secret(agent), rotated=True)
