"""Policies: who may decide which interrupts, how many must approve, and how fast."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from ..conf import MAX_REQUIRED_APPROVALS
from ..protocol.errors import ProtocolError
from ..protocol.schema.payloads import payload_errors
from .agents import Agent


class Policy(models.Model):
    """Who may decide an agent's interrupts, how many must approve, and how fast.

    The most specific policy for an interrupt wins (``specificity``); with none,
    the site default applies. Scope and defaults: docs/internals/models.md.
    """

    # Named in URLs (/api/policies/<name>/): no slash, and not a path step ("." or "..") clients drop.
    name = models.CharField(max_length=100, unique=True,
                            validators=[RegexValidator(r"^(?!\.{1,2}$)[^/]+$",
                                                       "A policy name holds no slash and is not '.' or '..'.")])
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="policies",
        help_text="The agent whose interrupts this governs; empty for every agent.",
    )
    reason = models.CharField(max_length=200, blank=True, help_text="Only interrupts with this reason; empty for any.")
    tool_name = models.CharField(max_length=200, blank=True,
                                 help_text="Only interrupts about this tool; empty for any.")
    groups = models.ManyToManyField(Group, blank=True, related_name="+",
                                    help_text="Groups whose members may decide; with no groups and no users, "
                                              "everyone allowed to decide interrupts.")
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+",
                                   help_text="People who may decide, besides the groups' members.")
    # Whether groups or users were named, kept apart from the names themselves:
    # deleting the one group a policy names must leave it admitting nobody,
    # not everyone (``policies.members_changed`` keeps it in step).
    restricted = models.BooleanField(default=False, editable=False)
    required_approvals = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_REQUIRED_APPROVALS)],
        help_text="How many distinct eligible people must approve; one rejection or cancel ends it.",
    )
    allow_self_approval = models.BooleanField(
        default=False, help_text="Whether the person who started the run may decide its interrupts.",
    )
    class OnExpiry(models.TextChoices):
        CANCEL = "cancel", "Cancelled as expired"
        ESCALATE = "escalate", "Escalated to the backup group when the warning goes, then cancelled as expired"

    # Blank (a form or script that leaves it out) means the default, as ``clean`` says.
    on_expiry = models.CharField(
        max_length=16, choices=OnExpiry.choices, default=OnExpiry.CANCEL, blank=True,
        help_text="What an interrupt's expiresAt passing unanswered does: the agent is told it was cancelled as "
                  "expired, never refused; or the request escalates first, when reviewers are warned.",
    )
    always_ask = models.BooleanField(
        default=False, help_text="Every call asks a person: no standing grant approves these interrupts.",
    )
    # The "auto-approve when" tier, as data: calls this policy governs whose args fit the schema are
    # approved without asking, in the name of the person who set the rule (``auto_approve_by``).
    auto_approve = models.BooleanField(
        default=False, help_text="Approve without asking the calls this policy governs whose args match "
                                 "auto_approve_args, in the name of the person who set it.",
    )
    auto_approve_args = models.JSONField(
        default=dict, blank=True, help_text="A JSON Schema the call's args must match to be approved without "
                                            "asking; {} matches any args.",
    )
    # Who turned the rule on or last changed it: the person accountable for each approval it makes.
    auto_approve_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, editable=False,
                                        on_delete=models.PROTECT, related_name="+")
    require_passkey = models.BooleanField(
        default=False, help_text="Approving takes the reviewer's passkey, signing the exact approval: a session "
                                 "alone (a stolen one too) cannot approve these requests.",
    )
    require_look = models.BooleanField(
        default=False, help_text="On a card whose args are long, Approve waits until the reviewer has opened "
                                 "the full args.",
    )
    target_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="How soon a decision is expected, in minutes.",
    )
    backup_group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="When the target time passes undecided, this group may decide too, and is told.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "policies"
        constraints = [
            # Two policies for exactly the same interrupts would leave "the
            # most specific one" undefined. Two constraints, because NULL
            # agents are distinct from each other in a plain unique index.
            models.UniqueConstraint(fields=["agent", "reason", "tool_name"], condition=Q(agent__isnull=False),
                                    name="policy_scope_unique_per_agent",
                                    violation_error_message="A policy already applies to this agent, reason "
                                                            "and tool name: edit that one instead."),
            models.UniqueConstraint(fields=["reason", "tool_name"], condition=Q(agent__isnull=True),
                                    name="policy_scope_unique_for_every_agent",
                                    violation_error_message="A policy for every agent already applies to this "
                                                            "reason and tool name: edit that one instead."),
            models.CheckConstraint(
                condition=Q(required_approvals__gte=1, required_approvals__lte=MAX_REQUIRED_APPROVALS),
                name="policy_required_approvals_in_range",
            ),
        ]

    BACKUP_NEEDS_TARGET = "A backup group takes over when the target time passes: set the target minutes too."

    def __str__(self) -> str:
        return self.name

    ESCALATE_NEEDS_BACKUP = "Escalating before expiry needs a backup group to escalate to."
    AUTO_AND_ALWAYS_ASK = ("A policy that always asks a person (or their passkey) cannot also approve "
                           "automatically: choose one.")
    AUTO_AND_QUORUM = ("Approving automatically is one approval: a policy needing more cannot also "
                       "approve automatically.")

    def clean(self):
        self.on_expiry = self.on_expiry or self.OnExpiry.CANCEL
        if self.backup_group_id is not None and not self.target_minutes:
            raise ValidationError({"backup_group": self.BACKUP_NEEDS_TARGET})
        if self.on_expiry == self.OnExpiry.ESCALATE and self.backup_group_id is None:
            raise ValidationError({"on_expiry": self.ESCALATE_NEEDS_BACKUP})
        problem = self.auto_approve_problem(self.auto_approve, self.auto_approve_args,
                                            self.always_ask or self.require_passkey, self.required_approvals)
        if problem is not None:
            raise ValidationError(dict([problem]))

    @classmethod
    def auto_approve_problem(cls, auto_approve: bool, args_schema, always_ask: bool,
                             required_approvals: int) -> tuple[str, str] | None:
        """The field and why this "auto-approve when" tier cannot be saved, or None (the form and the API ask)."""
        if not auto_approve:
            return None
        if always_ask:
            return "auto_approve", cls.AUTO_AND_ALWAYS_ASK
        if (required_approvals or 1) > 1:
            return "auto_approve", cls.AUTO_AND_QUORUM
        if not isinstance(args_schema, dict):
            return "auto_approve_args", "The args to match must be a JSON Schema object ({} matches any args)."
        try:
            payload_errors(args_schema, {})  # checks the schema itself (size, patterns, metaschema)
        except ProtocolError as problem:
            return "auto_approve_args", f"The args to match are not a usable JSON Schema: {problem.message}"
        return None

    @property
    def specificity(self) -> tuple[bool, bool, bool]:
        """How narrowly this policy applies, compared in order: names a tool, names the agent, names a reason.

        The tool first: it is what acts, and an agent, which chooses its own
        reason (and could be given a lax policy on one), must never escape a
        policy on the tool it calls.
        """
        return (bool(self.tool_name), self.agent_id is not None, bool(self.reason))
