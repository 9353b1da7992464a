"""Pages for notifications: staff register webhooks and watch every delivery; each person picks how they get email."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from ..conf import DELIVERIES_PAGE_SIZE
from ..hub.notify import email as notify_email
from ..hub.notify import webhooks as notify_webhooks
from ..models import Delivery, EmailChoice, NotifyEvent, Webhook


class WebhookForm(forms.ModelForm):
    events = forms.MultipleChoiceField(choices=NotifyEvent.choices, widget=forms.CheckboxSelectMultiple,
                                       initial=list(NotifyEvent.values), label="Events",
                                       help_text="Which events it is sent.")

    class Meta:
        model = Webhook
        fields = ["name", "url", "group", "policy", "events", "active"]
        labels = {"name": "Name", "url": "URL", "group": "Team", "policy": "Policy", "active": "Active"}
        help_texts = {"name": "How the deliveries page names it.",
                      "active": "Unticked, no new event is sent to it; its deliveries so far stay listed."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.label_suffix = ""  # "URL", not "URL:"
        # An empty scope says what it means, not "---------".
        self.fields["group"].empty_label = "Any team"
        self.fields["policy"].empty_label = "Any policy"


class OnlyReachableChoices(forms.RadioSelect):
    """Radio buttons with those the person cannot receive on shown, but disabled."""

    def __init__(self, *args, unreachable=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.unreachable = set(unreachable)

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        if value in self.unreachable:
            option["attrs"]["disabled"] = True
        return option


class PreferenceForm(forms.Form):
    email = forms.ChoiceField(choices=EmailChoice.choices, label="Email me about requests I may decide")

    def __init__(self, data=None, *, user):
        # Without an address, email cannot reach them: "No email" is what they get, and what shows.
        self.reachable = bool(user.email)
        unreachable = () if self.reachable else (EmailChoice.IMMEDIATE, EmailChoice.DIGEST)
        chosen = notify_email.email_choice(user) if self.reachable else EmailChoice.NONE
        super().__init__(data, initial={"email": chosen})
        self.fields["email"].widget = OnlyReachableChoices(choices=EmailChoice.choices, unreachable=unreachable)
        self.label_suffix = ""

    def clean_email(self):
        choice = self.cleaned_data["email"]
        if not self.reachable and choice != EmailChoice.NONE:
            raise forms.ValidationError("Your account has no email address, so no email can reach you. "
                                        "Ask an admin to add one first.")
        return choice


@staff_member_required
def webhooks(request):
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        hook = form.save()
        # Rendered, not redirected with a message: a secret in the session would outlive this page.
        response = render(request, "interrupts/webhook_secret.html", {"webhook": hook})
        response["Cache-Control"] = "no-store"
        return response
    listed = Webhook.objects.select_related("group", "policy").order_by("name")
    return render(request, "interrupts/webhooks.html", {"webhooks": listed, "form": form})


@staff_member_required
def deliveries(request):
    rows = Delivery.objects.select_related("webhook").order_by("-created_at", "-pk")
    webhook = request.GET.get("webhook", "")
    state = request.GET.get("status", "")
    if webhook:
        rows = rows.filter(webhook__name=webhook)
    if state in Delivery.Status.values:
        rows = rows.filter(status=state)
    page = Paginator(rows, DELIVERIES_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "interrupts/deliveries.html", {
        "page": page, "webhook": webhook, "state": state, "statuses": Delivery.Status.choices,
        "webhooks": Webhook.objects.order_by("name").values_list("name", flat=True),
    })


@staff_member_required
@require_POST
def resend(request, pk: int):
    delivery = get_object_or_404(Delivery, pk=pk)
    if notify_webhooks.resend(delivery, request.user):
        messages.success(request, f"Delivery {delivery.pk} ({delivery.key}) is queued again, due now.")
    else:
        messages.warning(request, f"Delivery {delivery.pk} is being sent right now: look again in a moment.")
    return redirect(reverse("deliveries") + f"?webhook={delivery.webhook.name}")


@login_required
def preferences(request):
    form = PreferenceForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        notify_email.choose_email(request.user, form.cleaned_data["email"])
        messages.success(request, "Saved how you get email.")
        return redirect("notification-settings")
    return render(request, "interrupts/notification_settings.html", {"form": form, "email": request.user.email})
