"""The chain: append an entry under the tail's lock, hash it onto the previous one, read the head."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from ...models import AUDIT_GENESIS, AuditEntry, Decision, Interrupt, Policy
from ...protocol.signing import canonical
from ...protocol.trail import entry_hash
from .content import POLICY_VERSION, decision_content, expiry_content, stamp, superseded_content

GENESIS = AUDIT_GENESIS

DECISION = "decision"
SUPERSEDED = "decision.superseded"
#: What an older decision entry did not hold of what the reviewer read, as it stood at the upgrade (0026).
CONTEXT = "decision.context"
EXPIRY = "expiry"

#: Rows read per query while verifying: memory stays flat whatever the chain's length.
CHUNK = 2000
#: An arbitrary, fixed key for pg_advisory_xact_lock: "the trail's tail".
_LOCK_KEY = 0x436F756E7465  # "Counte"


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
        content = canonical({"seq": seq, "kind": kind, "subject": subject, "at": stamp(at), "data": data}).decode()
        return model.objects.create(
            seq=seq, kind=kind, subject=subject, content=content, prev_hash=prev_hash,
            hash=entry_hash(prev_hash, content), created_at=at,
            # By id: the backfill hands in historical instances.
            decision_id=decision.pk if decision is not None else None,
            interrupt_id=interrupt.pk if interrupt is not None else None,
        )


def last_data(subject: str) -> dict | None:
    """What the newest entry about ``subject`` says, or None."""
    last = AuditEntry.objects.filter(subject=subject).order_by("-seq").values_list("content", flat=True).first()
    return json.loads(last)["data"] if last else None


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
    # One statement, as it runs under the decision's lock; raw SQL, as it runs on every decision and
    # compiling its ORM spelling (a cast subquery in a concatenation) cost ten times the query.
    quote = connection.ops.quote_name
    entries, policies = quote(AuditEntry._meta.db_table), quote(Policy._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT subject, seq, hash FROM {entries} WHERE subject = "
                       f"'policy:' || (SELECT CAST(id AS TEXT) FROM {policies} WHERE name = %s) "
                       "ORDER BY seq DESC LIMIT 1", [name])
        last = cursor.fetchone()
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
    """The chain's head now (``0:GENESIS`` when empty): what every export and webhook delivery carries, an anchor."""
    last = AuditEntry.objects.order_by("-seq").values_list("seq", "hash").first()
    return Head(*last) if last else Head(0, GENESIS)


def entries(after: int) -> Iterator[tuple]:
    while True:
        chunk = list(AuditEntry.objects.filter(seq__gt=after).order_by("seq").values_list(
            "seq", "kind", "subject", "content", "prev_hash", "hash", "created_at")[:CHUNK])
        yield from chunk
        if len(chunk) < CHUNK:
            return
        after = chunk[-1][0]


def export(until: Head) -> Iterator[dict]:
    """Every entry from 1 to ``until``, in order, as the exports write them, read in chunks."""
    for seq, kind, subject, content, prev_hash, entry, _ in entries(0):
        if seq > until.seq:
            return
        yield {"seq": seq, "kind": kind, "subject": subject, "prevHash": prev_hash, "hash": entry, "content": content}
