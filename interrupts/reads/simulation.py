"""What a proposed grant would have done: the stored history of an agent's calls of a tool, replayed against it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Prefetch
from django.utils import timezone

from ..conf import SIMULATION_MAX_CALLS, SIMULATION_SHOWN
from ..models import Agent, Decision, Interrupt
from ..rules import grant_scope
from ..rules.words import decider, outcome_words
from .history import request_label


@dataclass
class Replayed:
    """One past call the grant covers, as a page lists it."""

    interrupt: int
    label: str
    at: object
    outcome: str
    by: str


@dataclass
class Simulation:
    """Of the calls in the window, how many the grant covers and what people did with them."""

    days: int
    calls: int = 0
    covered: int = 0
    # Covered calls people approved as asked: the grant would have approved them without asking.
    approved: int = 0
    # Covered calls a policy wanted two or more approvals for: the grant is one, a person still needed.
    second_approver: int = 0
    # Covered calls people refused (rejected, dismissed) or approved only after editing the args.
    refused: list[Replayed] = field(default_factory=list)
    refused_count: int = 0
    # Covered calls nobody answered (expired, or waiting still).
    unanswered: int = 0
    # Only the newest ``SIMULATION_MAX_CALLS`` calls were replayed.
    cut: bool = False

    def as_dict(self) -> dict:
        return {"days": self.days, "calls": self.calls, "covered": self.covered, "approved": self.approved,
                "second_approver": self.second_approver, "refused_count": self.refused_count,
                "unanswered": self.unanswered, "cut": self.cut,
                "refused": [{"interrupt": r.interrupt, "label": r.label, "at": r.at.isoformat(), "outcome": r.outcome,
                             "by": r.by} for r in self.refused]}


def grant(agent: Agent, tool_name: str, args_schema: dict, days: int) -> Simulation:
    """Replay ``agent``'s calls of ``tool_name`` from the last ``days`` against a grant of ``args_schema``.

    The schema was checked usable by the caller (``grants.check_scope``); a call whose
    args it cannot judge counts as not covered.
    """
    since = timezone.now() - timedelta(days=days)
    live = Decision.objects.filter(superseded_at__isnull=True).select_related("user").order_by("pk")
    rows = list(Interrupt.objects.filter(run__agent=agent, tool_name=tool_name, created_at__gte=since)
                .order_by("-created_at", "-pk").prefetch_related(Prefetch("decisions", queryset=live,
                                                                          to_attr="live"))
                [:SIMULATION_MAX_CALLS + 1])
    result = Simulation(days=days, cut=len(rows) > SIMULATION_MAX_CALLS)
    for row in rows[:SIMULATION_MAX_CALLS]:
        result.calls += 1
        if not grant_scope.covers(args_schema, row.proposed_args):
            continue
        result.covered += 1
        closing = row.live[-1] if row.live else None
        if closing is None:
            result.unanswered += 1
            continue
        if closing.required_approvals > 1:
            result.second_approver += 1
        if closing.action == "approve":
            result.approved += 1
            continue
        # The dangerous ones: what people said no to, or let through only changed.
        result.refused_count += 1
        if len(result.refused) < SIMULATION_SHOWN:
            result.refused.append(Replayed(row.pk, request_label(row.message, row.tool_name), row.created_at,
                                           outcome_words(closing), decider(closing)))
    return result
