"""A reviewer's passkeys (add, list, remove), and the options a card's passkey signs an approval with."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from ..hub import decisions, passkeys, refusals
from ..hub.refusals import Refusal
from ..models import Interrupt, Passkey
from ..rules import eligibility
from .forms import DecideForm


def passkey_list(request):
    """GET: your passkeys. POST (from the page's script): keep the one the browser just made."""
    if request.method == "POST":
        try:
            made = passkeys.register(request, request.POST.get("credential", ""), request.POST.get("name", ""))
            messages.success(request, f"Added the passkey {made.name}.")
        except Refusal as refused:
            messages.error(request, refused.message)
        return redirect("passkeys")
    return render(request, "interrupts/passkeys.html", {"keys": request.user.passkeys.all()})


@require_POST
def registration_options(request):
    try:
        options = passkeys.registration_options(request, request.POST.get("password", ""))
    except Refusal as refused:
        return refusals.json_response(refusals.render(refused))
    return HttpResponse(options, content_type="application/json")


@require_POST
def passkey_remove(request, pk: int):
    key = get_object_or_404(Passkey, pk=pk, user=request.user)
    key.delete()
    messages.success(request, f"Removed the passkey {key.name}: it approves nothing from now on.")
    return redirect("passkeys")


@require_POST
def approval_options(request, pk: int):
    """The options for your passkey to sign the answer the card's form holds now (its script asks, then signs)."""
    interrupt = get_object_or_404(Interrupt.objects.select_related("run__thread", "run__agent"), pk=pk)
    form = DecideForm(request.POST)
    if not form.is_valid():
        return refusals.json_response(refusals.refused(400, "INVALID_FORM", "Fix the answer first."))
    data = form.cleaned_data
    try:
        answer = decisions.answer_for(interrupt, data["action"], payload=data["payload"],
                                      edited_args=data["edited_args"])
        signs = decisions.answer_to_sign(interrupt, request.user, answer)
        options = passkeys.assertion_options(request, interrupt, *signs, eligibility.rule_for(interrupt))
    except Refusal as refused:
        return refusals.json_response(refusals.render(refused))
    return HttpResponse(options, content_type="application/json")
