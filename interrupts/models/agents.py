"""Agents: the AG-UI endpoints Countersign calls, and the secrets it keeps for them."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from django.conf import settings
from django.core.validators import RegexValidator, URLValidator
from django.db import models

from ..conf import MAX_CREDENTIAL_CHARS
from ..protocol import dialects

DIALECT_CHOICES = [(name, dialect.label) for name, dialect in dialects.DIALECTS.items()]


def masked(secret: str) -> str:
    """A secret as people may see it: its last four characters, and only when it is long enough to spare them."""
    if not secret:
        return ""
    tail = secret[-4:] if len(secret) >= 12 else ""
    return f"••••{tail}"


def new_signing_secret() -> str:
    """A fresh secret for signing what Countersign sends an agent (HMAC-SHA256 key, 256 bits)."""
    return "css_" + secrets.token_urlsafe(32)


def _origin(url: str) -> tuple:
    """(scheme, host, port) of ``url``, the default port filled in: what a credential is bound to."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a port at all: an origin of its own, equal only to the same text
        return (parts.scheme.lower(), parts.netloc.lower(), None)
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme))


class Agent(models.Model):
    """A registered AG-UI endpoint that Countersign calls.

    ``save()`` drops a stored credential when the URL moves to another origin
    and the credential was not given again (docs/internals/models.md): the
    rule lives here so the form, the admin, the API and ``manage.py agents`` obey it.
    """

    CREDENTIAL_DROPPED = (
        "Credential dropped: the URL moved to another origin (scheme, host or port), "
        "and a credential is never sent anywhere but where it was given for; give it again."
    )

    name = models.SlugField(
        max_length=64,
        unique=True,
        help_text="Short name used in URLs and on the command line, e.g. 'mailer'.",
    )
    url = models.URLField(
        max_length=2000,
        # URLField alone also takes ftp(s): Countersign speaks HTTP only. A code
        # of its own, or a ModelForm shows its generic "Enter a valid URL.".
        validators=[URLValidator(schemes=["http", "https"], message="Give an http:// or https:// URL.",
                                 code="invalid_scheme")],
        help_text="Where RunAgentInput is POSTed (http or https).",
    )
    description = models.TextField(blank=True)
    auth_header = models.CharField(
        max_length=100,
        blank=True,
        validators=[
            RegexValidator(
                # "+", not "*": blank is allowed by blank=True, and the OpenAPI
                # schema then has one way, not two, to match an empty name.
                r"^[A-Za-z0-9-]+$", "A header name holds letters, digits and dashes only."
            )
        ],
        help_text="Name of the header carrying the agent's credential, e.g. 'Authorization'.",
    )
    # Stored server-side and sent only to the agent; never rendered back in full.
    auth_value = models.CharField(max_length=MAX_CREDENTIAL_CHARS, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)
    # The key of every Countersign-Signature sent to this agent. Shown once,
    # when generated (registration, rotation); the agent keeps its own copy.
    signing_secret = models.CharField(max_length=100, default=new_signing_secret, editable=False)
    builtin = models.BooleanField(
        default=False, help_text="One of the demo agents Countersign serves itself."
    )
    # How the agent raises and takes interrupts (protocol.dialects): the AG-UI
    # contract itself, or a framework's older form of it.
    dialect = models.CharField(
        max_length=32, choices=DIALECT_CHOICES, default=dialects.AGUI,
        help_text="How the agent raises interrupts: AG-UI's interrupt outcome (the default), or LangGraph's "
                  "on_interrupt event (ag-ui-langgraph without emit_interrupt_outcome).",
    )
    # How its last paused run paused (protocol.dialects.pause_kind), set when a run
    # of it is interrupted: the default dialect answers a LangGraph pause that way.
    paused_as = models.CharField(max_length=32, blank=True, default="", editable=False)
    # The protocolVersion its last RUN_STARTED declared (protocol.versioning): "" declared
    # nothing, a peer from before versioning (AG-UI 1.0 C65); None, never heard from.
    protocol_version = models.CharField(max_length=40, null=True, blank=True)  # noqa: DJ001  (None ≠ "": see above)
    created_at = models.DateTimeField(auto_now_add=True)

    # Set by a caller that takes a credential from the user in this change
    # (even the same text again): it then stays when the URL moves.
    credential_given = False
    # Set by save(): the stored credential was dropped, and the user must be told.
    credential_dropped = False

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        self.credential_dropped = False
        if self.pk is not None and self.auth_value and not self.credential_given:
            stored = Agent.objects.filter(pk=self.pk).values_list("url", "auth_value").first()
            if stored and stored[1] == self.auth_value and _origin(stored[0]) != _origin(self.url):
                self.auth_value = ""
                self.credential_dropped = True
                if kwargs.get("update_fields") is not None:
                    kwargs["update_fields"] = {*kwargs["update_fields"], "auth_value"}
        super().save(*args, **kwargs)
        self.credential_given = False

    @property
    def endpoint(self) -> str:
        """Where this process POSTs RunAgentInput: its own URL for a built-in agent."""
        # Every process serves the demo agents; the stored URL names whichever
        # registered them last, which may since have stopped.
        if self.builtin:
            return f"{settings.COUNTERSIGN_SELF_URL.rstrip('/')}/agents/{self.name}/"
        return self.url

    @property
    def masked_auth_value(self) -> str:
        """The credential as people may see it: its last four characters at most."""
        return masked(self.auth_value)

    def rotate_signing_secret(self) -> str:
        """Replace the signing secret and return the new one, the only time it is shown."""
        self.signing_secret = new_signing_secret()
        self.save(update_fields=["signing_secret"])
        return self.signing_secret
