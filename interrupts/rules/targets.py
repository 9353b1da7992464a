"""Where an interrupt stands against its policy's target time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..conf import SLA_AT_RISK_FRACTION
from ..models import Interrupt
from .eligibility import Rule


@dataclass(frozen=True)
class Target:
    """Where an interrupt stands against its policy's target time (``Policy.target_minutes``)."""

    due_at: datetime
    # "on_track", "at_risk" (past SLA_AT_RISK_FRACTION of the target) or "breached".
    state: str


def target(interrupt: Interrupt, rule: Rule, now: datetime) -> Target | None:
    """The interrupt's target under ``rule``, or None when the policy sets no target time."""
    if not rule.target_minutes:
        return None
    allowed = timedelta(minutes=rule.target_minutes)
    due = interrupt.created_at + allowed
    if now >= due:
        state = "breached"
    elif now >= interrupt.created_at + allowed * SLA_AT_RISK_FRACTION:
        state = "at_risk"
    else:
        state = "on_track"
    return Target(due, state)
