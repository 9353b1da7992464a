"""Who may decide an interrupt: the permission, the policy in force, self-approval, the quorum.

One set of rules for the inbox, the REST API and the gateway, applied by
``decisions`` before any lock is taken (they read users, groups and
policies, never agent data):

1. Deciding at all takes the ``interrupts.decide_interrupt`` permission (the
   ``Reviewers`` group holds it; superusers have every permission).
2. The interrupt's policy is the most specific ``Policy`` matching its agent,
   reason and tool name (``Policy.specificity``); with none, the site
   default: every permission holder, one approval, no self-approval.
3. A policy naming groups and/or users admits only them.
4. Unless the policy allows it, the run's requester (who started the
   conversation; for a gateway run, the token's user) may not decide it.

When several rules refuse, ``NOT_ELIGIBLE`` (rules 1-3) is reported before
``SELF_APPROVAL`` (rule 4): the first says who may, the second only who may not.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q

from ..conf import SLA_AT_RISK_FRACTION
from ..models import Decision, Interrupt, Policy, Run
from .refusals import Refusal
from .trail import changes

DECIDE_PERMISSION = "interrupts.decide_interrupt"
#: The group a migration creates holding DECIDE_PERMISSION.
REVIEWERS_GROUP = "Reviewers"


@dataclass(frozen=True)
class Rule:
    """The policy in force for one interrupt, as plain values (a site default has no row)."""

    name: str
    required_approvals: int = 1
    allow_self_approval: bool = False
    group_ids: frozenset[int] = frozenset()
    user_ids: frozenset[int] = frozenset()
    group_names: tuple[str, ...] = ()
    usernames: tuple[str, ...] = ()
    target_minutes: int | None = None
    # The group an interrupt that missed the target escalates to: it admits them only while this names it.
    backup_group_id: int | None = None
    pk: int | None = None
    # Names groups or users (even if they have since been deleted): admits only them.
    restricted: bool = False

    @property
    def names_people(self) -> bool:
        return self.restricted or bool(self.group_ids or self.user_ids)

    @property
    def waiting_for(self) -> str:
        """Who may decide, as the card says it: "waiting for <this>"."""
        if not self.names_people:
            return REVIEWERS_GROUP
        named = ", ".join([*self.group_names, *self.usernames])
        return named or "nobody: the groups and users this policy named were deleted (staff must name others)"

    def admits(self, user) -> bool:
        """Whether ``user`` may decide under this policy (rules 1-3; not self-approval).

        Fails closed: a policy whose named groups and users were all deleted
        admits nobody, never every reviewer.
        """
        if not (user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION)):
            return False
        if not self.names_people:
            return True
        return user.pk in self.user_ids or bool(self.group_ids & _group_ids(user))


SITE_DEFAULT = Rule(name="site default")


def _group_ids(user) -> frozenset[int]:
    # Read once per user object: a page asks for every card it shows.
    cached = getattr(user, "_countersign_group_ids", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("pk", flat=True))
        user._countersign_group_ids = cached
    return cached


def _rule(policy: Policy) -> Rule:
    groups = sorted(policy.groups.all(), key=lambda g: g.name)
    users = sorted(policy.users.all(), key=lambda u: u.get_username())
    return Rule(
        name=policy.name, required_approvals=policy.required_approvals,
        allow_self_approval=policy.allow_self_approval,
        group_ids=frozenset(g.pk for g in groups), user_ids=frozenset(u.pk for u in users),
        group_names=tuple(g.name for g in groups), usernames=tuple(u.get_username() for u in users),
        target_minutes=policy.target_minutes, backup_group_id=policy.backup_group_id, pk=policy.pk,
        restricted=policy.restricted,
    )


def in_force() -> list[Policy]:
    """Every policy, most specific first, with its agent, groups and users (3 queries: a team has tens of
    policies, not thousands).

    A page reads it once and passes it to ``rules_for`` and ``decidable_by``
    (``selectors.policies_in_force``): its cards and its header's badge then
    judge by the same policies, read once.
    """
    found = list(Policy.objects.select_related("agent", "backup_group").prefetch_related("groups", "users"))
    return sorted(found, key=lambda p: p.specificity, reverse=True)


def _matches(policy: Policy, agent_id: int, reason: str, tool_name: str) -> bool:
    return ((policy.agent_id is None or policy.agent_id == agent_id)
            and (not policy.reason or policy.reason == reason)
            and (not policy.tool_name or policy.tool_name == tool_name))


def _winner(policies: list[Policy], agent_id: int, reason: str, tool_name: str) -> Policy | None:
    """The most specific of ``policies`` (sorted by ``in_force``) matching an interrupt, or None."""
    return next((p for p in policies if _matches(p, agent_id, reason, tool_name)), None)


def rule_for(interrupt: Interrupt) -> Rule:
    """The policy in force for ``interrupt`` (its run must be loaded or loadable), as ``rules_held`` says."""
    return rules_held([interrupt])[interrupt.pk]


def rules_held(interrupts: Iterable[Interrupt]) -> dict[int, Rule]:
    """``rules_for`` by the policies this process holds (``_held``): one cheap query while none changed."""
    held = _held()
    return _governing(interrupts, held.policies, held.rules)


def _governing(interrupts: Iterable[Interrupt], policies: list[Policy], rules: dict[int, Rule]) -> dict[int, Rule]:
    """Each interrupt's rule, by pk: its most specific policy's (``rules`` by policy pk), else the site default."""
    found = {}
    for interrupt in interrupts:
        winner = _winner(policies, interrupt.run.agent_id, interrupt.reason, interrupt.tool_name)
        found[interrupt.pk] = rules[winner.pk] if winner is not None else SITE_DEFAULT
    return found


# --- the policies a process holds -------------------------------------------------------------
#
# Deciding asks for the policy in force on every request, and reading every
# policy with its groups and users is three queries (most of a decision's
# reads). A process keeps what it read, and asks the database whether it
# still holds: triggers (migration 0018) give ``interrupts_policy_version`` a
# fresh random token in every transaction that writes a policy, its groups or
# users, or a group, whatever wrote it (the ORM with or without signals, a
# fixture, raw SQL). The token is read before the policies, so a change that
# commits in between makes the next check read them again; a rollback brings
# back the old token with the old rows; a token is never reused.

#: Seconds a process keeps what it read at most, even while the token stays (belt and braces).
HELD_SECONDS = 10.0


@dataclass(frozen=True)
class _Held:
    policies: list[Policy]  # most specific first, as ``in_force`` reads them; never shown (their agents may be renamed)
    rules: dict[int, Rule]
    token: str | None  # interrupts_policy_version's token when they were read (None: no write since the table began)
    read_at: float  # time.monotonic()


_last: _Held | None = None


def _token() -> str | None:
    # Raw SQL: this runs on every decision, and the ORM's compiling costs more than the query.
    with connection.cursor() as cursor:
        cursor.execute("SELECT token FROM interrupts_policy_version WHERE id = 1")
        row = cursor.fetchone()
    return row[0] if row else None


def _held() -> _Held:
    """The policies in force and their rules, read again only when the database says they may have changed."""
    global _last
    held = _last
    token = _token()
    if held is not None and held.token == token and time.monotonic() - held.read_at <= HELD_SECONDS:
        return held
    policies = list(Policy.objects.prefetch_related("groups", "users"))
    policies.sort(key=lambda p: p.specificity, reverse=True)
    held = _last = _Held(policies, {p.pk: _rule(p) for p in policies}, token, time.monotonic())
    return held


def rules_for(interrupts: Iterable[Interrupt], policies: list[Policy] | None = None) -> dict[int, Rule]:
    """The policy in force for each interrupt, by pk, in a fixed number of queries (none given ``policies``,
    as ``in_force`` read them)."""
    policies = in_force() if policies is None else policies
    return _governing(interrupts, policies, {p.pk: _rule(p) for p in policies})


def refusal(user, rule: Rule, interrupt: Interrupt) -> Refusal | None:
    """Why ``user`` may not decide ``interrupt`` under ``rule``, or None when they may.

    An escalated interrupt admits its backup group's members too
    (``escalation``), never for their own requests, while ``rule`` still
    names that group as its backup.
    """
    admitted = rule.admits(user)
    backup = not admitted and _backs_up(user, rule, interrupt)
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


def _backs_up(user, rule: Rule, interrupt: Interrupt) -> bool:
    """Whether ``user`` is in the backup group ``interrupt`` escalated to, and may decide interrupts at all.

    Only while the policy governing it now (``rule``) names that group as its
    backup: moved under another policy (staff made it stricter, or removed the
    backup), the escalation no longer admits anyone.
    """
    return (interrupt.escalated_to_id is not None and interrupt.escalated_to_id == rule.backup_group_id
            and user.is_authenticated and user.is_active
            and user.has_perm(DECIDE_PERMISSION) and interrupt.escalated_to_id in _group_ids(user))


def refuse_unless_eligible(user, rule: Rule, interrupt: Interrupt) -> None:
    """Raise ``refusal``'s answer, if any."""
    problem = refusal(user, rule, interrupt)
    if problem is not None:
        raise problem


def assign(interrupts: list[Interrupt], agent_id: int) -> None:
    """Set each (unsaved) interrupt's governing policy, as ``rules_for`` would resolve it now."""
    policies = _held().policies
    for interrupt in interrupts:
        winner = _winner(policies, agent_id, interrupt.reason, interrupt.tool_name)
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
            found = _winner(policies, agent_id, reason, tool_name)
            winner = found.pk if found is not None else None
            if winner != current:
                moves.setdefault(winner, []).append(pk)
        for winner, pks in moves.items():
            changed += Interrupt.objects.filter(pk__in=pks).update(policy_id=winner)
        last = chunk[-1][0]


# --- changing policies: every door (pages, API, admin, demo agents) calls these --------------------


def save(policy: Policy, *, groups=None, users=None) -> Policy:
    """Create or change ``policy`` and, when given, its groups and users, with its audit entry, in one transaction.

    ``restricted`` follows an explicit change of the members only: a policy
    whose named groups and users were all deleted stays restricted, admitting
    nobody. After commit, the pending interrupts' governing policies follow.
    """
    created = policy._state.adding
    with transaction.atomic():
        policy.save()
        if _set_members(policy, groups, users):
            policy.restricted = policy.groups.exists() or policy.users.exists()
            Policy.objects.filter(pk=policy.pk).update(restricted=policy.restricted)
        changes.record_policy(policy, "policy.created" if created else "policy.changed")
        transaction.on_commit(reassign_pending)
    return policy


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


@dataclass(frozen=True)
class Reach:
    """Which interrupts ``user`` may decide, by their stored governing policy (``Interrupt.policy``)."""

    own_too: tuple[int, ...]  # policies admitting them that allow self-approval
    others_only: tuple[int, ...]  # policies admitting them, not for their own requests
    site_default: bool  # the site default admits them (interrupts with no policy; never their own requests)
    # (policy, its backup group) for each policy whose backup group is one of theirs: that policy's
    # interrupts escalated to that group admit them too (never their own requests).
    backed_up: tuple[tuple[int, int], ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.own_too or self.others_only or self.site_default or self.backed_up)

    @property
    def requester_barred(self) -> Q:
        """Interrupts they may decide unless they requested them."""
        barred = Q(policy_id__in=self.others_only)
        if self.site_default:
            barred |= Q(policy__isnull=True)
        for policy_pk, group_pk in self.backed_up:
            # Escalated to their group, where no policy of their own already admits them.
            if policy_pk not in self.own_too and policy_pk not in self.others_only:
                barred |= Q(policy_id=policy_pk, escalated_to_id=group_pk)
        return barred

    @property
    def admitted(self) -> Q:
        """Interrupts whose policy admits them, whoever requested them."""
        return Q(policy_id__in=self.own_too) | self.requester_barred


def reach(user, policies: list[Policy] | None = None) -> Reach | None:
    """Which policies admit ``user`` (None: they may decide nothing)."""
    if not (user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION)):
        return None
    own_too, others_only, backed_up = [], [], []
    groups = _group_ids(user)
    for policy in in_force() if policies is None else policies:
        rule = _rule(policy)
        if rule.admits(user):
            (own_too if rule.allow_self_approval else others_only).append(policy.pk)
        if policy.backup_group_id is not None and policy.backup_group_id in groups:
            backed_up.append((policy.pk, policy.backup_group_id))
    return Reach(tuple(own_too), tuple(others_only), SITE_DEFAULT.admits(user), tuple(backed_up))


def eligible(user, policies: list[Policy] | None = None) -> Q:
    """A filter on interrupts: those ``user`` may decide, decided by them already or not."""
    found = reach(user, policies)
    if found is None:
        return Q(pk__in=[])
    # Their own runs as a set (IN), not a join: the inbox walks 100,000 pending
    # interrupts for a count or a deep page, and a join per row was most of it.
    not_mine = ~Q(run_id__in=Run.objects.filter(requested_by=user).values("pk"))
    return Q(policy_id__in=found.own_too) | (found.requester_barred & not_mine)


def decided_by(user):
    """The interrupts ``user`` has a standing decision on (a subquery of pks)."""
    return Decision.objects.filter(user=user, superseded_at__isnull=True).values("interrupt_id")


def decidable_by(user, policies: list[Policy] | None = None) -> Q:
    """A filter on interrupts: those ``user`` may decide and has not yet decided ("waiting for me").

    Reads each interrupt's stored governing policy (``Interrupt.policy``), so
    the filter grows with the number of policies, not with its square.
    """
    decided = Decision.objects.filter(interrupt=OuterRef("pk"), user=user, superseded_at__isnull=True)
    return eligible(user, policies) & ~Exists(decided)


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

