"""Adding, editing and deleting a policy; the policies are listed on the registry page (``agents``)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..conf import SIMULATION_DAYS
from ..hub import policies
from ..hub.refusals import Refusal
from ..models import Policy
from ..reads import simulation
from .forms import PolicyForm


@staff_member_required
def policy_edit(request, pk: int | None = None):
    policy = get_object_or_404(Policy, pk=pk) if pk else None
    form = PolicyForm(request.POST or None, instance=policy)
    if request.method == "POST" and form.is_valid():
        try:
            saved = policies.save(form.save(commit=False), groups=form.cleaned_data["groups"],
                                  users=form.cleaned_data["users"], by=request.user)
        except Refusal as refused:
            form.add_error("auto_approve", refused.message)
        else:
            messages.success(request, f"Saved policy {saved.name}.")
            return redirect("agents")
    return render(request, "interrupts/policy_form.html", {"form": form, "policy": policy})


@staff_member_required
@require_POST
def policy_preview(request, pk: int | None = None):
    """What the policy as the form now says would have done to the last days' requests (htmx: the fragment)."""
    policy = get_object_or_404(Policy, pk=pk) if pk else None
    form = PolicyForm(request.POST, instance=policy)
    if not form.is_valid():
        # Said beside the button (htmx swaps only what answers 2xx); saving says it at each field.
        return render(request, "interrupts/_policy_simulation.html", {"errors": form.errors})
    sim = simulation.policy(form.instance, SIMULATION_DAYS)
    return render(request, "interrupts/_policy_simulation.html", {"sim": sim, "proposed": form.instance})


@staff_member_required
@require_POST
def policy_delete(request, pk: int):
    policy = get_object_or_404(Policy, pk=pk)
    policies.delete(policy)
    messages.success(request, f"Deleted policy {policy.name}; its interrupts now follow the next most specific one.")
    return redirect("agents")
