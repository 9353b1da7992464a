"""Reviewers' passkeys: WebAuthn credentials that countersign approvals where a policy asks for one."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Passkey(models.Model):
    """One reviewer's registered WebAuthn credential (``hub.passkeys``): its id, public key and counter."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passkeys")
    name = models.CharField(max_length=100)
    # base64url, as WebAuthn spells them.
    credential_id = models.CharField(max_length=1400, unique=True)
    public_key = models.TextField()  # the COSE key
    sign_count = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.user_id})"
