"""Notifications: webhooks and their deliveries, email preferences and notices."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import models
from django.db.models import Q

from .agents import new_signing_secret


class NotifyEvent(models.TextChoices):
    """What a webhook or an email can tell people about (``hub.notify``)."""

    RAISED = "raised", "Raised"
    DECIDED = "decided", "Decided"
    EXPIRING = "expiring", "Expiring soon"
    EXPIRED = "expired", "Expired"
    ESCALATED = "escalated", "Escalated"
    REFUSED = "refused", "Answer refused"


def every_notify_event() -> list[str]:
    return list(NotifyEvent.values)


class Webhook(models.Model):
    """Where Countersign POSTs a signed JSON body when something happens to a team's requests.

    Scoped by ``group`` and/or ``policy`` (neither: every interrupt); see
    docs/internals/models.md. The URL is checked on connect (``hub.egress``).
    """

    Event = NotifyEvent

    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(
        max_length=2000,
        validators=[URLValidator(schemes=["http", "https"], message="Give an http:// or https:// URL.",
                                 code="invalid_scheme")],
        help_text="Where each event is POSTed (http or https).",
    )
    # The key of every Countersign-Signature on this webhook's deliveries, as agents have theirs.
    secret = models.CharField(max_length=100, default=new_signing_secret, editable=False)
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                              help_text="Only interrupts whose policy names this team, or that escalated to it.")
    policy = models.ForeignKey("Policy", null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks",
                               help_text="Only this policy's interrupts.")
    events = models.JSONField(default=every_notify_event, help_text="Which events it is sent.")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        if not isinstance(self.events, list) or not self.events or \
                not set(self.events) <= set(NotifyEvent.values) or len(set(self.events)) != len(self.events):
            raise ValidationError({"events": f"Name one or more of: {', '.join(NotifyEvent.values)}."})

    def rotate_secret(self) -> str:
        """Replace the signing secret and return the new one, the only time it is shown."""
        self.secret = new_signing_secret()
        self.save(update_fields=["secret"])
        return self.secret


class DeliveryStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    SENDING = "sending", "Sending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """One event for one webhook: the exact body signed, and how sending it went.

    Queued in the transaction of the change it reports (``hub.notify``), at
    most once per (webhook, event key). Sent by one process at a time
    (``claimed_by`` under a lease); retried with backoff until delivered or
    out of attempts. A re-send queues the same body again.
    """

    Status = DeliveryStatus

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16, choices=NotifyEvent.choices)
    # What happened, once: "raised:interrupt:12". Sent as Countersign-Delivery, so a receiver can drop a repeat.
    key = models.CharField(max_length=200)
    interrupt = models.ForeignKey("Interrupt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The JSON text exactly as signed (ASCII: every character escaped), so a re-send is byte for byte the same.
    body = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True)
    last_error = models.TextField(blank=True)
    # A re-send someone asked for, told on the next try's record; its attempts count from resent_from.
    resent_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    resent_from = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["webhook", "key"], name="delivery_once_per_webhook_event"),
            models.CheckConstraint(condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"),
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]

    def __str__(self) -> str:
        return f"{self.webhook} {self.key}"


class DeliveryAttempt(models.Model):
    """One try of a delivery: what the receiver answered, or why nothing arrived; a re-send says who asked."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    response_status = models.PositiveIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True)
    error = models.TextField(blank=True)
    resent_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")

    class Meta:
        ordering = ["delivery", "pk"]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery #{self.delivery_id}"


class EmailChoice(models.TextChoices):
    IMMEDIATE = "immediate", "Each request as it arrives"
    DIGEST = "digest", "A digest"
    NONE = "none", "No email"


class NotificationPreference(models.Model):
    """How a person wants to hear of requests by email (no row: immediate)."""

    Email = EmailChoice

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="notification_preference")
    email = models.CharField(max_length=16, choices=EmailChoice.choices, default=EmailChoice.IMMEDIATE)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(email__in=EmailChoice.values),
                                              name="notification_email_valid")]

    def __str__(self) -> str:
        return f"email {self.email} for user #{self.user_id}"


class EmailNotice(models.Model):
    """One event one person is to be emailed about: at most once per (user, event key).

    Immediate notices go one email each; a person's digest notices share a
    ``due_at`` (the end of the digest period they arrived in) and go in one
    email. Sent under a lease; retried with backoff, then ``failed``.
    """

    Status = DeliveryStatus

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    event = models.CharField(max_length=16, choices=NotifyEvent.choices)
    interrupt = models.ForeignKey("Interrupt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The plain-text lines this notice contributes, written when queued (agent text bounded, never HTML).
    subject = models.CharField(max_length=200)
    text = models.TextField()
    digest = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.QUEUED)
    due_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="email_once_per_user_event"),
            models.CheckConstraint(condition=Q(status__in=DeliveryStatus.values), name="email_status_valid"),
        ]
        indexes = [models.Index(fields=["status", "due_at"], name="email_due")]

    def __str__(self) -> str:
        return self.subject


class DecisionLink(models.Model):
    """A link in an email: it opens one request's confirm page for its one reader, decides once, then expires.

    Only the digest of its token is kept (``hub.links``); it decides nothing
    when followed (a GET), only when its reader confirms on the page.
    """

    class Action(models.TextChoices):
        APPROVE = "approve", "Approve"
        REJECT = "reject", "Reject"
        OPEN = "open", "Open the request"

    digest = models.CharField(max_length=128, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    interrupt = models.ForeignKey("Interrupt", on_delete=models.CASCADE, related_name="+")
    action = models.CharField(max_length=16, choices=Action.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.action} link for {self.user_id} on {self.interrupt_id}"
