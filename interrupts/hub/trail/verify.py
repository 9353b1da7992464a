"""Verify the whole trail: the links, then every decision, expiry, agent, policy, group and user row against it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import Max, Subquery

from ...conf import MAX_AUDIT_PROBLEMS as MAX_PROBLEMS
from ...models import Agent, AuditCheckpoint, AuditEntry, Decision, Event, Grant, Interrupt, Policy
from .chain import CHUNK, CONTEXT, DECISION, EXPIRY, GENESIS, SUPERSEDED, Head
from .checkpoints import Problem, Verification, against_anchor, against_checkpoint, delivered_head, walk
from .checkpoints import save as save_checkpoint
from .content import (
    DECISION_ADDED,
    POLICY_VERSION,
    agent_content,
    decision_content,
    digests,
    expiry_content,
    grant_content,
    group_content,
    group_rows,
    policy_content,
    subagents,
    superseded_content,
    user_content,
    user_rows,
    username,
)

# The user fields verify holds the row to (not the name: people get renamed, and a rename grants nothing).
_USER_VERIFIED = ("active", "staff", "superuser", "groupIds", "permissions")
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
    "grant": "the standing grant that took it (grant)",
    "byPolicy": "whether its policy's rule took it (byPolicy)",
    "looked": "what the reviewer had in view (looked)",
    "passkey": "the passkey assertion that countersigned it (passkey)",
}


def _comparable(data: dict, recorded: dict) -> dict:
    # The username is a snapshot of who decided, as they were named then;
    # people get renamed, so the row is matched by user id. Keys added to
    # decision_content since ``recorded`` was written are not held against it. The
    # policy version is a reference into the chain, checked against it (``_check_policy_versions``).
    data = {k: v for k, v in data.items()
            if (k in recorded or k not in DECISION_ADDED) and k != POLICY_VERSION}
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
        attributed = subagents(interrupts, Event.objects.filter(run_id__in={i.run_id for i in interrupts}))
        for decision in chunk:
            _check_one(result, decision, DECISION, entries.get((decision.pk, DECISION), []),
                       decision_content(decision, attributed[decision.interrupt_id]), required=True)
            _check_one(result, decision, SUPERSEDED, entries.get((decision.pk, SUPERSEDED), []),
                       superseded_content(decision) if decision.superseded_at else None,
                       required=decision.superseded_at is not None)
        _check_policy_versions(result, chunk, entries)


def _decision_name(decision) -> str:
    return (f"decision {decision.pk} ({decision.interrupt.interrupt_id} in thread "
            f"{decision.interrupt.run.thread.thread_id}, by {username(decision.user)})")


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


def _agent_differs(recorded: dict, now: dict, row) -> list[str]:
    # Where requests go and what they carry; the name is not tracked (a rename
    # is no entry). A digest made under a key SECRET_KEY_FALLBACKS still
    # lists is as good as one under SECRET_KEY.
    differs = [k for k in ("url", "authHeader", "credentialSet") if recorded.get(k) != now.get(k)]
    for key, secret in (("credentialDigest", row.auth_value), ("signingSecretDigest", row.signing_secret)):
        if recorded.get(key) not in digests(secret):
            differs.append(key)
    return differs


_TIER_DEFAULTS = {"alwaysAsk": False, "onExpiry": "cancel", "autoApprove": False, "requireLook": False,
                  "requirePasskey": False}


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
    # Before a tier was a field, every policy had its default: a row claiming otherwise since was changed unseen.
    recorded = {**{k: v for k, v in _TIER_DEFAULTS.items() if k in now}, **recorded}
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
        _Family("group", group_rows, group_content, _fields_differ("permissions"), lambda g: g.name),
        _Family("user", user_rows, user_content, _fields_differ(*_USER_VERIFIED), username),
        _Family("grant", lambda: Grant.objects.select_related("agent", "author"), grant_content,
                _fields_differ("author", "agentId", "toolName", "argsSchema", "why", "expiresAt", "maxUses",
                               "revokedAt", "revokedBy"),
                lambda g: f"{g.tool_name} on {g.agent.name}"),
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
    if broken := walk(result, 0, GENESIS, progress=progress):
        result.add(broken)
    elif moved := against_checkpoint(checkpoint):
        result.add(moved)
    for anchor in expect:
        if (cut := against_anchor(anchor)) is not None:
            result.add(cut)
    # Its receiver kept it: a tail cut without scrubbing the deliveries too shows here, unasked.
    if (delivered := delivered_head()) is not None and (cut := against_anchor(delivered)) is not None:
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
        save_checkpoint(result, complete=True, chain_ok=chain_ok)
    return result
