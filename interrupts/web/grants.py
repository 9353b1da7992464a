"""The standing grants: who granted what, until when, how much is used; revoked here at once."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from ..conf import MAX_GRANT_HELD, SIMULATION_DAYS
from ..hub import grants
from ..models import Grant, Interrupt
from ..protocol.errors import ProtocolError
from ..reads import selectors, simulation
from ..rules import eligibility
from .navigation import back_to


def grant_list(request):
    now, held = timezone.now(), eligibility.held_policies()
    rows = [{"grant": g, "usable": g.usable_at(now),
             "may_revoke": g.revoked_at is None and grants.may_revoke(request.user, g, held)}
            for g in selectors.grants_listed()]
    return render(request, "interrupts/grants.html", {"rows": rows, "now": now})


@require_POST
def grant_revoke(request, pk: int):
    grant = get_object_or_404(Grant.objects.select_related("agent", "author"), pk=pk)
    try:
        grants.revoke(grant, request.user)
        messages.success(request, f"Revoked the grant for {grant.tool_name} on {grant.agent.name}: its next call asks "
                                  "a person.")
    except ProtocolError as refused:
        messages.error(request, refused.message)
    return redirect(back_to(request, reverse("grants")))


@require_POST
def grant_preview(request, pk: int):
    """What the grant the card proposes would have done to the last days' calls (htmx: the fragment)."""
    interrupt = get_object_or_404(Interrupt.objects.select_related("run__agent"), pk=pk)
    try:
        schema = grants.check_scope(grants.scope_from(interrupt.proposed_args,
                                                      request.POST.getlist("grant_hold")[:MAX_GRANT_HELD]))
    except ProtocolError as refused:
        # Said in the card, where the button is (htmx swaps only what answers 2xx).
        return HttpResponse(format_html('<p class="error" role="alert">{}</p>', refused.message))
    sim = simulation.grant(interrupt.run.agent, interrupt.tool_name, schema, SIMULATION_DAYS)
    return render(request, "interrupts/_grant_simulation.html",
                  {"sim": sim, "agent": interrupt.run.agent.name, "tool": interrupt.tool_name})
