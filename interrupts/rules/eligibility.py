"""Who may decide an interrupt: the permission, the policy in force, self-approval, the quorum.

One set of rules for the inbox, the REST API and the gateway (read-only: the
hub's ``policies`` turns a "no" into a refusal and keeps ``Interrupt.policy``):

1. Deciding at all takes the ``interrupts.decide_interrupt`` permission (the
   ``Reviewers`` group holds it; superusers have every permission).
2. The interrupt's policy is the most specific ``Policy`` matching its agent,
   reason and tool name (``Policy.specificity``); with none, the site
   default: every permission holder, one approval, no self-approval.
3. A policy naming groups and/or users admits only them.
4. Unless the policy allows it, the run's requester (who started the
   conversation; for a gateway run, the token's user) may not decide it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import Exists, OuterRef, Q

from ..models import Decision, Interrupt, Policy, Run

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
    # Every call asks a person: no standing grant applies.
    always_ask: bool = False
    # "Auto-approve when": the JSON Schema a call's args must fit to be approved without asking
    # (None: never), in the name of who set it. Not compared: a Rule is a key (who is notified), a dict no hash.
    auto_approve_args: dict | None = field(default=None, compare=False)
    auto_approve_by: int | None = None
    # On a card whose args are long, Approve waits until the full args were opened (``rules.looked``).
    require_look: bool = False
    # Approving takes the approver's passkey over the exact approval (``hub.passkeys``): nothing automatic applies.
    require_passkey: bool = False

    @property
    def asks_a_person(self) -> bool:
        """Whether every call needs a person: no grant or rule approves it (always ask, or a passkey)."""
        return self.always_ask or self.require_passkey

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


def rule_of(policy: Policy) -> Rule:
    """``policy`` as a rule (its groups and users read, or prefetched)."""
    groups = sorted(policy.groups.all(), key=lambda g: g.name)
    users = sorted(policy.users.all(), key=lambda u: u.get_username())
    return Rule(
        name=policy.name, required_approvals=policy.required_approvals,
        allow_self_approval=policy.allow_self_approval,
        group_ids=frozenset(g.pk for g in groups), user_ids=frozenset(u.pk for u in users),
        group_names=tuple(g.name for g in groups), usernames=tuple(u.get_username() for u in users),
        target_minutes=policy.target_minutes, backup_group_id=policy.backup_group_id, pk=policy.pk,
        restricted=policy.restricted, always_ask=policy.always_ask,
        auto_approve_args=policy.auto_approve_args if policy.auto_approve else None,
        auto_approve_by=policy.auto_approve_by_id, require_look=policy.require_look,
        require_passkey=policy.require_passkey,
    )


def in_force() -> list[Policy]:
    """Every policy, most specific first, with its agent, groups and users (3 queries: a team has tens of
    policies, not thousands): for what names their agents. Pages judge by ``held_policies``."""
    found = list(Policy.objects.select_related("agent", "backup_group", "auto_approve_by")
                 .prefetch_related("groups", "users"))
    return sorted(found, key=lambda p: p.specificity, reverse=True)


def _matches(policy: Policy, agent_id: int, reason: str, tool_name: str) -> bool:
    return ((policy.agent_id is None or policy.agent_id == agent_id)
            and (not policy.reason or policy.reason == reason)
            and (not policy.tool_name or policy.tool_name == tool_name))


def most_specific(policies: list[Policy], agent_id: int, reason: str, tool_name: str) -> Policy | None:
    """The most specific of ``policies`` (sorted by ``in_force``) matching an interrupt, or None."""
    return next((p for p in policies if _matches(p, agent_id, reason, tool_name)), None)



def rule_for(interrupt: Interrupt) -> Rule:
    """The policy in force for ``interrupt`` (its run must be loaded or loadable), as ``rules_held`` says."""
    return rules_held([interrupt])[interrupt.pk]


def rule_held(agent_id: int, reason: str, tool_name: str, held: _Held | None = None) -> Rule:
    """The rule a call with this scope meets, by the policies this process holds (an unsaved interrupt's).

    ``held``: ``held_policies()`` when the caller asks for many (one query, not one each).
    """
    held = held or held_policies()
    winner = most_specific(held.policies, agent_id, reason, tool_name)
    return held.rules[winner.pk] if winner is not None else SITE_DEFAULT


def rules_held(interrupts: Iterable[Interrupt]) -> dict[int, Rule]:
    """``rules_for`` by the policies this process holds (``held_policies``): one cheap query while none changed."""
    held = held_policies()
    return _governing(interrupts, held.policies, held.rules)


def _governing(interrupts: Iterable[Interrupt], policies: list[Policy], rules: dict[int, Rule]) -> dict[int, Rule]:
    """Each interrupt's rule, by pk: its most specific policy's (``rules`` by policy pk), else the site default."""
    found = {}
    for interrupt in interrupts:
        winner = most_specific(policies, interrupt.run.agent_id, interrupt.reason, interrupt.tool_name)
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


def held_policies() -> _Held:
    """The policies in force and their rules, read again only when the database says they may have changed."""
    global _last
    held = _last
    token = _token()
    if held is not None and held.token == token and time.monotonic() - held.read_at <= HELD_SECONDS:
        return held
    policies = list(Policy.objects.prefetch_related("groups", "users"))
    policies.sort(key=lambda p: p.specificity, reverse=True)
    held = _last = _Held(policies, {p.pk: rule_of(p) for p in policies}, token, time.monotonic())
    return held


def rules_for(interrupts: Iterable[Interrupt], policies: list[Policy] | None = None) -> dict[int, Rule]:
    """The policy in force for each interrupt, by pk, in a fixed number of queries (none given ``policies``,
    as ``in_force`` read them)."""
    policies = in_force() if policies is None else policies
    return _governing(interrupts, policies, _rules(policies))


def _rules(policies: list[Policy]) -> dict[int, Rule]:
    """Each policy's rule by pk: those this process holds already made, when ``policies`` are the held ones."""
    held = _last
    return held.rules if held is not None and policies is held.policies else {p.pk: rule_of(p) for p in policies}


def backs_up(user, rule: Rule, interrupt: Interrupt) -> bool:
    """Whether ``user`` is in the backup group ``interrupt`` escalated to, and may decide interrupts at all.

    Only while the policy governing it now (``rule``) names that group as its
    backup: moved under another policy (staff made it stricter, or removed the
    backup), the escalation no longer admits anyone.
    """
    return (interrupt.escalated_to_id is not None and interrupt.escalated_to_id == rule.backup_group_id
            and user.is_authenticated and user.is_active
            and user.has_perm(DECIDE_PERMISSION) and interrupt.escalated_to_id in _group_ids(user))


def may_decide(user, rule: Rule, interrupt: Interrupt) -> bool:
    """Whether ``user`` may decide ``interrupt`` under ``rule`` (``policies.refusal`` says why not)."""
    admitted = rule.admits(user)
    if not admitted and not backs_up(user, rule, interrupt):
        return False
    return (admitted and rule.allow_self_approval) or interrupt.run.requested_by_id != user.pk



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
    """Which policies admit ``user`` (None: they may decide nothing).

    Kept on the user object for the same list of policies, as Django keeps its permissions there:
    a page's count, list and filters each ask (a request's user, read again by the next one).
    """
    policies = in_force() if policies is None else policies
    kept = getattr(user, "_countersign_reach", None)
    if kept is not None and kept[0] is policies:
        return kept[1]
    found = _reach(user, policies)
    user._countersign_reach = (policies, found)
    return found


def _reach(user, policies: list[Policy]) -> Reach | None:
    if not (user.is_authenticated and user.is_active and user.has_perm(DECIDE_PERMISSION)):
        return None
    own_too, others_only, backed_up = [], [], []
    groups = _group_ids(user)
    rules = _rules(policies)
    for policy in policies:
        rule = rules[policy.pk]
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
