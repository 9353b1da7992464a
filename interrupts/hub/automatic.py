"""Approvals nobody clicked: a policy's "auto-approve when" rule, or a standing grant, on the calls they cover.

Each is a decision in the name of the person accountable for it (who set the
rule, who made the grant), naming what took it, in the chain; one approval at
most; never under a policy that always asks; and only while that person may
still decide the call. The args are checked before the run's transaction; the
decision is written, a grant's use spent and the resume queued inside it, so a
revocation or a policy change committed first stops the next one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model

from ..conf import MAX_GRANTS_CHECKED
from ..models import Decision, Grant, Interrupt, Run
from ..protocol.schema.edits import approval_payload
from ..rules import eligibility, grant_scope
from . import policies, runs
from .notify import enqueue
from .trail import chain


@dataclass
class _Covered:
    interrupt: Interrupt
    rule: eligibility.Rule
    answer: object
    by_policy: object = None  # the person who set the policy's rule, when it approves
    grants: list[Grant] = field(default_factory=list)  # else the grants that fit, oldest first


def standing(run: Run, raised: list[Interrupt], now) -> Callable[[], set[int]]:
    """What approves which of ``raised`` (unsaved) without asking, found now; the returned call does it.

    Called before the run's transaction (the args are the agent's: checked
    before any lock); the call, inside it once ``raised`` is saved, approves
    each covered interrupt and returns the pks of those it closed. Policies
    and grants are read once for the batch.
    """
    held = eligibility.held_policies()
    rules = {id(row): eligibility.rule_held(run.agent_id, row.reason, row.tool_name, held) for row in raised}
    # Who set each "auto-approve when" rule these calls meet (none: a rule nobody answers for approves nothing).
    ruled = {r.auto_approve_by for r in rules.values() if r.auto_approve_args is not None} - {None}
    tools = {row.tool_name for row in raised if row.tool_name}
    usable = (list(Grant.objects.usable(now).filter(agent_id=run.agent_id, tool_name__in=tools)
                   .order_by("pk")[:MAX_GRANTS_CHECKED]) if tools else [])
    if not usable and not ruled:
        return set
    people = {u.pk: u for u in get_user_model().objects.filter(pk__in={g.author_id for g in usable} | ruled)}
    covered: list[_Covered] = []
    for row in raised:
        rule = rules[id(row)]
        answer = approval_payload(row.response_schema, True)
        # Past its expiry on arrival: nobody may approve it, a rule or grant no more than a person. A call whose
        # args or name were doubted (not JSON, not an object, a framework's wrapper) is shown to a person.
        if (rule.asks_a_person or answer is None or row.problems
                or (row.expires_at is not None and row.expires_at <= now)):
            continue
        if rule.auto_approve_args is not None and grant_scope.covers(rule.auto_approve_args, row.proposed_args):
            setter = people.get(rule.auto_approve_by)
            if setter is not None and policies.refusal(setter, rule, row) is None:
                covered.append(_Covered(row, rule, answer, by_policy=setter))
                continue
        fits = [g for g in usable if g.tool_name == row.tool_name and people.get(g.author_id) is not None
                and policies.refusal(people[g.author_id], rule, row) is None
                and grant_scope.covers(g.args_schema, row.proposed_args)]
        if fits:
            covered.append(_Covered(row, rule, answer, grants=fits))

    def spend() -> set[int]:
        approved = {c.interrupt.pk for c in covered if _approve(c, people, now)}
        if len(approved) == len(raised):  # the whole batch: its resume goes at once (no undo: nobody clicked)
            # Read again: the caller's thread predates this run's events (the messages the resume carries).
            interrupted = Run.objects.select_related("thread", "agent").defer(*Run.CONVERSATION).get(pk=run.pk)
            runs.queue_resume(interrupted, hold=0, size=len(raised))
        return approved

    return spend if covered else set


def _approve(covered: _Covered, people: dict, now) -> bool:
    """Approve the interrupt by the policy's rule, or by the first grant with a use left; whether that closed it.

    Under a policy wanting more approvals a grant's is one of them: the interrupt waits for a person.
    """
    if covered.by_policy is not None:
        return _decide(covered, covered.by_policy, None, now)
    for grant in covered.grants:
        if Grant.objects.filter(pk=grant.pk).use(now):
            return _decide(covered, people[grant.author_id], grant, now)
    return False


def _decide(covered: _Covered, user, grant: Grant | None, now) -> bool:
    interrupt, rule = covered.interrupt, covered.rule
    closes = rule.required_approvals <= 1
    Interrupt.objects.filter(pk=interrupt.pk).answer(interrupt.version, Decision.Status.RESOLVED if closes else None,
                                                     now)
    decision = Decision.objects.create(
        interrupt=interrupt, user=user, grant=grant, by_policy=grant is None, status=Decision.Status.RESOLVED,
        payload=covered.answer, action="approve", policy=rule.name[:100], required_approvals=rule.required_approvals,
    )
    chain.record_decision(decision, superseded=False)
    enqueue.decided(interrupt, decision.user)
    return closes
