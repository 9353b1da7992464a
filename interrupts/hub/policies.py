"""Who may decide, as the hub applies it: refusals with a reason, and each pending interrupt's governing policy.

The rules themselves are read-only and shared with the reads: ``rules.eligibility``.
When several refuse, ``NOT_ELIGIBLE`` (rules 1-3) is reported before
``SELF_APPROVAL`` (rule 4): the first says who may, the second only who may not.
"""

from __future__ import annotations

from django.db import transaction

from ..models import Interrupt, Policy
from ..rules.eligibility import DECIDE_PERMISSION, Rule, backs_up, held_policies, in_force, most_specific
from .refusals import Refusal


def refusal(user, rule: Rule, interrupt: Interrupt) -> Refusal | None:
    """Why ``user`` may not decide ``interrupt`` under ``rule``, or None when they may.

    An escalated interrupt admits its backup group's members too
    (``escalation``), never for their own requests, while ``rule`` still
    names that group as its backup.
    """
    admitted = rule.admits(user)
    backup = not admitted and backs_up(user, rule, interrupt)
    if not (admitted or backup):
        if not (user.is_authenticated and user.has_perm(DECIDE_PERMISSION)):
            why = "you do not hold the permission to decide interrupts (ask an admin to add you to Reviewers)"
        else:
            why = f"policy {rule.name!r} admits only {rule.waiting_for}"
        return Refusal("NOT_ELIGIBLE", f"You may not decide interrupt {interrupt.interrupt_id}: {why}.",
                       status=403, interrupt_id=interrupt.interrupt_id, policy=rule.name)
    if (backup or not rule.allow_self_approval) and interrupt.run.requested_by_id == user.pk:
        return Refusal(
            "SELF_APPROVAL",
            f"You started the run that raised interrupt {interrupt.interrupt_id}, and policy {rule.name!r} "
            "does not let a requester approve their own request: another reviewer must decide it.",
            status=403, interrupt_id=interrupt.interrupt_id, policy=rule.name,
        )
    return None


def refuse_unless_eligible(user, rule: Rule, interrupt: Interrupt) -> None:
    """Raise ``refusal``'s answer, if any."""
    problem = refusal(user, rule, interrupt)
    if problem is not None:
        raise problem


def assign(interrupts: list[Interrupt], agent_id: int) -> None:
    """Set each (unsaved) interrupt's governing policy, as ``rules_for`` would resolve it now."""
    policies = held_policies().policies
    for interrupt in interrupts:
        winner = most_specific(policies, agent_id, interrupt.reason, interrupt.tool_name)
        interrupt.policy_id = winner.pk if winner is not None else None


#: Pending interrupts re-resolved per query when policies change.
REASSIGN_CHUNK = 2000


def reassign_pending() -> int:
    """Resolve every pending interrupt's governing policy again (after a policy was added, changed or removed).

    Runs when a policy changes, which is rare and done by staff; memory stays
    flat (chunks of ``REASSIGN_CHUNK``), and only rows whose policy changed
    are written. Returns how many changed.
    """
    policies = in_force()
    changed = 0
    last = 0
    while True:
        chunk = list(Interrupt.objects.filter(status=Interrupt.Status.PENDING, pk__gt=last).order_by("pk")
                     .values_list("pk", "run__agent_id", "reason", "tool_name", "policy_id")[:REASSIGN_CHUNK])
        if not chunk:
            return changed
        moves: dict[int | None, list[int]] = {}
        for pk, agent_id, reason, tool_name, current in chunk:
            found = most_specific(policies, agent_id, reason, tool_name)
            winner = found.pk if found is not None else None
            if winner != current:
                moves.setdefault(winner, []).append(pk)
        for winner, pks in moves.items():
            changed += Interrupt.objects.filter(pk__in=pks).update(policy_id=winner)
        last = chunk[-1][0]


def policy_changed(sender, **kwargs) -> None:
    """Signal receiver (apps.py): a policy was saved or deleted; the inbox's listing follows.

    After commit, so the change is what ``reassign_pending`` reads.
    """
    if kwargs.get("raw"):
        return
    transaction.on_commit(reassign_pending)


def members_changed(sender, instance, action, reverse, **kwargs) -> None:
    """Signal receiver (apps.py): staff named or removed a policy's groups or users; ``restricted`` follows.

    Only explicit changes come here: deleting a group or user removes its
    rows without this signal, so a policy whose names were all deleted stays
    restricted, admitting nobody.
    """
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    touched = [instance] if not reverse else list(Policy.objects.filter(pk__in=kwargs.get("pk_set") or ()))
    for policy in touched:
        restricted = policy.groups.exists() or policy.users.exists()
        Policy.objects.filter(pk=policy.pk).update(restricted=restricted)
        policy.restricted = restricted
