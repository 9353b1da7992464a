"""The hash-chained audit trail: one ``AuditEntry`` per decision, supersession, expiry, policy or agent change.

The chain. Entry ``n`` stores ``content``, the RFC 8785 canonical JSON text
of ``{"seq": n, "kind", "subject", "at", "data"}``, and

    hash = "sha256:" + hex(SHA-256(prev_hash.encode("ascii") + content.encode("utf-8")))

where ``prev_hash`` is entry ``n - 1``'s ``hash``, and ``GENESIS``
(``sha256:`` and 64 zeros) for entry 1. Editing, removing or reordering an
entry breaks the chain from there on; recomputing the whole chain after an
edit changes the head, which the last verification (``AuditCheckpoint``)
and anyone holding an exported head notice.

Writers. ``record`` appends in the caller's transaction, under a lock
(PostgreSQL: an advisory transaction lock; SQLite: ``BEGIN IMMEDIATE``
already serialises writers, see ``project/settings.py``), so two appenders
never fork the chain; a database trigger also refuses an INSERT that is not
the next seq after the previous hash (migration 0011). ``decisions`` calls
``record_decision`` and ``record_expiry``; agent and policy changes arrive
through the signal receivers ``InterruptsConfig.ready`` connects.

Supersession. A decision's one permitted change, setting ``superseded_at``,
is not part of ``decision_content`` (which must equal the row for ever);
it is an entry of its own (``decision.superseded``), appended by
``record_decision`` for every decision of the interrupt superseded since.

Verification. ``verify`` walks the chain from entry 1 in chunks, then
cross-checks the rows: every decision has exactly one ``decision`` entry
equal to ``decision_content`` of the row as it is now, a superseded one
exactly one ``decision.superseded`` entry, every expired interrupt an
``expiry`` entry; an entry whose decision vanished is reported too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import connection, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from .models import AUDIT_GENESIS, AuditCheckpoint, AuditEntry, Decision, Interrupt, Policy
from .protocol.signing import canonical

GENESIS = AUDIT_GENESIS

DECISION = "decision"
SUPERSEDED = "decision.superseded"
EXPIRY = "expiry"

#: Rows read per query while verifying: memory stays flat whatever the chain's length.
CHUNK = 2000
#: Problems reported at most; past the first few, more only repeat the news.
MAX_PROBLEMS = 20
#: An arbitrary, fixed key for pg_advisory_xact_lock: "the trail's tail".
_LOCK_KEY = 0x436F756E7465  # "Counte"

# The agent fields whose change is worth an entry: where requests go and what they carry.
_AGENT_TRACKED = ("url", "authHeader", "credentialSet", "credentialDigest", "signingSecretDigest")


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


def decision_content(decision) -> dict:
    """What a decision's entry records: where, who, what, under which policy, when. Never ``superseded_at``."""
    interrupt = decision.interrupt
    run = interrupt.run
    return {
        "decision": decision.pk,
        "threadId": run.thread.thread_id,
        "runId": run.run_id,
        "interruptId": interrupt.interrupt_id,
        "toolCallId": interrupt.tool_call_id or None,
        "user": {"id": decision.user_id, "username": _username(decision.user)},
        "action": decision.action,
        "status": decision.status,
        "payload": decision.payload,
        "editedArgs": decision.edited_args,
        "metadata": decision.metadata,
        "comment": decision.comment,
        "policy": decision.policy,
        "requiredApprovals": decision.required_approvals,
        "createdAt": _time(decision.created_at),
    }


def superseded_content(decision) -> dict:
    """What a supersession entry records: which decision stopped counting, and when."""
    return {"decision": decision.pk, "interruptId": decision.interrupt.interrupt_id,
            "supersededAt": _time(decision.superseded_at)}


def expiry_content(interrupt) -> dict:
    """What an expiry entry records: the interrupt, when it was due, when and why it closed."""
    run = interrupt.run
    return {
        "interrupt": interrupt.pk,
        "threadId": run.thread.thread_id,
        "runId": run.run_id,
        "interruptId": interrupt.interrupt_id,
        "toolCallId": interrupt.tool_call_id or None,
        "status": interrupt.status,
        "expiresAt": _time(interrupt.expires_at),
        "closedAt": _time(interrupt.closed_at),
        "closedReason": interrupt.closed_reason,
    }


def _digest(secret: str) -> str | None:
    # Keyed (SECRET_KEY), not a bare SHA-256: a credential may be a guessable
    # password, and whoever holds an export must not be able to test guesses.
    # Short: it only has to show that the secret changed.
    if not secret:
        return None
    return "hmac-sha256:" + salted_hmac("countersign.trail", secret, algorithm="sha256").hexdigest()[:16]


def agent_content(agent) -> dict:
    """What an agent entry records: name, URL, header, and digests of its secrets, never the secrets."""
    return {
        "agent": agent.pk,
        "name": agent.name,
        "url": agent.url,
        "authHeader": agent.auth_header,
        "credentialSet": bool(agent.auth_value),
        "credentialDigest": _digest(agent.auth_value),
        "signingSecretDigest": _digest(agent.signing_secret),
    }


def policy_content(policy) -> dict:
    """What a policy entry records: every field, its groups and users as sorted names."""
    return {
        "policy": policy.pk,
        "name": policy.name,
        "agent": policy.agent.name if policy.agent_id else None,
        "reason": policy.reason,
        "toolName": policy.tool_name,
        "groups": sorted(policy.groups.values_list("name", flat=True)),
        "users": sorted(_username(u) for u in policy.users.all()),
        "requiredApprovals": policy.required_approvals,
        "allowSelfApproval": policy.allow_self_approval,
        "targetMinutes": policy.target_minutes,
    }


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


def record_decision(decision) -> AuditEntry:
    """Append ``decision``'s entry (after one for each decision it superseded); call inside its transaction."""
    record_supersessions(decision.interrupt)
    return record(DECISION, decision_content(decision), subject=f"decision:{decision.pk}",
                  decision=decision, interrupt=decision.interrupt)


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


def _comparable(data: dict) -> dict:
    # The username is a snapshot of who decided, as they were named then;
    # people get renamed, so the row is matched by user id.
    if isinstance(data.get("user"), dict):
        data = {**data, "user": {"id": data["user"].get("id")}}
    return data


def _differs(recorded: dict, now: dict) -> str:
    keys = sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))
    return ", ".join(keys)


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
            decision_id__in=[d.pk for d in chunk], kind__in=(DECISION, SUPERSEDED)
        ).order_by("seq").values_list("seq", "kind", "decision_id", "content"):
            entries.setdefault((decision_pk, kind), []).append((seq, json.loads(content)["data"]))
        for decision in chunk:
            _check_one(result, decision, DECISION, entries.get((decision.pk, DECISION), []),
                       decision_content(decision), required=True)
            _check_one(result, decision, SUPERSEDED, entries.get((decision.pk, SUPERSEDED), []),
                       superseded_content(decision) if decision.superseded_at else None,
                       required=decision.superseded_at is not None)


def _check_one(result: Verification, decision, kind: str, found: list, now: dict | None, required: bool) -> None:
    name = f"decision {decision.pk} ({decision.interrupt.interrupt_id} by {_username(decision.user)})"
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
    if _comparable(recorded) != _comparable(now):
        result.add(Problem(seq, f"entry {seq}: {name} no longer matches what was recorded "
                                f"({_differs(_comparable(recorded), _comparable(now))} changed in the row)"))


def _check_vanished(result: Verification) -> None:
    for seq, decision_pk in (AuditEntry.objects.filter(kind__in=(DECISION, SUPERSEDED))
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


def _save(result: Verification, complete: bool) -> None:
    AuditCheckpoint.objects.update_or_create(pk=1, defaults={
        "seq": result.head_seq, "hash": result.head_hash, "verified_at": timezone.now(),
        "complete": complete, "problem": "\n".join(p.message for p in result.problems),
    })


def verify(progress: Callable[[int], None] | None = None, save: bool = True) -> Verification:
    """Recompute the whole chain from entry 1 and cross-check every decision and expiry against it.

    Memory is bounded by ``CHUNK`` rows whatever the trail's length.
    ``progress`` is called with the count every 10,000 entries. With
    ``save``, the result becomes the checkpoint the audit page shows (the
    head reached, through the last intact entry).
    """
    result = Verification()
    checkpoint = AuditCheckpoint.objects.filter(pk=1).first()
    if broken := _walk(result, 0, GENESIS, progress=progress):
        result.add(broken)
    elif moved := _against_checkpoint(checkpoint):
        result.add(moved)
    cross = Verification()
    _check_decisions(cross)
    _check_vanished(cross)
    _check_expiries(cross)
    # Problems naming an entry in chain order; rows with no entry at all after them.
    for problem in sorted(cross.problems, key=lambda p: (p.seq is None, p.seq or 0)):
        result.add(problem)
    result.more += cross.more
    if save:
        _save(result, complete=True)
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
