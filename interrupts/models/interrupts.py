"""Interrupts, the decisions people take on them, and who has one open right now."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q

from .agents import Agent
from .threads import Run
from .transitions import DecisionQuerySet, InterruptQuerySet


class InterruptStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RESOLVED = "resolved", "Resolved"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


class Interrupt(models.Model):
    """One item of a run's interrupt outcome, and where it stands."""

    Status = InterruptStatus

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="interrupts")
    # The run's agent, kept beside it: the inbox's agent filter then reads one index, not every run's row.
    run_agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    interrupt_id = models.CharField(max_length=200)
    reason = models.CharField(max_length=200)
    message = models.TextField(blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    # Reassembled from the run's TOOL_CALL_START/ARGS when toolCallId is set:
    # what the agent proposed, the first column of the audit trail.
    tool_name = models.CharField(max_length=200, blank=True)
    proposed_args = models.JSONField(null=True, blank=True)
    response_schema = models.JSONField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # When the reviewers who may decide it were warned its expiry is near (COUNTERSIGN_EXPIRY_WARNING_SECONDS).
    expiry_warned_at = models.DateTimeField(null=True, blank=True)
    metadata = models.JSONField(null=True, blank=True)
    # The interrupt exactly as the agent sent it, and what was wrong with it
    # (e.g. an unparsable expiresAt), so nothing the agent said is lost.
    raw = models.JSONField()
    problems = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Bumped on every change of status or draft answer: conditional updates on
    # (pk, version) decide races between reviewers on any database.
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Why it closed without a decision of its own (expiry, a sibling's expiry).
    closed_reason = models.CharField(max_length=300, blank=True)
    # The policy that governs it (null: the site default), resolved when it is
    # raised and again whenever policies change: what the inbox's "waiting for
    # me" filters on. Deciding resolves it afresh (``eligibility.rule_for``).
    policy = models.ForeignKey("Policy", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Who said "I am reviewing this" (``claims``): held while renewed within
    # COUNTERSIGN_CLAIM_IDLE_SECONDS, then it lapses. A claim bars nobody; a
    # colleague deciding a claimed card is asked to confirm first.
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_renewed_at = models.DateTimeField(null=True, blank=True)
    # Its policy's target time passed undecided (``escalation``): the policy's
    # backup group, as it was then, may decide it too and was told.
    escalated_at = models.DateTimeField(null=True, blank=True)
    escalated_to = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The standing decision whose answer has not reached its reviewer yet (``decisions.acknowledge``):
    # the batch's resume waits for it, and a process that died before replying leaves it to be dropped.
    unacknowledged = models.ForeignKey("Decision", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+")

    objects = InterruptQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "interrupt_id"], name="interrupt_id_unique_per_run"
            ),
            models.CheckConstraint(
                condition=Q(status__in=InterruptStatus.values), name="interrupt_status_valid"
            ),
        ]
        permissions = [("decide_interrupt", "Can approve, reject, answer or cancel interrupts")]
        indexes = [
            # The inbox's order, and what "waiting for me" filters on: a deep page
            # or the badge's count reads this index alone (no table rows).
            models.Index(fields=["status", "created_at", "id", "policy", "run"], name="interrupt_inbox"),
            # The inbox's reason filter and its list of reasons (DISTINCT) read this index alone.
            models.Index(fields=["status", "reason"], name="interrupt_status_reason"),
            # The agent filter, counted and paged in the inbox's order (with the reason filter, or
            # "waiting for me"), from this index alone: 20,000 of 100,000 walked through runs took ~20 ms.
            models.Index(fields=["status", "run_agent", "reason", "created_at", "id", "policy", "run"],
                         name="interrupt_inbox_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.interrupt_id} ({self.reason})"


class DecisionStatus(models.TextChoices):
    RESOLVED = "resolved", "Resolved"
    CANCELLED = "cancelled", "Cancelled"


class Decision(models.Model):
    """Who answered an interrupt, how and when. Never changed but for being superseded once.

    A revision is a new row and supersedes the old one, so the trail keeps every
    answer. One live decision per reviewer (``one_live_decision_per_reviewer``):
    under a policy requiring N approvals an interrupt gathers up to N.
    """

    Status = DecisionStatus

    interrupt = models.ForeignKey(Interrupt, on_delete=models.PROTECT, related_name="decisions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="decisions"
    )
    status = models.CharField(max_length=16, choices=Status.choices)
    payload = models.JSONField(null=True, blank=True)
    # The tool args that will run when the payload carries editedArgs: a full
    # replacement of the proposal, kept apart so the audit can diff them.
    edited_args = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True)
    # What the reviewer did (approve, edit, respond, reject, cancel), and the
    # policy that made them eligible, as it was then: the resume's attestation.
    action = models.CharField(max_length=16, blank=True)
    policy = models.CharField(max_length=100, blank=True)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    # The standing grant that took this decision in its author's name (``user``), if a person did not.
    grant = models.ForeignKey("Grant", null=True, blank=True, on_delete=models.PROTECT, related_name="decisions")
    # Taken by the "auto-approve when" rule of ``policy``, in the name of who set it (``user``).
    by_policy = models.BooleanField(default=False)
    # What the reviewer's page reported they had in view (``rules.looked``): the card's parts
    # opened, seconds open, the digest of what it showed. None: no script reported it.
    looked = models.JSONField(null=True, blank=True)
    # The WebAuthn assertion that countersigned this approval, where the policy asks for a passkey
    # (``hub.passkeys``): what an agent needs to check it, carried in the resume's attestation.
    passkey = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    superseded_at = models.DateTimeField(null=True, blank=True)

    objects = DecisionQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["interrupt", "user"],
                condition=Q(superseded_at__isnull=True),
                name="one_live_decision_per_reviewer",
            ),
            models.CheckConstraint(
                condition=Q(status__in=DecisionStatus.values), name="decision_status_valid"
            ),
            # The contract: a cancelled answer carries no payload.
            models.CheckConstraint(
                condition=~Q(status="cancelled") | Q(payload__isnull=True),
                name="cancelled_decision_has_no_payload",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.interrupt.interrupt_id}: {self.status} by {self.user}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise ValueError("Decisions are immutable: write a new decision instead.")
        super().save(*args, **kwargs)


class Presence(models.Model):
    """Someone has a card open right now: one row per (socket, interrupt), renewed by the page.

    In the database, not in one process's memory: with several processes a
    reviewer's socket and their colleague's are rarely in the same one.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    interrupt = models.ForeignKey(Interrupt, on_delete=models.CASCADE, related_name="presences")
    socket = models.CharField(max_length=100, help_text="The channel name of the socket that said so.")
    seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["socket", "interrupt"], name="presence_unique_per_socket")]
        indexes = [models.Index(fields=["interrupt", "seen_at"], name="presence_interrupt_seen")]

    def __str__(self) -> str:
        return f"{self.socket} has interrupt #{self.interrupt_id} open"
