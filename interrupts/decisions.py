"""Decide, revise and expire interrupts; the batch's last decision queues the resume.

The database decides every race: an interrupt moves out of ``pending`` by a
conditional UPDATE on (pk, status, version), so two reviewers deciding at once
store exactly one decision, whatever the database, and the loser is told who
won. The decision, the interrupt's new status and the queued resume commit in
one transaction.

Everything that looks at agent-supplied data (the responseSchema, the
proposed args, the interrupt as sent) happens *before* that transaction: on
SQLite every transaction holds the whole database's write lock, and on
PostgreSQL the batch's row lock, so a hostile schema checked inside either
would make every other reviewer wait. An interrupt's raw form, schema and
proposal never change once raised, so what was checked outside is still
what the locked part writes; the locked part only re-reads status and
version, and writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ag_ui.core import Interrupt as WireInterrupt, ResumeEntry
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from . import recording, relay, runs
from .models import Decision, Interrupt, Run
from .protocol.contract import check_entry
from .protocol.errors import ContractViolation
from .protocol.schema import EDITED_ARGS, apply_edits, approval_payload, supports_edits
from .refusals import Refusal

MAX_COMMENT_CHARS = 10_000


def lock_batch(run_pk: int) -> None:
    """Serialise every change to one run's batch (PostgreSQL: a row lock on the run).

    Deciding the last two open interrupts at once, or revising one while
    another completes the batch, must see each other: otherwise the resume
    is never queued, or carries an answer the audit trail does not show.
    SQLite's IMMEDIATE transactions already run one at a time.
    """
    Run.objects.select_for_update().filter(pk=run_pk).values_list("pk", flat=True).first()


def _already_decided(interrupt: Interrupt) -> Refusal:
    live = interrupt.decisions.filter(superseded_at__isnull=True).select_related("user").first()
    if live is not None:
        who = live.user.get_full_name() or live.user.get_username()
        return Refusal(
            "ALREADY_DECIDED",
            f"Interrupt {interrupt.interrupt_id} was already decided by {who} "
            f"({live.status}, {live.created_at:%Y-%m-%d %H:%M:%S} UTC).",
            decided_by=live.user.get_username(),
            interrupt_id=interrupt.interrupt_id,
        )
    if interrupt.status == Interrupt.Status.EXPIRED:
        return Refusal("EXPIRED", f"Interrupt {interrupt.interrupt_id} expired: {interrupt.closed_reason}",
                       interrupt_id=interrupt.interrupt_id)
    return Refusal(
        "CLOSED",
        f"Interrupt {interrupt.interrupt_id} is closed: {interrupt.closed_reason or interrupt.status}.",
        interrupt_id=interrupt.interrupt_id,
    )


def _batch_sent(interrupt: Interrupt) -> bool:
    return interrupt.run.resumed_by() is not None


def _checked(interrupt: Interrupt, status: str, payload, metadata, now) -> ResumeEntry:
    if status not in (Decision.Status.RESOLVED, Decision.Status.CANCELLED):
        raise Refusal("INVALID_STATUS", f"A decision is 'resolved' or 'cancelled', not {status!r}.", status=400)
    entry = ResumeEntry.model_construct(interrupt_id=interrupt.interrupt_id, status=status, payload=payload, metadata=metadata)
    check_entry(WireInterrupt.model_validate(interrupt.raw), entry, now)
    return entry


def _edited_args(interrupt: Interrupt, payload):
    if not isinstance(payload, dict) or EDITED_ARGS not in payload:
        return None
    return apply_edits(interrupt.proposed_args or {}, payload, interrupt_id=interrupt.interrupt_id)


ACTIONS = ("approve", "reject", "edit", "respond", "cancel")


def answer_for(interrupt: Interrupt, action: str, *, payload=None, edited_args=None) -> tuple[str, object]:
    """What a reviewer's action means on the wire: the (status, payload) of the resume entry.

    ``approve``/``reject`` use the schema's yes/no field (``{approved: false}``
    for a rejection: denials live in the payload); ``edit`` approves with
    ``editedArgs``, offered only when the schema declares it; ``respond``
    sends ``payload`` as given; ``cancel`` declines without an answer.
    """
    if action == "cancel":
        return Decision.Status.CANCELLED, None
    if action == "respond":
        return Decision.Status.RESOLVED, payload
    if action == "edit":
        if not supports_edits(interrupt.response_schema):
            raise Refusal(
                "EDITS_NOT_OFFERED",
                f"Interrupt {interrupt.interrupt_id}'s responseSchema has no editedArgs: approve or reject it.",
                status=400,
            )
        return Decision.Status.RESOLVED, {"approved": True, EDITED_ARGS: edited_args}
    if action not in ("approve", "reject"):
        raise Refusal("INVALID_ACTION", f"Unknown action {action!r}: use one of {', '.join(ACTIONS)}.", status=400)
    answer = approval_payload(interrupt.response_schema, action == "approve")
    if answer is None:
        raise Refusal(
            "NEEDS_PAYLOAD",
            f"Interrupt {interrupt.interrupt_id} asks for more than yes or no: answer with action "
            "'respond' and a payload that fits its responseSchema.",
            status=400,
        )
    return Decision.Status.RESOLVED, answer


@dataclass(frozen=True)
class _Checked:
    """An answer that passed every check of agent-supplied data, ready to be written under the lock."""

    status: str
    payload: object
    metadata: object
    edited_args: object
    comment: str

    def record(self, interrupt: Interrupt, user) -> Decision:
        return Decision.objects.create(
            interrupt=interrupt, user=user, status=self.status,
            payload=self.payload if self.status == Decision.Status.RESOLVED else None,
            edited_args=self.edited_args, metadata=self.metadata, comment=self.comment,
        )


def _check(interrupt: Interrupt, status: str, payload, metadata, comment: str, now) -> _Checked:
    """Every check of the answer against what the agent sent, done outside any transaction."""
    if len(comment) > MAX_COMMENT_CHARS:
        raise Refusal("TOO_LARGE", f"A comment holds at most {MAX_COMMENT_CHARS:,} characters.", status=400)
    _checked(interrupt, status, payload, metadata, now)
    edited = _edited_args(interrupt, payload) if status == Decision.Status.RESOLVED else None
    return _Checked(status, payload, metadata, edited, comment)


def _refuse_if_expired(interrupt: Interrupt) -> None:
    # The answer was checked against the clock before the lock was taken; the
    # expiry sweep may not have run yet, so look again at the stored time.
    if interrupt.expires_at is not None and timezone.now() >= interrupt.expires_at:
        raise Refusal("EXPIRED", f"Interrupt {interrupt.interrupt_id} expired while the answer was being checked.",
                      interrupt_id=interrupt.interrupt_id)


def decide(interrupt: Interrupt, user, status: str, payload=None, metadata=None, comment: str = "") -> Decision:
    """Record ``user``'s answer to ``interrupt``; the last answer of a batch queues the resume.

    Refused (``ContractViolation``) when the payload fails the responseSchema
    (``INVALID_PAYLOAD``, or the schema's own refusal: ``INVALID_SCHEMA``,
    ``REMOTE_REF``, ``UNSAFE_PATTERN``, ``SCHEMA_TOO_LARGE``,
    ``SCHEMA_TOO_COSTLY``), a cancellation carries a payload
    (``PAYLOAD_ON_CANCEL``), metadata is not an object or uses the reserved
    ``ag-ui`` key, or ``expiresAt`` has passed (``EXPIRED``); refused
    (``Refusal``) with ``ALREADY_DECIDED`` (409) when someone decided first,
    ``CLOSED`` when the interrupt closed without a decision, ``TOO_LARGE``
    for a comment over ``MAX_COMMENT_CHARS``. The author may change their
    answer (``revise``) until the batch is sent.

    The race: the answer is checked first, with no lock held (see the module
    docstring); then the batch is locked, the interrupt re-read, and it moves
    out of ``pending`` only by an UPDATE conditional on the version read, so
    of two reviewers exactly one wins and the other is told who.
    """
    now = timezone.now()
    current = Interrupt.objects.select_related("run").get(pk=interrupt.pk)
    if current.status != Interrupt.Status.PENDING and _revisable(current, user) is None:
        raise _already_decided(current)  # no point checking an answer that cannot be taken
    checked = _check(current, status, payload, metadata, comment, now)
    with transaction.atomic():
        lock_batch(current.run_id)
        interrupt = Interrupt.objects.select_related("run__thread").get(pk=interrupt.pk)
        if interrupt.status != Interrupt.Status.PENDING:
            if (live := _revisable(interrupt, user)) is not None:
                return _revise(interrupt, live, user, checked, now)
            raise _already_decided(interrupt)
        _refuse_if_expired(interrupt)
        won = Interrupt.objects.filter(pk=interrupt.pk, status=Interrupt.Status.PENDING, version=interrupt.version).update(
            status=checked.status, version=F("version") + 1, closed_at=now
        )
        if not won:
            raise _already_decided(Interrupt.objects.get(pk=interrupt.pk))
        try:
            with transaction.atomic():
                decision = checked.record(interrupt, user)
        except IntegrityError:
            raise _already_decided(interrupt) from None
        _after_decision(interrupt, user, "decided")
        return decision


def _revisable(interrupt: Interrupt, user) -> Decision | None:
    """``user``'s live decision on a decided interrupt, if they may still replace it (the batch is not sent)."""
    live = interrupt.decisions.filter(superseded_at__isnull=True).first()
    return live if live is not None and live.user_id == user.pk and not _batch_sent(interrupt) else None


def _revise(interrupt, live, user, checked: _Checked, now) -> Decision:
    # Superseding is the one change a decision row accepts (a database trigger
    # refuses any other), and only once: a racing revision loses here.
    if not Decision.objects.filter(pk=live.pk, superseded_at__isnull=True).update(superseded_at=now):
        raise _already_decided(interrupt)
    Interrupt.objects.filter(pk=interrupt.pk).update(status=checked.status, version=F("version") + 1)
    decision = checked.record(interrupt, user)
    _after_decision(interrupt, user, "revised")
    return decision


def _after_decision(interrupt: Interrupt, user, reason: str) -> None:
    run = interrupt.run
    open_left = Interrupt.objects.filter(run=run, status=Interrupt.Status.PENDING).exists()
    closed_without_answer = Interrupt.objects.filter(
        run=run, status=Interrupt.Status.EXPIRED
    ).exists()
    if not open_left and not closed_without_answer:
        runs.queue_resume(run, user=user)
    thread_pk, seq = run.thread_id, run.thread.last_seq
    transaction.on_commit(lambda: relay.inbox_changed(thread_pk, seq, reason))


def edits_for(interrupts: dict[str, Interrupt], entries: list[ResumeEntry]) -> dict[str, object]:
    """The tool args each resolved entry of a gateway resume will run, by interrupt id.

    Computed before ``record_resume``'s transaction: it copies what the
    client sent, which may be large, and must not hold the lock meanwhile.
    """
    return {
        entry.interrupt_id: _edited_args(interrupts[entry.interrupt_id], entry.payload)
        for entry in entries if entry.status == "resolved"
    }


def record_resume(interrupted: Run, entries: list[ResumeEntry], user, edits: dict[str, object]) -> list[Decision]:
    """Record a gateway client's resume as decisions by ``user``, all or none.

    The contract checks already passed, outside the transaction, and
    ``edits`` is ``edits_for`` of the same entries; this only claims each
    interrupt. If the inbox answered one of them first, the whole resume is
    refused with ``ALREADY_RESOLVED`` (nothing is recorded, nothing is sent).
    Must be called inside the transaction that queues the resume run.
    """
    now = timezone.now()
    made = []
    lock_batch(interrupted.pk)
    by_id = {i.interrupt_id: i for i in Interrupt.objects.filter(run=interrupted)}
    answered = [i for i in by_id.values() if i.status != Interrupt.Status.PENDING]
    if answered:
        # The inbox answered part of this batch: a resume from here would drop
        # those answers (partial resumes are not allowed), so neither is sent.
        raise ContractViolation(
            "ALREADY_RESOLVED",
            f"Interrupt(s) {', '.join(i.interrupt_id for i in answered)} of this run were answered elsewhere "
            "first; answer the rest there.",
            interrupt_ids=[i.interrupt_id for i in answered],
        )
    for entry in entries:
        interrupt = by_id[entry.interrupt_id]
        won = Interrupt.objects.filter(pk=interrupt.pk, status=Interrupt.Status.PENDING).update(
            status=entry.status, version=F("version") + 1, closed_at=now
        )
        if not won:
            raise ContractViolation(
                "ALREADY_RESOLVED",
                f"Interrupt {entry.interrupt_id} was answered elsewhere first; nothing was sent.",
                interrupt_id=entry.interrupt_id,
            )
        payload = entry.payload if entry.status == "resolved" else None
        made.append(
            Decision.objects.create(
                interrupt=interrupt, user=user, status=entry.status, payload=payload,
                edited_args=edits.get(entry.interrupt_id), metadata=entry.metadata,
                comment="Answered through the AG-UI gateway.",
            )
        )
    thread_pk = interrupted.thread_id
    transaction.on_commit(lambda: relay.inbox_changed(thread_pk, 0, "decided"))
    return made


def expire_due(now=None) -> int:
    """Close every pending interrupt whose ``expiresAt`` has passed (or cannot be read).

    A batch with an expired interrupt can never be sent whole (partial
    resumes are not allowed), so its other open interrupts close with it and
    the thread accepts fresh input again. Each closing is noted in the
    thread's log for the audit trail. Returns how many interrupts closed.
    """
    now = now or timezone.now()
    # An unreadable expiresAt was recorded as due at once (see recording).
    due = Interrupt.objects.filter(status=Interrupt.Status.PENDING, expires_at__lte=now)
    closed = 0
    for run_pk in set(due.values_list("run_id", flat=True)):
        with transaction.atomic():
            lock_batch(run_pk)
            run = Run.objects.select_related("thread").get(pk=run_pk)
            batch = list(Interrupt.objects.filter(run=run, status=Interrupt.Status.PENDING))
            expired = [i for i in batch if i.expires_at and i.expires_at <= now]
            if not expired:
                continue
            names = ", ".join(i.interrupt_id for i in expired)
            for interrupt in batch:
                if interrupt in expired:
                    reason = (
                        f"expiresAt {interrupt.raw.get('expiresAt')!r} is not an ISO-8601 timestamp"
                        if _unreadable_expiry(interrupt)
                        else f"expired at {interrupt.expires_at:%Y-%m-%d %H:%M:%S} UTC"
                    )
                else:
                    reason = f"closed with its batch: {names} expired"
                closed += Interrupt.objects.filter(pk=interrupt.pk, status=Interrupt.Status.PENDING).update(
                    status=Interrupt.Status.EXPIRED, closed_at=now, closed_reason=reason[:300],
                    version=F("version") + 1,
                )
            event = recording.note(run, "countersign:interrupts_expired", {
                "runId": run.run_id,
                "interrupts": [{"id": i.interrupt_id, "expiresAt": i.raw.get("expiresAt")} for i in batch],
            })
            thread_pk, seq = run.thread_id, event.seq
            transaction.on_commit(lambda: relay.inbox_changed(thread_pk, seq, "expired"))
    return closed


def _unreadable_expiry(interrupt: Interrupt) -> bool:
    return any(p.get("code") == "INVALID_EXPIRY" for p in interrupt.problems or [])
