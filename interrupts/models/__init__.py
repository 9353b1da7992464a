"""What Countersign stores, one module per family; every model is imported here for Django's registry.

Invariants the audit trail needs are held by the database, not only by
Python: an event's per-thread sequence number is unique and an event row
never changes; an interrupt id is unique within its run; a decision row never
changes (beyond being superseded once), and each reviewer has at most one live
decision per interrupt (``one_live_decision_per_reviewer``: under a policy
requiring N approvals an interrupt gathers up to N, one per person). The
triggers that forbid changing history are in migration 0002 (events,
decisions) and 0011 (the audit chain). More in docs/internals/models.md.
"""

from .agents import DIALECT_CHOICES, Agent, masked, new_signing_secret
from .audit import AUDIT_GENESIS, AuditCheckpoint, AuditEntry
from .fields import ExactJSONField
from .grants import Grant
from .interrupts import Decision, DecisionStatus, Interrupt, InterruptStatus, Presence
from .notifications import (
    DecisionLink,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    EmailChoice,
    EmailNotice,
    NotificationPreference,
    NotifyEvent,
    Webhook,
    every_notify_event,
)
from .passkeys import Passkey
from .policies import Policy
from .threads import Event, Run, RunStatus, Settlement, Thread, under
from .tokens import APIToken

__all__ = [
    "AUDIT_GENESIS", "APIToken", "Agent", "AuditCheckpoint", "AuditEntry", "DIALECT_CHOICES", "Decision",
    "DecisionLink",
    "DecisionStatus", "Delivery", "DeliveryAttempt", "DeliveryStatus", "EmailChoice", "EmailNotice", "Event",
    "ExactJSONField", "Grant", "Interrupt", "InterruptStatus", "NotificationPreference", "NotifyEvent", "Passkey",
    "Policy",
    "Presence", "Run", "RunStatus", "Settlement", "Thread", "Webhook", "every_notify_event", "masked",
    "new_signing_secret", "under",
]
