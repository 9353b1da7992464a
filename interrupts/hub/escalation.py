"""Escalation: a request that missed its policy's target time goes to the policy's backup group too.

The supervisor's sweep (``escalate_due``) finds pending interrupts past
their target (``Policy.target_minutes`` from when they were raised) whose
policy names a ``backup_group``, and escalates each once: the backup group,
as it is named then, may decide it from now on besides the policy's own
people (``policies.refusal``, ``eligibility.eligible``), its members are told
(``notify.escalated``), the card says so, and the trail has an
``interrupt.escalated`` entry. With several processes sweeping at once, a
conditional UPDATE decides which one escalates it: it is told and recorded
once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from ..conf import settings
from ..live import relay
from ..models import Interrupt, Policy
from .notify import enqueue
from .trail import chain

ESCALATED = "interrupt.escalated"

# Interrupts one sweep escalates at most; the next round takes the rest.
SWEEP_CHUNK = 500


def escalate_due(now: datetime | None = None) -> int:
    """Escalate every pending interrupt past its target whose policy has a backup group; returns how many."""
    now = now or timezone.now()
    escalated = 0
    for policy in Policy.objects.filter(target_minutes__isnull=False, backup_group__isnull=False).select_related(
            "backup_group"):
        due = (Interrupt.objects.filter(policy=policy, status=Interrupt.Status.PENDING, escalated_at__isnull=True,
                                        created_at__lte=now - timedelta(minutes=policy.target_minutes))
               .select_related("run__thread", "run__agent")[:SWEEP_CHUNK])
        for interrupt in due:
            if _escalate(interrupt, policy, now):
                escalated += 1
    return escalated


def _escalate(interrupt: Interrupt, policy: Policy, now: datetime) -> bool:
    group = policy.backup_group
    with transaction.atomic(durable=True):
        if not Interrupt.objects.filter(pk=interrupt.pk, status=Interrupt.Status.PENDING,
                                        escalated_at__isnull=True).update(escalated_at=now, escalated_to=group):
            return False  # decided, or escalated by another process, meanwhile
        interrupt.escalated_at, interrupt.escalated_to = now, group
        chain.record(ESCALATED, {
            "interrupt": interrupt.pk, "interruptId": interrupt.interrupt_id, "run": interrupt.run.run_id,
            "policy": policy.pk, "policyName": policy.name, "targetMinutes": policy.target_minutes,
            "dueAt": (interrupt.created_at + timedelta(minutes=policy.target_minutes)).isoformat(),
            "groupId": group.pk, "group": group.name,
        }, subject=f"interrupt:{interrupt.pk}", interrupt=interrupt)
        enqueue.escalated(interrupt)
        relay.inbox_changed(interrupt.run.thread_id, interrupt.run.thread.last_seq, relay.Reason.ESCALATED)
    return True


def warn_expiring(now: datetime | None = None) -> int:
    """Warn, once, the people who may decide each pending interrupt whose expiresAt is near; returns how many.

    Near: within COUNTERSIGN_EXPIRY_WARNING_SECONDS. Under a policy that escalates on
    expiry, the interrupt escalates to its backup group then too (told as an escalation).
    """
    lead = settings.COUNTERSIGN_EXPIRY_WARNING_SECONDS
    if not lead or lead <= 0:
        return 0
    now = now or timezone.now()
    due = (Interrupt.objects.filter(status=Interrupt.Status.PENDING, expiry_warned_at__isnull=True,
                                    expires_at__gt=now, expires_at__lte=now + timedelta(seconds=lead))
           .select_related("run__thread", "run__agent", "policy__backup_group").order_by("expires_at")[:SWEEP_CHUNK])
    warned = 0
    for interrupt in due:
        with transaction.atomic(durable=True):
            if not Interrupt.objects.filter(pk=interrupt.pk, status=Interrupt.Status.PENDING,
                                            expiry_warned_at__isnull=True).update(expiry_warned_at=now):
                continue  # decided, or warned by another process, meanwhile
            enqueue.expiring(interrupt)
            warned += 1
        policy = interrupt.policy
        if (policy is not None and policy.on_expiry == Policy.OnExpiry.ESCALATE and policy.backup_group_id
                and interrupt.escalated_at is None):
            _escalate(interrupt, policy, now)
    return warned
