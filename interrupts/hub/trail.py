"""The hash-chained audit trail: one ``AuditEntry`` per decision, supersession, expiry, and change to who may decide.

The chain. Entry ``n`` stores ``content``, the RFC 8785 canonical JSON text
of ``{"seq": n, "kind", "subject", "at", "data"}``, and

    hash = "sha256:" + hex(SHA-256(prev_hash.encode("ascii") + content.encode("utf-8")))

where ``prev_hash`` is entry ``n - 1``'s ``hash``, and ``GENESIS``
(``sha256:`` and 64 zeros) for entry 1. Editing, removing or reordering an
entry breaks the chain from there on. The chain is unkeyed (anyone can
check an export offline), so someone with write access to the database can
recompute it whole after an edit, or cut its newest entries off: only the
head the last verification kept (``AuditCheckpoint``, in the same database)
or a head kept outside it shows that. Every export and webhook delivery
carries ``head()`` (``SEQ:HASH``), each checkpoint logs it, and
``verify(expect=[...])`` (``audit verify --expect-head``) holds the chain to
such heads.

Writers. ``record`` appends in the caller's transaction, under a lock
(PostgreSQL: an advisory transaction lock; SQLite: ``BEGIN IMMEDIATE``
already serialises writers, see ``project/settings.py``), so two appenders
never fork the chain; a database trigger also refuses an INSERT that is not
the next seq after the previous hash (migration 0011). ``decisions`` calls
``record_decision`` and ``record_expiry``; everything else arrives through
the signal receivers ``InterruptsConfig.ready`` connects, whichever door
(pages, API, admin, shell) made the change: agents (``agent:<pk>``: URL,
header, digests of credential and signing secret), policies
(``policy:<pk>``), users (``user:<pk>``: active/staff/superuser, groups,
own permissions; from either side of ``User.groups`` and
``User.user_permissions``) and groups (``group:<pk>``: permissions). Each
change is compared with its subject's last entry and recorded if it differs;
deleting a user, group or permission records the memberships it took along.

What RFC 8785 cannot canonicalise (a lone surrogate, an integer beyond 2^53,
stored before such input was refused) is recorded by a stand-in,
``{"unsignable": true, "sha256": ...}`` over a lossless JSON spelling
(``signable``): the backfill never aborts a migration, and the stand-in
still changes when the row does.

Supersession. A decision's one permitted change, setting ``superseded_at``,
is not part of ``decision_content`` (which must equal the row for ever);
it is an entry of its own (``decision.superseded``), appended by
``record_decision`` for every decision of the interrupt superseded since.
``decision_content`` also holds what the reviewer read, none of which
changes after the interrupt is raised: its reason and tool name, digests of
its message, raw form, proposed arguments, response schema and metadata,
its expiry, the subagent the card named, and the run's requester (whom
self-approval excludes). ``record_decision`` adds ``policyVersion``: the
seq and hash of the last entry about the policy the decision names, held
to the chain, not to a row.

Entry format. A decision entry is verified by the keys it holds (its hash
fixes them): one written before a key existed is not held to it, one
written now holds every key. Migration 0026 completes older entries with a
``decision.context`` entry holding what they lack, as the rows stood then
(``backfill_context``); verify reads the two as one.

Verification. ``verify`` walks the chain from entry 1 in chunks, then
cross-checks the rows, each kind in chunks of ``CHUNK`` (memory stays flat):
every decision has exactly one ``decision`` entry equal to
``decision_content`` of the row (and its interrupt and run) as they are now,
a superseded one exactly one ``decision.superseded`` entry; every expired
interrupt an ``expiry`` entry, and every expiry entry's interrupt is still
expired; every agent, policy, group and user row equals its subject's last
entry (agents: URL, header and secret digests; policies: every field, their
agent, groups and users by id; groups: permissions; users: flags, group ids,
permissions; renames are not changes), a row with no entry or whose last
entry is its deletion is reported, and so is a subject whose row is gone
without a deletion entry; an entry whose decision vanished too. All users
are checked, not only holders of ``decide_interrupt``: a superuser flag or a
group with the permission is what makes one a holder. Not covered:
``Permission`` and content-type rows themselves, and the rows of other apps.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, models, transaction
from django.db.models import Max, Subquery, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone
from django.utils.crypto import salted_hmac

from ..conf import MAX_AUDIT_PROBLEMS as MAX_PROBLEMS
from ..models import (AUDIT_GENESIS, Agent, AuditCheckpoint, AuditEntry, Decision, Delivery, Event, Interrupt,
                      Policy)
from ..protocol.signing import Unsignable, canonical
from ..protocol.subagents import SUBAGENT_EVENTS, attribute, read_subagent_event

GENESIS = AUDIT_GENESIS

logger = logging.getLogger(__name__)

DECISION = "decision"
SUPERSEDED = "decision.superseded"
#: What an older decision entry did not hold of what the reviewer read, as it stood at the upgrade (0026).
CONTEXT = "decision.context"
EXPIRY = "expiry"

#: Rows read per query while verifying: memory stays flat whatever the chain's length.
CHUNK = 2000
#: An arbitrary, fixed key for pg_advisory_xact_lock: "the trail's tail".
_LOCK_KEY = 0x436F756E7465  # "Counte"

# The agent fields whose change is worth an entry: where requests go and what they carry.
_AGENT_TRACKED = ("url", "authHeader", "credentialSet", "credentialDigest", "signingSecretDigest")
# The user fields whose change is worth an entry, and those verify holds the row to
# (not the name: people get renamed, and a rename grants nothing).
_USER_TRACKED = ("username", "active", "staff", "superuser", "groupIds", "permissions")
_USER_VERIFIED = ("active", "staff", "superuser", "groupIds", "permissions")
# Keys decision_content gained after the first entries were written: an older entry
# without them is held to what it did record (the entry format is versioned by the
# keys it holds, which its hash fixes; every entry written now holds them all).
_DECISION_ADDED = ("reason", "toolName", "rawDigest", "proposedArgsDigest", "requestedBy",
                   # What the reviewer read on the card besides those (since migration 0026).
                   "messageDigest", "responseSchemaDigest", "metadataDigest", "expiresAt", "subagent")
#: The policy, as the trail last recorded it, under which the decision was taken: a reference
#: into the chain (``record_decision``), held to the chain rather than to any row.
POLICY_VERSION = "policyVersion"
# What verify calls each key of a decision entry in its messages, where the key is not plain.
_DECISION_WORDS = {
    "messageDigest": "the message (messageDigest)",
    "rawDigest": "the interrupt as the agent sent it (rawDigest)",
    "proposedArgsDigest": "the proposed args (proposedArgsDigest)",
    "responseSchemaDigest": "the response schema (responseSchemaDigest)",
    "metadataDigest": "the interrupt's metadata (metadataDigest)",
    "expiresAt": "the expiry (expiresAt)",
    "requestedBy": "who requested the run (requestedBy)",
    "toolName": "the tool name (toolName)",
    "subagent": "the subagent attribution (subagent)",
    "policy": "the policy (policy)",
    "requiredApprovals": "the approvals required (requiredApprovals)",
}


def entry_hash(prev_hash: str, content: str) -> str:
    """The hash of an entry: ``sha256:`` + hex SHA-256 over ``prev_hash`` (ASCII) then ``content`` (UTF-8)."""
    return "sha256:" + hashlib.sha256(prev_hash.encode("ascii") + content.encode("utf-8")).hexdigest()


def _time(value: datetime | None) -> str | None:
    # One spelling of a time, whatever the database hands back.
    return value.astimezone(UTC).isoformat(timespec="microseconds") if value else None


def _lock_tail() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
    # SQLite: every transaction begins IMMEDIATE (settings), holding the
    # database's one write lock already; nothing to take.


def record(kind: str, data: dict, *, subject: str, decision=None, interrupt=None, model=AuditEntry) -> AuditEntry:
    """Append one entry about ``subject`` in the caller's transaction, and return it.

    ``data`` must be JSON that RFC 8785 can canonicalise (``Unsignable``
    otherwise, which rolls the caller's change back: nothing is done
    without its entry). Serialised against every other appender until the
    transaction ends. ``model`` is for migration 0011's historical model.
    """
    with transaction.atomic(savepoint=False):
        _lock_tail()
        last = model.objects.order_by("-seq").values_list("seq", "hash").first()
        seq, prev_hash = (last[0] + 1, last[1]) if last else (1, GENESIS)
        at = timezone.now()
        content = canonical({"seq": seq, "kind": kind, "subject": subject, "at": _time(at), "data": data}).decode()
        return model.objects.create(
            seq=seq, kind=kind, subject=subject, content=content, prev_hash=prev_hash,
            hash=entry_hash(prev_hash, content), created_at=at,
            # By id: the backfill hands in historical instances.
            decision_id=decision.pk if decision is not None else None,
            interrupt_id=interrupt.pk if interrupt is not None else None,
        )


# --- what each entry says ------------------------------------------------------------------


def _username(user) -> str:
    # Historical models (the backfill in migration 0011) have no get_username().
    return user.get_username() if hasattr(user, "get_username") else user.username


def _fallback_json(value) -> bytes:
    # Total where RFC 8785 is not: lone surrogates escaped, any integer, NaN;
    # sorted keys, so a row's stand-in is the same whatever order jsonb keeps.
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=repr).encode()


def signable(value):
    """``value`` if RFC 8785 can canonicalise it; else ``{"unsignable": true, "sha256": <hex>}`` standing in for it.

    Rows stored before such input was refused (a lone surrogate, an integer
    beyond 2^53) still get their entry, and the stand-in, a digest of a
    lossless JSON spelling, still changes when the row does.
    """
    try:
        canonical(value)
    except Unsignable:
        return {"unsignable": True, "sha256": hashlib.sha256(_fallback_json(value)).hexdigest()}
    return value


def _signable_fields(data: dict) -> dict:
    # The usual case costs one canonicalisation; otherwise each field stands alone.
    try:
        canonical(data)
    except Unsignable:
        return {key: signable(value) for key, value in data.items()}
    return data


def value_digest(value) -> str | None:
    """``sha256:`` + hex SHA-256 of ``value``'s canonical JSON (``unsignable:sha256:`` + a lossless spelling's)."""
    if value is None:
        return None
    try:
        return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()
    except Unsignable:
        return "unsignable:sha256:" + hashlib.sha256(_fallback_json(value)).hexdigest()


def _subagents(interrupts, events) -> dict[int, dict | None]:
    """The subagent the inbox names as having raised each interrupt (``protocol.subagents``), by pk."""
    names: dict = {}
    suspended: dict = {}
    for run_pk, kind, payload in events.filter(type__in=SUBAGENT_EVENTS).order_by("seq").values_list(
            "run_id", "type", "payload"):
        read_subagent_event(run_pk, kind, payload, names, suspended)
    found = {}
    for interrupt in interrupts:
        who = attribute(interrupt.run_id, interrupt.interrupt_id, interrupt.raw, names, suspended)
        found[interrupt.pk] = None if who is None else {"runId": signable(who[0]), "name": signable(who[1])}
    return found


def _subagent(interrupt) -> dict | None:
    # By the related manager, not the Event model: the backfill hands in historical instances.
    return _subagents([interrupt], interrupt.run.events.all())[interrupt.pk]


def decision_content(decision, subagent=...) -> dict:
    """What a decision's entry records: where, who, what, under which policy, when. Never ``superseded_at``.

    With the interrupt as the reviewer read it (reason, tool, digests of
    its message and of what the agent sent, proposed, asked for and attached, its
    expiry, the subagent it came from) and who requested the run (whom
    self-approval excludes): none of them changes after the interrupt is
    raised, so a row rewritten later no longer matches its decisions'
    entries. ``subagent``: ``_subagent(interrupt)`` when the caller read it
    already (verify reads a chunk's at once).
    """
    interrupt = decision.interrupt
    run = interrupt.run
    return _signable_fields({
        "decision": decision.pk,
        "threadId": run.thread.thread_id,
        "runId": run.run_id,
        "interruptId": interrupt.interrupt_id,
        "toolCallId": interrupt.tool_call_id or None,
        "reason": interrupt.reason,
        "messageDigest": value_digest(interrupt.message),
        "toolName": interrupt.tool_name or None,
        "rawDigest": value_digest(interrupt.raw),
        "proposedArgsDigest": value_digest(interrupt.proposed_args),
        "responseSchemaDigest": value_digest(interrupt.response_schema),
        "metadataDigest": value_digest(interrupt.metadata),
        "expiresAt": _time(interrupt.expires_at),
        "subagent": _subagent(interrupt) if subagent is ... else subagent,
        "requestedBy": run.requested_by_id,
        "user": {"id": decision.user_id, "username": signable(_username(decision.user))},
        "action": decision.action,
        "status": decision.status,
        "payload": decision.payload,
        "editedArgs": decision.edited_args,
        "metadata": decision.metadata,
        "comment": decision.comment,
        "policy": decision.policy,
        "requiredApprovals": decision.required_approvals,
        "createdAt": _time(decision.created_at),
    })


def superseded_content(decision) -> dict:
    """What a supersession entry records: which decision stopped counting, and when."""
    return _signable_fields({"decision": decision.pk, "interruptId": decision.interrupt.interrupt_id,
                             "supersededAt": _time(decision.superseded_at)})


def expiry_content(interrupt) -> dict:
    """What an expiry entry records: the interrupt, when it was due, when and why it closed."""
    run = interrupt.run
    return _signable_fields({
        "interrupt": interrupt.pk,
        "threadId": run.thread.thread_id,
        "runId": run.run_id,
        "interruptId": interrupt.interrupt_id,
        "toolCallId": interrupt.tool_call_id or None,
        "status": interrupt.status,
        "expiresAt": _time(interrupt.expires_at),
        "closedAt": _time(interrupt.closed_at),
        "closedReason": interrupt.closed_reason,
    })


def _digest(secret: str, key: str | None = None) -> str | None:
    # Keyed (SECRET_KEY), not a bare SHA-256: a credential may be a guessable
    # password, and whoever holds an export must not be able to test guesses.
    # Short: it only has to show that the secret changed. Bytes with
    # surrogatepass: the same as UTF-8 for any encodable text, total otherwise.
    if not secret:
        return None
    mac = salted_hmac("countersign.trail", secret.encode("utf-8", "surrogatepass"), secret=key, algorithm="sha256")
    return "hmac-sha256:" + mac.hexdigest()[:16]


def _digests(secret: str) -> set[str | None]:
    # What a recorded digest of ``secret`` may be: under SECRET_KEY or a key it replaced.
    return {_digest(secret, key) for key in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]}


def agent_content(agent) -> dict:
    """What an agent entry records: name, URL, header, and digests of its secrets, never the secrets."""
    return _signable_fields({
        "agent": agent.pk,
        "name": agent.name,
        "url": agent.url,
        "authHeader": agent.auth_header,
        "credentialSet": bool(agent.auth_value),
        "credentialDigest": _digest(agent.auth_value),
        "signingSecretDigest": _digest(agent.signing_secret),
    })


def policy_content(policy) -> dict:
    """What a policy entry records: every field; its agent, groups and users by id and as sorted names."""
    groups, users = list(policy.groups.all()), list(policy.users.all())
    restricted = {"restricted": policy.restricted} if hasattr(policy, "restricted") else {}  # since 0015
    backup = {"backupGroupId": policy.backup_group_id,  # since 0020
              "backupGroup": policy.backup_group.name if policy.backup_group_id else None,
              } if hasattr(policy, "backup_group_id") else {}
    return _signable_fields({
        **restricted,
        "policy": policy.pk,
        "name": policy.name,
        "agentId": policy.agent_id,
        "agent": policy.agent.name if policy.agent_id else None,
        "reason": policy.reason,
        "toolName": policy.tool_name,
        "groupIds": sorted(g.pk for g in groups),
        "groups": sorted(g.name for g in groups),
        "userIds": sorted(u.pk for u in users),
        "users": sorted(_username(u) for u in users),
        "requiredApprovals": policy.required_approvals,
        "allowSelfApproval": policy.allow_self_approval,
        "targetMinutes": policy.target_minutes,
        **backup,
    })


def _permissions(permissions) -> list[str]:
    return sorted(f"{p.content_type.app_label}.{p.codename}" for p in permissions)


def user_content(user) -> dict:
    """What a user entry records: the flags and memberships that decide what they may do, never the password."""
    groups = list(user.groups.all())
    return _signable_fields({
        "user": user.pk,
        "username": _username(user),
        "active": user.is_active,
        "staff": user.is_staff,
        "superuser": user.is_superuser,
        "groupIds": sorted(g.pk for g in groups),
        "groups": sorted(g.name for g in groups),
        "permissions": _permissions(user.user_permissions.all()),
    })


def group_content(group) -> dict:
    """What a group entry records: its name and permissions (``app_label.codename``, sorted)."""
    return _signable_fields({"group": group.pk, "name": group.name, "permissions": _permissions(group.permissions.all())})


# --- what decisions call -------------------------------------------------------------------


def record_supersessions(interrupt) -> list[AuditEntry]:
    """Append a ``decision.superseded`` entry for each decision of ``interrupt`` superseded and not yet recorded."""
    recorded = AuditEntry.objects.filter(interrupt_id=interrupt.pk, kind=SUPERSEDED).values("decision_id")
    made = []
    for old in (Decision.objects.filter(interrupt_id=interrupt.pk, superseded_at__isnull=False)
                .exclude(pk__in=recorded).select_related("interrupt").order_by("pk")):
        made.append(record(SUPERSEDED, superseded_content(old), subject=f"decision:{old.pk}",
                           decision=old, interrupt=old.interrupt))
    return made


def record_decision(decision, *, superseded: bool = True) -> AuditEntry:
    """Append ``decision``'s entry (after one for each decision it superseded); call inside its transaction.

    ``superseded`` False: the caller superseded nothing in this transaction, so
    there is nothing to look for (every supersession is recorded in its own).
    """
    if superseded:
        record_supersessions(decision.interrupt)
    data = {**decision_content(decision), POLICY_VERSION: policy_version(decision.policy)}
    return record(DECISION, data, subject=f"decision:{decision.pk}", decision=decision, interrupt=decision.interrupt)


def policy_version(name: str) -> dict | None:
    """The policy named ``name`` as the trail last recorded it: ``{"policy": pk, "seq", "hash"}`` of that entry.

    None for the site default (no row). A decision's entry holds it, so the
    chain says exactly which version of the policy admitted the reviewer
    (``decisions`` checks eligibility against the policies in force, and
    every change of one is an entry before it is in force).
    """
    # One statement: it runs under the decision's lock.
    pk = Cast(Subquery(Policy.objects.filter(name=name).values("pk")[:1]), models.CharField())
    last = (AuditEntry.objects.filter(subject=Concat(Value("policy:"), pk)).order_by("-seq")
            .values_list("subject", "seq", "hash").first())
    if last is None:
        return None  # the site default (a policy with no entry at all is verify's to report)
    subject, seq, entry = last
    return {"policy": int(subject.partition(":")[2]), "seq": seq, "hash": entry}


def record_expiry(interrupt) -> AuditEntry | None:
    """Append ``interrupt``'s expiry entry, as stored now; None if it is not expired (nothing to record).

    Re-reads the row: ``expire_due`` closes interrupts with a queryset
    ``update()``, so the caller's instance still says pending.
    """
    current = Interrupt.objects.select_related("run__thread").get(pk=interrupt.pk)
    if current.status != Interrupt.Status.EXPIRED:
        return None
    return record(EXPIRY, expiry_content(current), subject=f"interrupt:{current.pk}", interrupt=current)


# --- agent and policy changes (signal receivers, connected in apps.py) ---------------------------


def _last_data(subject: str) -> dict | None:
    last = AuditEntry.objects.filter(subject=subject).order_by("-seq").values_list("content", flat=True).first()
    return json.loads(last)["data"] if last else None


def agent_saved(sender, instance, created, raw=False, **kwargs) -> None:
    """post_save of Agent: an entry when it is new or its URL, header, credential or signing secret changed."""
    if raw:
        return
    subject, data = f"agent:{instance.pk}", agent_content(instance)
    if not created:
        last = _last_data(subject)
        if last is not None and all(last.get(k) == data[k] for k in _AGENT_TRACKED):
            return
    record("agent.created" if created else "agent.changed", data, subject=subject)


def agent_deleted(sender, instance, **kwargs) -> None:
    """post_delete of Agent: an entry naming the agent that went."""
    record("agent.deleted", {"agent": instance.pk, "name": instance.name}, subject=f"agent:{instance.pk}")


def _policy_changed(policy, kind: str) -> None:
    subject, data = f"policy:{policy.pk}", policy_content(policy)
    if kind != "policy.created" and _last_data(subject) == data:
        return  # a save that changed nothing, e.g. the admin's save before it sets the groups
    record(kind, data, subject=subject)


def policy_saved(sender, instance, created, raw=False, **kwargs) -> None:
    """post_save of Policy: an entry with every field, unless nothing changed since the last one."""
    if not raw:
        _policy_changed(instance, "policy.created" if created else "policy.changed")


def policy_members_changed(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    """m2m_changed of Policy.groups and Policy.users: an entry with the new members."""
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if not reverse:
        _policy_changed(instance, "policy.changed")
    elif pk_set:  # from the group's or user's side: each policy it joined or left
        for policy in Policy.objects.filter(pk__in=pk_set):
            _policy_changed(policy, "policy.changed")


def policy_deleted(sender, instance, **kwargs) -> None:
    """post_delete of Policy: an entry naming the policy that went."""
    record("policy.deleted", {"policy": instance.pk, "name": instance.name}, subject=f"policy:{instance.pk}")


# --- who may decide: users, groups, permissions (signal receivers, connected in apps.py) -----


def _users():
    from django.contrib.auth.models import Permission
    from django.db.models import Prefetch

    return get_user_model().objects.prefetch_related(
        "groups", Prefetch("user_permissions", queryset=Permission.objects.select_related("content_type")))


def _groups():
    from django.contrib.auth.models import Permission
    from django.db.models import Prefetch

    return Group.objects.prefetch_related(
        Prefetch("permissions", queryset=Permission.objects.select_related("content_type")))


def _record_if_changed(subject: str, data: dict, tracked: tuple[str, ...], created: str, changed: str) -> None:
    last = _last_data(subject)
    if last is None:
        record(created, data, subject=subject)
    elif any(last.get(k) != data.get(k) for k in tracked):
        record(changed, data, subject=subject)


def _record_user(pk) -> None:
    # Read afresh: a receiver's instance may hold memberships cached before the change.
    if (user := _users().filter(pk=pk).first()) is not None:
        _record_if_changed(f"user:{pk}", user_content(user), _USER_TRACKED, "user.created", "user.changed")


def _record_group(pk) -> None:
    if (group := _groups().filter(pk=pk).first()) is not None:
        _record_if_changed(f"group:{pk}", group_content(group), ("name", "permissions"),
                           "group.created", "group.changed")


def user_saved(sender, instance, created, raw=False, update_fields=None, **kwargs) -> None:
    """post_save of User: an entry when it is new or its name, active/staff/superuser flags changed."""
    if raw or (update_fields is not None and set(update_fields) <= {"last_login", "password"}):
        return  # a login or a new password changes nothing the trail holds (and every login saves)
    _record_user(instance.pk)


def group_saved(sender, instance, created, raw=False, **kwargs) -> None:
    """post_save of Group: an entry when it is new or renamed."""
    if not raw:
        _record_group(instance.pk)


def _policies_naming(field: str, pk) -> list[int]:
    return list(Policy.objects.filter(**{field: pk}).values_list("pk", flat=True))


def access_deleting(sender, instance, **kwargs) -> None:
    """pre_delete of User, Group and Permission: note whom and which policies the row's memberships touch.

    Deleting the row deletes its membership rows with no m2m_changed; the
    post_delete receiver records each of them as changed.
    """
    from django.contrib.auth.models import Permission

    if isinstance(instance, Permission):
        touched = (list(instance.user_set.values_list("pk", flat=True)),
                   list(instance.group_set.values_list("pk", flat=True)), [])
    elif isinstance(instance, Group):
        touched = (list(instance.user_set.values_list("pk", flat=True)), [],
                   _policies_naming("groups", instance.pk) + _policies_naming("backup_group", instance.pk))
    else:
        touched = ([], [], _policies_naming("users", instance.pk))
    instance._countersign_touched = touched


def access_deleted(sender, instance, **kwargs) -> None:
    """post_delete of User, Group and Permission: an entry for the row that went, then each one it touched."""
    from django.contrib.auth.models import Permission

    users, groups, policies = getattr(instance, "_countersign_touched", ([], [], []))
    if isinstance(instance, Group):
        record("group.deleted", {"group": instance.pk, "name": instance.name}, subject=f"group:{instance.pk}")
    elif not isinstance(instance, Permission):
        record("user.deleted", {"user": instance.pk, "username": signable(_username(instance))},
               subject=f"user:{instance.pk}")
    for pk in users:
        _record_user(pk)
    for pk in groups:
        _record_group(pk)
    for policy in Policy.objects.filter(pk__in=policies).select_related("agent"):
        _policy_changed(policy, "policy.changed")


def access_members_changed(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
    """m2m_changed of User.groups, User.user_permissions and Group.permissions, from either side.

    The entry is about the user (groups, permissions) or the group
    (permissions): from the other side (``group.user_set.add``,
    ``permission.group_set.clear()``) each one added or removed.
    """
    user_model = get_user_model()
    if sender is Group.permissions.through:
        owner_field, other_field, record_owner = "group", "permission", _record_group
    else:
        owner_field = user_model._meta.model_name
        other_field = "group" if sender is user_model.groups.through else "permission"
        record_owner = _record_user
    if reverse and action == "pre_clear":
        # pk_set is None at post_clear: who is about to lose the membership, now.
        instance._countersign_cleared = list(sender.objects.filter(**{f"{other_field}_id": instance.pk})
                                             .values_list(f"{owner_field}_id", flat=True))
        return
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if not reverse:
        owners = [instance.pk]
    else:
        owners = getattr(instance, "_countersign_cleared", []) if action == "post_clear" else sorted(pk_set or ())
    for pk in owners:
        record_owner(pk)


# --- verification ------------------------------------------------------------------------


@dataclass
class Problem:
    """One thing verification found wrong; ``seq`` is the entry it concerns, when there is one."""

    seq: int | None
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class Verification:
    """What ``verify`` found: how many entries hold, the head, and the problems, the first broken entry first."""

    entries: int = 0
    head_seq: int = 0
    head_hash: str = GENESIS
    problems: list[Problem] = field(default_factory=list)
    more: int = 0  # problems past MAX_PROBLEMS, counted only

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.problems

    @property
    def first(self) -> Problem | None:
        """The first broken or missing entry (or row), the one to look at first."""
        return self.problems[0] if self.problems else None

    def add(self, problem: Problem) -> None:
        """Note a problem, keeping at most MAX_PROBLEMS."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.more += 1


def _entries(after: int) -> Iterator[tuple]:
    while True:
        chunk = list(AuditEntry.objects.filter(seq__gt=after).order_by("seq").values_list(
            "seq", "kind", "subject", "content", "prev_hash", "hash", "created_at")[:CHUNK])
        yield from chunk
        if len(chunk) < CHUNK:
            return
        after = chunk[-1][0]


def _walk(result: Verification, after: int, prev_hash: str, limit: int | None = None,
          progress: Callable[[int], None] | None = None) -> Problem | None:
    """Check the links from entry ``after + 1``; extend ``result``'s head; return the first break, if any."""
    expected = after + 1
    for seq, kind, subject, content, stored_prev, stored_hash, created_at in _entries(after):
        if limit is not None and result.entries >= limit:
            return None
        if seq != expected:
            return Problem(expected, f"entry {expected} is missing: the chain goes from entry {expected - 1} to {seq}")
        if entry_hash(stored_prev, content) != stored_hash:
            return Problem(seq, f"entry {seq} is broken: its hash does not match its content (the entry was edited)")
        try:
            said = json.loads(content)
            same = (said["seq"], said["kind"], said["subject"]) == (seq, kind, subject) and \
                datetime.fromisoformat(said["at"]) == created_at
        except (ValueError, KeyError, TypeError):
            said, same = {}, False
        if said.get("seq") not in (None, seq):
            return Problem(seq, f"entry {seq} is out of place: its content says it is entry {said['seq']} "
                                "(entries were reordered)")
        if stored_prev != prev_hash:
            return Problem(seq, f"entry {seq} is broken: its prev_hash is not entry {seq - 1}'s hash "
                                "(an entry before it was changed, removed or moved)")
        if not same:
            return Problem(seq, f"entry {seq} is broken: its seq, kind, subject or time differ from its content")
        prev_hash, expected = stored_hash, seq + 1
        result.entries += 1
        result.head_seq, result.head_hash = seq, stored_hash
        if progress and result.entries % 10_000 == 0:
            progress(result.entries)
    return None


def _comparable(data: dict, recorded: dict) -> dict:
    # The username is a snapshot of who decided, as they were named then;
    # people get renamed, so the row is matched by user id. Keys added to
    # decision_content since ``recorded`` was written are not held against it. The
    # policy version is a reference into the chain, checked against it (``_check_policy_versions``).
    data = {k: v for k, v in data.items()
            if (k in recorded or k not in _DECISION_ADDED) and k != POLICY_VERSION}
    if isinstance(data.get("user"), dict):
        data["user"] = {"id": data["user"].get("id")}
    return data


def _differs(recorded: dict, now: dict, words: dict | None = None) -> str:
    keys = sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))
    return ", ".join((words or {}).get(k, k) for k in keys)


def _check_decisions(result: Verification) -> None:
    after = 0
    while True:
        chunk = list(Decision.objects.filter(pk__gt=after).select_related("interrupt__run__thread", "user")
                     .order_by("pk")[:CHUNK])
        if not chunk:
            return
        after = chunk[-1].pk
        entries: dict[tuple[int, str], list[tuple[int, dict]]] = {}
        for seq, kind, decision_pk, content in AuditEntry.objects.filter(
            decision_id__in=[d.pk for d in chunk], kind__in=(DECISION, SUPERSEDED, CONTEXT)
        ).order_by("seq").values_list("seq", "kind", "decision_id", "content"):
            entries.setdefault((decision_pk, kind), []).append((seq, json.loads(content)["data"]))
        for (decision_pk, kind), found in list(entries.items()):
            # An older entry, completed by what the upgrade recorded of the rest (``backfill_context``).
            if kind == DECISION and (context := entries.get((decision_pk, CONTEXT))):
                entries[(decision_pk, kind)] = [(found[0][0], {**context[0][1], **found[0][1]}), *found[1:]]
        interrupts = {d.interrupt_id: d.interrupt for d in chunk}.values()
        subagents = _subagents(interrupts, Event.objects.filter(run_id__in={i.run_id for i in interrupts}))
        for decision in chunk:
            _check_one(result, decision, DECISION, entries.get((decision.pk, DECISION), []),
                       decision_content(decision, subagents[decision.interrupt_id]), required=True)
            _check_one(result, decision, SUPERSEDED, entries.get((decision.pk, SUPERSEDED), []),
                       superseded_content(decision) if decision.superseded_at else None,
                       required=decision.superseded_at is not None)
        _check_policy_versions(result, chunk, entries)


def _decision_name(decision) -> str:
    return (f"decision {decision.pk} ({decision.interrupt.interrupt_id} in thread "
            f"{decision.interrupt.run.thread.thread_id}, by {_username(decision.user)})")


def _check_policy_versions(result: Verification, chunk: list, entries: dict) -> None:
    # Within the chain: a decision entry's policy version must cite an earlier
    # entry about that policy under the name the decision entry gives (the row
    # is held to that name by ``_check_one``).
    cited = {}
    for decision in chunk:
        for seq, data in entries.get((decision.pk, DECISION), [])[:1]:
            if isinstance(version := data.get(POLICY_VERSION), dict) and version.get("seq") is not None:
                cited[decision.pk] = (seq, data.get("policy"), version)
    found = {at: (subject, entry, json.loads(content)["data"]) for at, subject, entry, content in
             AuditEntry.objects.filter(seq__in=[v["seq"] for _, _, v in cited.values()])
             .values_list("seq", "subject", "hash", "content")}
    for decision in chunk:
        if decision.pk not in cited:
            continue
        seq, name, version = cited[decision.pk]
        subject, entry, data = found.get(version["seq"], (None, None, {}))
        if (subject != f"policy:{version.get('policy')}" or entry != version.get("hash")
                or version["seq"] >= seq or data.get("name") != name):
            result.add(Problem(seq, f"entry {seq}: {_decision_name(decision)} was taken under policy {name!r}, "
                                    f"but the policy version it cites (entry {version['seq']}) is not that "
                                    "policy as recorded before it"))


def _check_one(result: Verification, decision, kind: str, found: list, now: dict | None, required: bool) -> None:
    name = _decision_name(decision)
    if not found:
        if required:
            what = "entry" if kind == DECISION else "supersession entry"
            result.add(Problem(None, f"{name} has no {what} in the trail (it was written around the trail)"))
        return
    if now is None:
        result.add(Problem(found[0][0], f"entry {found[0][0]} records {name} as superseded, but the row is live "
                                        "(the row was changed)"))
        return
    if len(found) > 1:
        result.add(Problem(found[1][0], f"entry {found[1][0]} records {name} again (entries "
                                        f"{', '.join(str(s) for s, _ in found)})"))
    seq, recorded = found[0]
    if (was := _comparable(recorded, recorded)) != (is_ := _comparable(now, recorded)):
        result.add(Problem(seq, f"entry {seq}: {name} no longer matches what was recorded "
                                f"({_differs(was, is_, _DECISION_WORDS)} changed in the row)"))


def _check_vanished(result: Verification) -> None:
    for seq, decision_pk in (AuditEntry.objects.filter(kind__in=(DECISION, SUPERSEDED, CONTEXT))
                             .exclude(decision_id__in=Decision.objects.values("pk"))
                             .order_by("seq").values_list("seq", "decision_id")[:MAX_PROBLEMS]):
        result.add(Problem(seq, f"entry {seq} records decision {decision_pk}, which no longer exists (it was deleted)"))


def _check_expiries(result: Verification) -> None:
    after = 0
    expired = Interrupt.objects.filter(status=Interrupt.Status.EXPIRED).select_related("run__thread")
    while True:
        chunk = list(expired.filter(pk__gt=after).order_by("pk")[:CHUNK])
        if not chunk:
            return
        after = chunk[-1].pk
        latest: dict[int, tuple[int, dict]] = {}
        for seq, interrupt_pk, content in AuditEntry.objects.filter(
            interrupt_id__in=[i.pk for i in chunk], kind=EXPIRY
        ).order_by("seq").values_list("seq", "interrupt_id", "content"):
            latest[interrupt_pk] = (seq, json.loads(content)["data"])
        for interrupt in chunk:
            if interrupt.pk not in latest:
                result.add(Problem(None, f"interrupt {interrupt.pk} ({interrupt.interrupt_id}) expired "
                                         "without an entry in the trail"))
            elif latest[interrupt.pk][1] != (now := expiry_content(interrupt)):
                seq, recorded = latest[interrupt.pk]
                result.add(Problem(seq, f"entry {seq}: interrupt {interrupt.interrupt_id} no longer matches its "
                                        f"expiry ({_differs(recorded, now)} changed in the row)"))


def _check_expiry_entries(result: Verification) -> None:
    # The other way round: an interrupt recorded as expired must still be
    # expired (not rewritten to cancelled or resolved) and still exist.
    after = 0
    while True:
        chunk = list(AuditEntry.objects.filter(kind=EXPIRY, seq__gt=after).order_by("seq")
                     .values_list("seq", "interrupt_id")[:CHUNK])
        if not chunk:
            return
        after = chunk[-1][0]
        status = dict(Interrupt.objects.filter(pk__in=[pk for _, pk in chunk]).values_list("pk", "status"))
        for seq, pk in chunk:
            if pk not in status:
                result.add(Problem(seq, f"entry {seq} records interrupt {pk}'s expiry, but the interrupt "
                                        "no longer exists (it was deleted)"))
            elif status[pk] != Interrupt.Status.EXPIRED:
                result.add(Problem(seq, f"entry {seq} records interrupt {pk} as expired, but the row says "
                                        f"{status[pk]} (the row was changed)"))


# --- agents, policies, users and groups: each row against its subject's last entry -------------


def _agent_differs(recorded: dict, now: dict, row) -> list[str]:
    # Where requests go and what they carry; the name is not tracked (a rename
    # is no entry). A digest made under a key SECRET_KEY_FALLBACKS still
    # lists is as good as one under SECRET_KEY.
    differs = [k for k in ("url", "authHeader", "credentialSet") if recorded.get(k) != now.get(k)]
    for key, secret in (("credentialDigest", row.auth_value), ("signingSecretDigest", row.signing_secret)):
        if recorded.get(key) not in _digests(secret):
            differs.append(key)
    return differs


def _policy_differs(recorded: dict, now: dict, row) -> list[str]:
    # Agents, groups and users by id where the entry has them (renaming them
    # is no change of the policy), by name in entries written before; a key
    # an older entry lacks is not held against the row, except ``restricted``:
    # before it was a field, a policy was restricted exactly when it named people.
    skip = {"agent"} if "agentId" in recorded else set()
    skip |= {"groups"} if "groupIds" in recorded else set()
    skip |= {"users"} if "userIds" in recorded else set()
    skip |= {"backupGroup"} if "backupGroupId" in recorded else set()
    if "restricted" in now and "restricted" not in recorded:
        recorded = {**recorded, "restricted": bool(recorded.get("groups") or recorded.get("users"))}
    return sorted(k for k in recorded if k not in skip and recorded[k] != now.get(k))


def _fields_differ(*keys: str) -> Callable[[dict, dict, object], list[str]]:
    return lambda recorded, now, row: [k for k in keys if recorded.get(k) != now.get(k)]


@dataclass(frozen=True)
class _Family:
    """Rows of one model whose every change is an entry about ``<prefix>:<pk>``."""

    prefix: str
    rows: Callable[[], object]  # a queryset, read in chunks of CHUNK
    content: Callable[[object], dict]
    differs: Callable[[dict, dict, object], list[str]]
    label: Callable[[object], str]


def _families() -> list[_Family]:
    return [
        _Family("agent", lambda: Agent.objects.all(), agent_content, _agent_differs, lambda a: a.name),
        _Family("policy",
                lambda: Policy.objects.select_related("agent", "backup_group").prefetch_related("groups", "users"),
                policy_content, _policy_differs, lambda p: p.name),
        _Family("group", _groups, group_content, _fields_differ("permissions"), lambda g: g.name),
        _Family("user", _users, user_content, _fields_differ(*_USER_VERIFIED), _username),
    ]


def _last_entries(subjects: list[str]) -> dict[str, tuple[int, str, dict]]:
    """The last entry about each of ``subjects``: subject → (seq, kind, data)."""
    last = (AuditEntry.objects.filter(subject__in=subjects).order_by().values("subject")
            .annotate(last=Max("seq")).values("last"))
    return {subject: (seq, kind, json.loads(content)["data"]) for seq, kind, subject, content in
            AuditEntry.objects.filter(seq__in=Subquery(last)).values_list("seq", "kind", "subject", "content")}


def _check_rows(result: Verification, family: _Family) -> None:
    # Every row: its last entry exists, is not a deletion, and says what the row says now.
    after = 0
    while True:
        chunk = list(family.rows().filter(pk__gt=after).order_by("pk")[:CHUNK])
        if not chunk:
            return
        after = chunk[-1].pk
        last = _last_entries([f"{family.prefix}:{row.pk}" for row in chunk])
        for row in chunk:
            name = f"{family.prefix} {row.pk} ({family.label(row)})"
            if (found := last.get(f"{family.prefix}:{row.pk}")) is None:
                result.add(Problem(None, f"{name} has no entry in the trail (it was written around the trail)"))
                continue
            seq, kind, recorded = found
            if kind == f"{family.prefix}.deleted":
                result.add(Problem(seq, f"entry {seq} records {name} as deleted, but the row exists "
                                        "(it was put back around the trail)"))
            elif differs := family.differs(recorded, family.content(row), row):
                result.add(Problem(seq, f"entry {seq}: {name} no longer matches what was recorded "
                                        f"({', '.join(differs)} changed in the row)"))


def _check_gone(result: Verification, family: _Family) -> None:
    # Every subject whose last entry is not its deletion: the row is still there.
    model, after = family.rows().model, ""
    while True:
        lasts = list(AuditEntry.objects.filter(subject__startswith=f"{family.prefix}:", subject__gt=after)
                     .order_by("subject").values("subject").annotate(last=Max("seq"))
                     .values_list("subject", "last")[:CHUNK])
        if not lasts:
            return
        after = lasts[-1][0]
        live = {subject: (seq, json.loads(content)["data"]) for seq, subject, content in
                AuditEntry.objects.filter(seq__in=[seq for _, seq in lasts])
                .exclude(kind=f"{family.prefix}.deleted").values_list("seq", "subject", "content")}
        pks = {subject: int(subject.partition(":")[2]) for subject in live if subject.partition(":")[2].isdigit()}
        there = set(model.objects.filter(pk__in=pks.values()).values_list("pk", flat=True))
        for subject, pk in pks.items():
            if pk not in there:
                seq, data = live[subject]
                named = data.get("name") or data.get("username") or pk
                result.add(Problem(seq, f"entry {seq} records {family.prefix} {pk} ({named}), which no longer "
                                        "exists: it was deleted without an entry (around the trail)"))


@dataclass(frozen=True)
class Head:
    """The newest entry of the chain, spelt ``SEQ:HASH`` as ``audit verify --expect-head`` takes it."""

    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"

    def as_dict(self) -> dict:
        return {"seq": self.seq, "hash": self.hash}

    @classmethod
    def parse(cls, text: str) -> Head:
        """``SEQ:HASH`` as printed by ``audit verify`` and carried by exports and webhooks; ValueError otherwise."""
        seq, _, digest = text.strip().partition(":")
        if not (seq.isdigit() and digest.startswith("sha256:") and len(digest) == 71
                and all(c in "0123456789abcdef" for c in digest[7:])):
            raise ValueError(f"{text!r} is not a head: expected SEQ:sha256:<64 hex digits>, "
                             "as `audit verify` prints it")
        return cls(int(seq), digest)


def head() -> Head:
    """The chain's head now (``0:GENESIS`` when empty): what every export and webhook delivery carries.

    Each copy kept outside the database is an anchor: a tail deleted or a
    chain rewritten after it no longer has that entry at that seq, which
    ``verify(expect=[...])`` reports.
    """
    last = AuditEntry.objects.order_by("-seq").values_list("seq", "hash").first()
    return Head(*last) if last else Head(0, GENESIS)


def _against_anchor(anchor: Head) -> Problem | None:
    # The database alone cannot show its newest entries gone, nor a chain
    # recomputed whole: a head kept outside it can.
    if anchor.seq == 0:
        return None
    stored = AuditEntry.objects.filter(seq=anchor.seq).values_list("hash", flat=True).first()
    if stored is None:
        last = AuditEntry.objects.aggregate(last=Max("seq"))["last"] or 0
        if last >= anchor.seq:
            return Problem(anchor.seq, f"entry {anchor.seq}, the head expected ({anchor}), is missing "
                                       "(entries were removed from the middle of the chain)")
        return Problem(anchor.seq, f"entry {anchor.seq}, the head expected ({anchor}), is missing: the trail ends "
                                   f"at entry {last}, so its newest {anchor.seq - last} entries were deleted")
    if stored != anchor.hash:
        return Problem(anchor.seq, f"entry {anchor.seq} is not the head expected ({anchor}): its hash is now "
                                   f"{stored} (the chain was rewritten up to there)")
    return None


def _delivered_head() -> Head | None:
    """The head the newest webhook delivery carried (its receiver holds a copy), or None."""
    body = Delivery.objects.order_by("-pk").values_list("body", flat=True).first()
    try:
        carried = json.loads(body)["auditHead"] if body else None
        return Head(int(carried["seq"]), str(carried["hash"])) if carried else None
    except (ValueError, KeyError, TypeError):
        return None  # a body from before deliveries carried the head


def _against_checkpoint(checkpoint: AuditCheckpoint | None) -> Problem | None:
    # The links alone cannot show a chain recomputed from an edit onwards;
    # the head verified last time can.
    if checkpoint is None or checkpoint.seq == 0:
        return None
    stored = AuditEntry.objects.filter(seq=checkpoint.seq).values_list("hash", flat=True).first()
    when = f"{checkpoint.verified_at:%Y-%m-%d %H:%M:%S} UTC"
    if stored is None:
        return Problem(checkpoint.seq, f"entry {checkpoint.seq}, verified at {when}, is missing "
                                       "(the trail was cut short)")
    if stored != checkpoint.hash:
        return Problem(checkpoint.seq, f"entry {checkpoint.seq} changed since it was verified at {when} "
                                       "(the chain was rewritten up to there)")
    return None


def _save(result: Verification, complete: bool, chain_ok: bool) -> None:
    # A broken chain never moves the checkpoint: back to a truncated head it
    # would make the next verification pass. The problem is kept beside it.
    defaults = {"complete": complete, "problem": "\n".join(p.message for p in result.problems)}
    if chain_ok or not AuditCheckpoint.objects.filter(pk=1).exists():
        defaults.update(seq=result.head_seq, hash=result.head_hash, verified_at=timezone.now())
        _log_head(result, "whole" if complete else "links")
    AuditCheckpoint.objects.update_or_create(pk=1, defaults=defaults)


def _log_head(result: Verification, how: str) -> None:
    # An append-only anchor outside the database, where logs are shipped: a
    # later ``audit verify --expect-head`` with any logged head finds a cut tail.
    logger.info("audit trail verified (%s) through head %s", how, Head(result.head_seq, result.head_hash))


def verify(progress: Callable[[int], None] | None = None, save: bool = True,
           expect: Iterable[Head] = ()) -> Verification:
    """Recompute the whole chain from entry 1 and cross-check every decision and expiry against it.

    Memory is bounded by ``CHUNK`` rows whatever the trail's length.
    ``progress`` is called with the count every 10,000 entries. ``expect``:
    heads seen outside the database (an export, a webhook delivery, a log
    line); each must still be in the chain, with its hash. With ``save``, the
    result becomes the checkpoint the audit page shows (the head reached,
    through the last intact entry), unless the chain itself is broken.
    """
    result = Verification()
    checkpoint = AuditCheckpoint.objects.filter(pk=1).first()
    if broken := _walk(result, 0, GENESIS, progress=progress):
        result.add(broken)
    elif moved := _against_checkpoint(checkpoint):
        result.add(moved)
    for anchor in expect:
        if (cut := _against_anchor(anchor)) is not None:
            result.add(cut)
    # Its receiver kept it: a tail cut without scrubbing the deliveries too shows here, unasked.
    if (delivered := _delivered_head()) is not None and (cut := _against_anchor(delivered)) is not None:
        result.add(Problem(cut.seq, f"the newest webhook delivery carried head {delivered}: {cut.message}"))
    chain_ok = result.ok
    cross = Verification()
    _check_decisions(cross)
    _check_vanished(cross)
    _check_expiries(cross)
    _check_expiry_entries(cross)
    for family in _families():
        _check_rows(cross, family)
        _check_gone(cross, family)
    # Problems naming an entry in chain order; rows with no entry at all after them.
    for problem in sorted(cross.problems, key=lambda p: (p.seq is None, p.seq or 0)):
        result.add(problem)
    result.more += cross.more
    if save:
        _save(result, complete=True, chain_ok=chain_ok)
    return result


def verify_recent(limit: int = 1000) -> tuple[AuditCheckpoint | None, Problem | None]:
    """Extend the last verification by at most ``limit`` new entries (links only), for the audit page.

    Returns the checkpoint (None when the trail was never verified and is
    empty) and what is wrong, if anything: the page stays cheap whatever the
    trail's length, and ``manage.py audit verify`` does the whole work.
    """
    checkpoint = AuditCheckpoint.objects.filter(pk=1).first()
    result = Verification()
    if (moved := _against_checkpoint(checkpoint)) is not None:
        return checkpoint, moved
    after, head = (checkpoint.seq, checkpoint.hash) if checkpoint else (0, GENESIS)
    result.head_seq, result.head_hash = after, head
    broken = _walk(result, after, head, limit=limit)
    if result.entries:
        with transaction.atomic():
            # Racing page views may both extend it; the later write names a head just as verified.
            AuditCheckpoint.objects.update_or_create(pk=1, defaults={
                "seq": result.head_seq, "hash": result.head_hash, "verified_at": timezone.now(), "complete": False,
            })
        _log_head(result, "links")
        checkpoint = AuditCheckpoint.objects.get(pk=1)
    return checkpoint, broken


def chain() -> Iterator[dict]:
    """Every entry in order, as the chain export writes it (one JSON object per line), in chunks."""
    for seq, kind, subject, content, prev_hash, entry, _ in _entries(0):
        yield {"seq": seq, "kind": kind, "subject": subject, "prevHash": prev_hash, "hash": entry, "content": content}


def backfill(apps) -> int:
    """Record what existed before the trail did (migration 0011): agents, policies, decisions, expiries.

    Works with the migration's historical models; returns how many entries
    it appended. Entries say when they were written, not when it happened.
    """
    model = apps.get_model
    entry = model("interrupts", "AuditEntry")
    made = 0
    for agent in model("interrupts", "Agent").objects.order_by("pk"):
        record("agent.created", agent_content(agent), subject=f"agent:{agent.pk}", model=entry)
        made += 1
    for policy in model("interrupts", "Policy").objects.select_related("agent").order_by("pk"):
        record("policy.created", policy_content(policy), subject=f"policy:{policy.pk}", model=entry)
        made += 1
    for decision in (model("interrupts", "Decision").objects.select_related("interrupt__run__thread", "user")
                     .order_by("pk").iterator(chunk_size=CHUNK)):
        record(DECISION, decision_content(decision), subject=f"decision:{decision.pk}",
               decision=decision, interrupt=decision.interrupt, model=entry)
        made += 1
        if decision.superseded_at:
            record(SUPERSEDED, superseded_content(decision), subject=f"decision:{decision.pk}",
                   decision=decision, interrupt=decision.interrupt, model=entry)
            made += 1
    for interrupt in (model("interrupts", "Interrupt").objects.filter(status="expired")
                      .select_related("run__thread").order_by("pk").iterator(chunk_size=CHUNK)):
        record(EXPIRY, expiry_content(interrupt), subject=f"interrupt:{interrupt.pk}", interrupt=interrupt, model=entry)
        made += 1
    return made


def backfill_access(apps) -> int:
    """Record who may decide as it stood before the trail held it (migration 0014): users, groups, policies.

    Every user and group without an entry gets one (``user.created``,
    ``group.created``), and every policy whose last entry names its agent,
    groups and users only by name gets a ``policy.changed`` with their ids,
    which verify holds it to from then on. Works with the migration's
    historical models; returns how many entries it appended.
    """
    model = apps.get_model
    entry = model("interrupts", "AuditEntry")
    permission = model("auth", "Permission")

    def last(subject: str) -> dict | None:
        found = entry.objects.filter(subject=subject).order_by("-seq").values_list("content", flat=True).first()
        return json.loads(found)["data"] if found else None

    with_types = permission.objects.select_related("content_type")
    made = 0
    for group in model("auth", "Group").objects.prefetch_related(
            models.Prefetch("permissions", queryset=with_types)).order_by("pk").iterator(chunk_size=CHUNK):
        if last(f"group:{group.pk}") is None:
            record("group.created", group_content(group), subject=f"group:{group.pk}", model=entry)
            made += 1
    for user in model(settings.AUTH_USER_MODEL).objects.prefetch_related(
            "groups", models.Prefetch("user_permissions", queryset=with_types)).order_by("pk").iterator(
            chunk_size=CHUNK):
        if last(f"user:{user.pk}") is None:
            record("user.created", user_content(user), subject=f"user:{user.pk}", model=entry)
            made += 1
    for policy in model("interrupts", "Policy").objects.select_related("agent").prefetch_related(
            "groups", "users").order_by("pk"):
        if set(last(f"policy:{policy.pk}") or ()) != set(content := policy_content(policy)):
            record("policy.changed", content, subject=f"policy:{policy.pk}", model=entry)
            made += 1
    return made


def backfill_context(apps) -> int:
    """Complete every decision entry written before it held what the reviewer read (migration 0026).

    For each such decision, a ``decision.context`` entry with the keys its
    entry lacks (message, schema, metadata, expiry, subagent), as the rows
    stand at the upgrade: verify holds the rows to them from then on. What
    was changed before the upgrade cannot be told. Works with the
    migration's historical models; returns how many entries it appended.
    """
    model = apps.get_model
    entry = model("interrupts", "AuditEntry")
    completed = set(entry.objects.filter(kind=CONTEXT).values_list("decision_id", flat=True))
    made = after = 0
    while True:
        chunk = list(entry.objects.filter(kind=DECISION, seq__gt=after).order_by("seq")
                     .values_list("seq", "decision_id", "content")[:CHUNK])
        if not chunk:
            return made
        after = chunk[-1][0]
        lacking = {pk: json.loads(content)["data"] for _, pk, content in chunk if pk not in completed}
        lacking = {pk: data for pk, data in lacking.items() if any(k not in data for k in _DECISION_ADDED)}
        for decision in (model("interrupts", "Decision").objects.filter(pk__in=lacking)
                         .select_related("interrupt__run__thread", "user").order_by("pk")):
            now = decision_content(decision)
            data = {"decision": decision.pk, "threadId": now["threadId"], "interruptId": now["interruptId"],
                    **{k: now[k] for k in _DECISION_ADDED if k not in lacking[decision.pk]}}
            record(CONTEXT, data, subject=f"decision:{decision.pk}", decision=decision,
                   interrupt=decision.interrupt, model=entry)
            completed.add(decision.pk)
            made += 1
