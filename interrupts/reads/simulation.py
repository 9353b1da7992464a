"""What a proposed grant or policy would have done: the stored history of decisions, replayed against it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Prefetch
from django.utils import timezone

from ..conf import SIMULATION_MAX_CALLS, SIMULATION_SHOWN
from ..models import Agent, Decision, Interrupt, Policy
from ..rules import eligibility, grant_scope
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
    # A policy: calls approved without asking then (a grant, a rule) that would ask a person now.
    asked: int = 0
    # Only the newest ``SIMULATION_MAX_CALLS`` calls were replayed.
    cut: bool = False

    def as_dict(self) -> dict:
        return {"days": self.days, "calls": self.calls, "covered": self.covered, "approved": self.approved,
                "second_approver": self.second_approver, "refused_count": self.refused_count,
                "unanswered": self.unanswered, "asked": self.asked, "cut": self.cut,
                "refused": [{"interrupt": r.interrupt, "label": r.label, "at": r.at.isoformat(), "outcome": r.outcome,
                             "by": r.by} for r in self.refused]}


def _replayed(calls, days: int) -> tuple[Simulation, list[Interrupt]]:
    # The newest SIMULATION_MAX_CALLS of ``calls`` in the window, each with its live decisions (``live``).
    since = timezone.now() - timedelta(days=days)
    live = Decision.objects.filter(superseded_at__isnull=True).select_related("user").order_by("pk")
    rows = list(calls.filter(created_at__gte=since).select_related("run").order_by("-created_at", "-pk")
                .prefetch_related(Prefetch("decisions", queryset=live, to_attr="live"))[:SIMULATION_MAX_CALLS + 1])
    return Simulation(days=days, cut=len(rows) > SIMULATION_MAX_CALLS), rows[:SIMULATION_MAX_CALLS]


def _would_approve(result: Simulation, row: Interrupt) -> None:
    # ``row`` is covered: what people did with it says what approving it without asking would have changed.
    result.covered += 1
    closing = row.live[-1] if row.live else None
    if closing is None:
        result.unanswered += 1
        return
    if closing.required_approvals > 1:
        result.second_approver += 1
    if closing.action == "approve":
        result.approved += 1
        return
    # The dangerous ones: what people said no to, or let through only changed.
    result.refused_count += 1
    if len(result.refused) < SIMULATION_SHOWN:
        result.refused.append(Replayed(row.pk, request_label(row.message, row.tool_name), row.created_at,
                                       outcome_words(closing), decider(closing)))


def grant(agent: Agent, tool_name: str, args_schema: dict, days: int) -> Simulation:
    """Replay ``agent``'s calls of ``tool_name`` from the last ``days`` against a grant of ``args_schema``.

    The schema was checked usable by the caller (``grants.check_scope``); a call whose
    args it cannot judge counts as not covered.
    """
    result, rows = _replayed(Interrupt.objects.filter(run__agent=agent, tool_name=tool_name), days)
    for row in rows:
        result.calls += 1
        if grant_scope.covers(args_schema, row.proposed_args):
            _would_approve(result, row)
    return result


def policy(proposed: Policy, days: int) -> Simulation:
    """Replay the last ``days`` of requests ``proposed`` (unsaved; in place of the policy of its pk, if any)
    would govern, beside the policies in force, against its tier.

    ``calls``: the requests it would have governed. "Auto-approve when": those
    its rule covers, as for a grant. Two people or more: ``second_approver``,
    those approved with fewer. Always ask: ``asked``, those approved without
    asking then (a grant, another policy's rule).
    """
    others = [p for p in eligibility.in_force() if p.pk is None or p.pk != proposed.pk]
    policies = sorted([*others, proposed], key=lambda p: p.specificity, reverse=True)
    calls = Interrupt.objects.all()
    if proposed.agent_id is not None:
        calls = calls.filter(run__agent_id=proposed.agent_id)
    if proposed.reason:
        calls = calls.filter(reason=proposed.reason)
    if proposed.tool_name:
        calls = calls.filter(tool_name=proposed.tool_name)
    result, rows = _replayed(calls, days)
    for row in rows:
        if eligibility.most_specific(policies, row.run.agent_id, row.reason, row.tool_name) is not proposed:
            continue  # a more specific policy governs it
        result.calls += 1
        if proposed.auto_approve and grant_scope.covers(proposed.auto_approve_args, row.proposed_args):
            _would_approve(result, row)
            continue
        approvals = [d for d in row.live if d.action in ("approve", "edit")]
        if not approvals:
            continue
        if (proposed.always_ask or proposed.require_passkey) and any(d.grant_id or d.by_policy for d in approvals):
            result.asked += 1
        elif row.live[-1].action in ("approve", "edit") and len(approvals) < proposed.required_approvals:
            result.second_approver += 1
    return result
