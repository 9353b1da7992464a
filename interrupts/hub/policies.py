"""Who may decide, as the hub applies it: refusals with a reason, and each pending interrupt's governing policy.

The rules themselves are read-only and shared with the reads: ``rules.eligibility``.
When several refuse, ``NOT_ELIGIBLE`` (rules 1-3) is reported before
``SELF_APPROVAL`` (rule 4): the first says who may, the second only who may not.
"""

from __future__ import annotations

from django.db import transaction

from ..models import Interrupt, Policy
from ..rules.eligibility import DECIDE_PERMISSION, Rule, backs_up, held_policies, in_force, most_specific, rule_of
from .refusals import Refusal
from .trail import changes


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


# --- changing policies: every door (pages, API, admin, demo agents) calls these --------------------


def save(policy: Policy, *, groups=None, users=None, by=None) -> Policy:
    """Create or change ``policy`` and, when given, its groups and users, with its audit entry, in one transaction.

    ``restricted`` follows an explicit change of the members only: a policy
    whose named groups and users were all deleted stays restricted, admitting
    nobody. Turning its "auto-approve when" rule on or changing it makes
    ``by`` the person each approval it makes is taken in the name of: refused
    (403) unless the policy, as saved, lets them decide. After commit, the
    pending interrupts' governing policies follow.
    """
    created = policy._state.adding
    policy.on_expiry = policy.on_expiry or Policy.OnExpiry.CANCEL  # left out: the default
    setting = _auto_rule_set(policy, created)
    with transaction.atomic():
        if setting:
            policy.auto_approve_by = by
        elif not policy.auto_approve:
            policy.auto_approve_by = None
        policy.save()
        if _set_members(policy, groups, users):
            policy.restricted = policy.groups.exists() or policy.users.exists()
            Policy.objects.filter(pk=policy.pk).update(restricted=policy.restricted)
        if setting and (by is None or not rule_of(policy).admits(by)):
            raise Refusal("NOT_ELIGIBLE", "Only someone this policy lets decide may make it approve without "
                                          "asking: each approval it makes is taken in their name.", status=403,
                          policy=policy.name)
        changes.record_policy(policy, "policy.created" if created else "policy.changed")
        transaction.on_commit(reassign_pending)
    return policy


#: What the "auto-approve when" rule's setter agreed to: a change to any of it is a new rule, theirs who saves it.
AUTO_RULE_FIELDS = ("auto_approve", "auto_approve_args", "agent_id", "reason", "tool_name", "allow_self_approval")


def _auto_rule_set(policy: Policy, created: bool) -> bool:
    # Whether this save turns the "auto-approve when" rule on or changes what it matches.
    if not policy.auto_approve:
        return False
    before = None if created else Policy.objects.filter(pk=policy.pk).values(*AUTO_RULE_FIELDS).first()
    return before != {name: getattr(policy, name) for name in AUTO_RULE_FIELDS}


def _set_members(policy: Policy, groups, users) -> bool:
    # Whether the members changed: only then does ``restricted`` follow them.
    changed = False
    for members, given in ((policy.groups, groups), (policy.users, users)):
        if given is not None and set(members.values_list("pk", flat=True)) != {m.pk for m in given}:
            members.set(given)
            changed = True
    return changed


def get_or_create(defaults: dict | None = None, **scope) -> tuple[Policy, bool]:
    """The policy for ``scope``, created with ``defaults`` (and its entry) if there is none; as the QuerySet's."""
    with transaction.atomic():
        policy, created = Policy.objects.get_or_create(defaults=defaults, **scope)
        if created:
            changes.record_policy(policy, "policy.created")
            transaction.on_commit(reassign_pending)
    return policy, created


def delete(policy: Policy) -> None:
    """Delete ``policy`` with its audit entry; its pending interrupts follow the next most specific one."""
    pk, name = policy.pk, policy.name
    with transaction.atomic():
        policy.delete()
        changes.record_policy_deleted(pk, name)
        transaction.on_commit(reassign_pending)

