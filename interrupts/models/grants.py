"""Standing grants: a reviewer's "approve calls like this" for a while, with who, why, scope and uses."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from .agents import Agent
from .transitions import GrantQuerySet


class Grant(models.Model):
    """Approves an agent's calls of one tool whose args fit ``args_schema``, until ``expires_at`` or ``max_uses``.

    Each call it approves is a decision in its author's name that names the
    grant (``Decision.grant``): it counts as one approval at most, never
    under a policy that always asks, and only while its author may decide.
    """

    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="grants")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="grants")
    tool_name = models.CharField(max_length=200)
    # A JSON Schema the call's args must fit: the card builds it from the call it was made on,
    # each field held to its value unless the reviewer loosened it.
    args_schema = models.JSONField(default=dict)
    why = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    # The card it was made on, if any.
    source = models.ForeignKey("Interrupt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = GrantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["agent", "tool_name"], name="grant_scope",
                                condition=Q(revoked_at__isnull=True))]
        constraints = [
            models.CheckConstraint(condition=Q(max_uses__isnull=True) | Q(uses__lte=models.F("max_uses")),
                                   name="grant_uses_within_max"),
        ]

    def __str__(self) -> str:
        return f"grant {self.pk} ({self.tool_name} on {self.agent_id})"

    def usable_at(self, now) -> bool:
        return (self.revoked_at is None and now < self.expires_at
                and (self.max_uses is None or self.uses < self.max_uses))
