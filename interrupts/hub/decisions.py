"""Decide, revise, undo and expire interrupts; the batch's last decision, or expiry, queues the resume.

Agent data is checked before the batch's lock is taken, never under it; the
lock and a conditional update on the interrupt's version decide every race.
docs/internals/decisions.md has the rules, the races and every refusal code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import NamedTuple

from ag_ui.core import Interrupt as WireInterrupt
from ag_ui.core import ResumeEntry
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from ..conf import ACTIONS, BULK_ACTIONS, MAX_COMMENT_CHARS, settings
from ..live import relay
from ..models import Decision, Interrupt, Run, under
from ..protocol import dialects, signing
from ..protocol.contract import check_entry
from ..protocol.errors import ContractViolation, ProtocolError
from ..protocol.schema.edits import EDITED_ARGS, apply_edits, approval_payload, supports_edits
from ..rules import eligibility
from ..rules.words import outcome_words
from . import claims, outcomes, passkeys, policies, runs, wakeup
from .notify import enqueue
from .refusals import Refusal
from .trail import chain, content


def lock_batch(run_pk: int) -> None:
    """Serialise every change to one run's batch (PostgreSQL: a row lock on the run).

    Deciding the last two open interrupts at once, or revising one while
    another completes the batch, must see each other: otherwise the resume
    is never queued, or carries an answer the audit trail does not show.
    SQLite's IMMEDIATE transactions already run one at a time (and it has no
    row locks), so there it costs no query.
    """
    if connection.features.has_select_for_update:
        Run.objects.select_for_update().filter(pk=run_pk).values_list("pk", flat=True).first()


def _name(user) -> str:
    return user.get_full_name() or user.get_username()


def _already_decided(interrupt: Interrupt) -> Refusal:
    live = interrupt.decisions.filter(superseded_at__isnull=True).select_related("user").order_by("-pk").first()
    if live is not None and interrupt.status != Interrupt.Status.PENDING:
        who, words = _name(live.user), outcome_words(live)
        return Refusal(
            "ALREADY_DECIDED",
            f"Interrupt {interrupt.interrupt_id} was already decided by {who}: {words} "
            f"({live.created_at:%Y-%m-%d %H:%M:%S} UTC).",
            decided_by=live.user.get_username(),
            decided_by_name=who,
            outcome=words,
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
    entry = ResumeEntry.model_construct(interrupt_id=interrupt.interrupt_id, status=status, payload=payload,
                                        metadata=metadata)
    check_entry(WireInterrupt.model_validate(interrupt.raw), entry, now)
    refuse_reserved_metadata(metadata, interrupt.interrupt_id)
    signing.canonical(payload)  # UNSIGNABLE_PAYLOAD now, not when the resume is built
    return entry


def refuse_reserved_metadata(metadata, interrupt_id: str) -> None:
    """Refuse an answer whose metadata claims a key Countersign writes (``RESERVED_METADATA_KEY``).

    ``metadata.countersign`` is the attestation Countersign writes on every
    entry it sends (who approved, under which policy, the fingerprint): a
    reviewer or client who could write it could name someone else. The
    framework adapters' keys (``dialects.RESERVED_METADATA_KEYS``: TanStack's
    continuation, which says which request the answer is for) likewise.
    """
    if not isinstance(metadata, dict):
        return
    if signing.METADATA_KEY in metadata:
        raise ContractViolation(
            "RESERVED_METADATA_KEY",
            f"Metadata key {signing.METADATA_KEY!r} of interrupt {interrupt_id}'s answer is written by "
            "Countersign itself (who approved, the policy, the fingerprint); leave it out.",
            interrupt_id=interrupt_id,
        )
    if claimed := sorted(dialects.RESERVED_METADATA_KEYS & metadata.keys()):
        raise ContractViolation(
            "RESERVED_METADATA_KEY",
            f"Metadata key {claimed[0]!r} of interrupt {interrupt_id}'s answer is written by Countersign from "
            "the interrupt the agent raised (what the agent's framework needs to continue); leave it out.",
            interrupt_id=interrupt_id,
        )


def _edited_args(interrupt: Interrupt, payload):
    if not isinstance(payload, dict) or EDITED_ARGS not in payload:
        return None
    return apply_edits(interrupt.proposed_args or {}, payload, interrupt_id=interrupt.interrupt_id)


def action_of(interrupt: Interrupt, status: str, payload) -> str:
    """Which of ``ACTIONS`` an answer is, read from the answer itself (the same on every surface)."""
    if status == Decision.Status.CANCELLED:
        return "cancel"
    if isinstance(payload, dict) and EDITED_ARGS in payload:
        return "edit"
    if payload is not None and payload == approval_payload(interrupt.response_schema, True):
        return "approve"
    if _says_no(interrupt.response_schema, payload):
        return "reject"
    return "respond"


def _says_no(schema, payload) -> bool:
    """The answer is its schema's own no: exactly it, or the spec's ``approved: false`` with a reason beside it.

    A rejection ends the interrupt at once, whatever the quorum or the passkey, so nothing else is one:
    not ``{"confirm": true, "approved": false}`` where the yes/no field is ``confirm``, and not
    ``{"dry_run": false, "target": "prod"}`` where ``dry_run`` is only guessed to be it.
    """
    no = approval_payload(schema, False)
    if payload == no and no is not None:
        return True
    return no == {"approved": False} and isinstance(payload, dict) and payload.get("approved") is False


def ends_at_once(action: str) -> bool:
    """A rejection or cancel by one eligible person ends the interrupt, whatever the quorum."""
    return action in ("reject", "cancel")


#: The actions that approve: where a policy requires a passkey, each is countersigned by one.
PASSKEY_ACTIONS = ("approve", "edit", "respond")


class Answer(NamedTuple):
    """A reviewer's action as the resume entry carries it, and the action to record when the entry cannot say it."""

    status: str
    payload: object
    action: str | None = None


def answer_for(interrupt: Interrupt, action: str, *, payload=None, edited_args=None) -> Answer:
    """What a reviewer's action means on the wire: the status and payload of the resume entry.

    ``approve``/``reject`` use the schema's yes/no field (``{approved: false}``
    for a rejection: denials live in the payload); a request with no such field
    is rejected the only way the protocol offers, ``cancelled``, recorded as the
    rejection it is. ``edit`` approves with ``editedArgs``, offered only when
    the schema declares it; ``respond`` sends ``payload`` as given; ``cancel``
    dismisses the request without an answer.
    """
    if action == "cancel":
        return Answer(Decision.Status.CANCELLED, None)
    if action == "respond":
        return Answer(Decision.Status.RESOLVED, payload)
    if action == "edit":
        if not supports_edits(interrupt.response_schema):
            raise Refusal(
                "EDITS_NOT_OFFERED",
                f"Interrupt {interrupt.interrupt_id}'s responseSchema has no editedArgs: approve or reject it.",
                status=400,
            )
        return Answer(Decision.Status.RESOLVED, {"approved": True, EDITED_ARGS: edited_args})
    if action not in ("approve", "reject"):
        raise Refusal("INVALID_ACTION", f"Unknown action {action!r}: use one of {', '.join(ACTIONS)}.", status=400)
    answer = approval_payload(interrupt.response_schema, action == "approve")
    if answer is None and action == "reject":
        return Answer(Decision.Status.CANCELLED, None, "reject")
    if answer is None:
        raise Refusal(
            "NEEDS_PAYLOAD",
            f"Interrupt {interrupt.interrupt_id} asks for more than yes or no: answer with action "
            "'respond' and a payload that fits its responseSchema.",
            status=400,
        )
    return Answer(Decision.Status.RESOLVED, answer)


@dataclass(frozen=True)
class _Checked:
    """An answer that passed every check of agent-supplied data, ready to be written under the lock."""

    status: str
    payload: object
    metadata: object
    edited_args: object
    comment: str
    action: str
    rule: eligibility.Rule
    # The standing answer the reviewer saw (``answer_digest``), or None: a plain
    # approval joins another person's answer only if it is the one they saw.
    seen: str | None = None
    # Its reply is sent after commit (``replies``): until ``acknowledge``, it travels nowhere.
    unsent: bool = False
    # What the reviewer's page reported they had in view (``rules.looked``, checked by the caller).
    looked: dict | None = None
    # The checked WebAuthn assertion that countersigned it (``hub.passkeys.countersign``).
    passkey: dict | None = None

    def record(self, interrupt: Interrupt, user) -> Decision:
        return Decision.objects.create(
            interrupt=interrupt, user=user, status=self.status,
            payload=self.payload if self.status == Decision.Status.RESOLVED else None,
            edited_args=self.edited_args, metadata=self.metadata, comment=self.comment,
            action=self.action, policy=self.rule.name[:100], required_approvals=self.rule.required_approvals,
            looked=self.looked, passkey=self.passkey,
        )

    def recorded(self, interrupt: Interrupt, user) -> Decision:
        """``record``, and marked unacknowledged when its reply is still to be sent."""
        decision = self.record(interrupt, user)
        if self.unsent:
            Interrupt.objects.filter(pk=interrupt.pk).update(unacknowledged=decision)
        return decision

    def joining(self, approved: Decision) -> _Checked:
        """This plain approval, applied to the answer ``approved`` already carries (edited args included)."""
        return replace(self, payload=approved.payload, edited_args=approved.edited_args)


def _check(interrupt: Interrupt, status: str, payload, metadata, comment: str, now,
           rule: eligibility.Rule, seen: str | None, action: str | None = None) -> _Checked:
    """Every check of the answer against what the agent sent, done outside any transaction."""
    if len(comment) > MAX_COMMENT_CHARS:
        raise Refusal("TOO_LARGE", f"A comment holds at most {MAX_COMMENT_CHARS:,} characters.", status=400)
    _checked(interrupt, status, payload, metadata, now)
    edited = _edited_args(interrupt, payload) if status == Decision.Status.RESOLVED else None
    # Only a rejection sent as cancelled is recorded as chosen; every other action is read from the answer.
    recorded = "reject" if action == "reject" and status == Decision.Status.CANCELLED \
        else action_of(interrupt, status, payload)
    return _Checked(status, payload, metadata, edited, comment, recorded, rule, seen)


def answer_digest(decision: Decision | None) -> str:
    """A short digest of the answer a standing decision carries ("" for none): what a page shows and posts back."""
    if decision is None:
        return ""
    return hashlib.sha256(_answer_bytes(decision.status, decision.payload)).hexdigest()[:16]


def _answer_bytes(status: str, payload) -> bytes:
    # An answer as it is signed: compared this way, 1 and true differ, as they do to the agent.
    return signing.canonical({"status": status, "payload": payload})


def _same_answer(decision: Decision, checked: _Checked) -> bool:
    # By the bytes that are signed, not Python's ==, for which 1 == True and [0] == [False].
    return _answer_bytes(decision.status, decision.payload) == _answer_bytes(checked.status, checked.payload)


def answer_to_sign(interrupt: Interrupt, user, answer: Answer) -> tuple[str, object]:
    """The status and payload a reviewer's passkey signs for ``answer``: a plain approval joining others'
    standing approvals takes, and so signs, the answer it joins (``_take``)."""
    approving = action_of(interrupt, answer.status, answer.payload) == "approve"
    joined = _joined(approvals(interrupt), user) if approving else None
    return (joined.status, joined.payload) if joined is not None else (answer.status, answer.payload)


def standing_answer(live: list[Decision]) -> Decision | None:
    """The answer a plain approval of this pending interrupt would join: the latest standing decision."""
    return live[-1] if live else None


def _joined(live: list[Decision], user) -> Decision | None:
    """The standing answer ``user``'s plain approval joins: the latest of the others' (their own is replaced)."""
    return standing_answer([d for d in live if d.user_id != user.pk])


def _refuse_if_expired(interrupt: Interrupt, status: str) -> None:
    # The answer was checked against the clock before the lock was taken; the
    # expiry sweep may not have run yet, so look again at the stored time.
    # Cancelling stays possible: that is how an expired interrupt is covered (C20).
    if status == Decision.Status.RESOLVED and interrupt.expires_at is not None \
            and timezone.now() >= interrupt.expires_at:
        raise Refusal("EXPIRED", f"Interrupt {interrupt.interrupt_id} expired while the answer was being checked.",
                      interrupt_id=interrupt.interrupt_id)


def decide(interrupt: Interrupt, user, status: str, payload=None, metadata=None, comment: str = "",
           seen: str | None = None, *, fresh: bool = False, claim_confirmed: bool = True,
           unsent: bool = False, action: str | None = None, looked: dict | None = None,
           passkey: dict | None = None, rule: eligibility.Rule | None = None) -> Decision:
    """Record ``user``'s answer to ``interrupt``; the answer that closes a batch queues the resume.

    Refusals (NOT_ELIGIBLE, SELF_APPROVAL, CLAIMED, ALREADY_DECIDED, CLOSED,
    ANSWER_CHANGED, EXPIRED, TOO_LARGE and the contract's codes) are listed in
    docs/internals/decisions.md. ``fresh``: ``interrupt`` was loaded with its run
    in this request. ``unsent``: the caller replies after commit and then calls
    ``acknowledge``; until then the decision travels nowhere. ``action``: what
    ``answer_for`` says to record when the answer cannot (``Answer.action``).
    ``looked``: what the reviewer's page reported they had in view (``rules.looked.parse``).
    ``passkey``: the assertion ``passkeys.countersign`` checked signs this answer; an approval under a
    policy that requires one is refused (PASSKEY_REQUIRED) without it. ``rule``: the policy in force the
    caller read for this (``fresh``) interrupt already, not read again.
    """
    now = timezone.now()
    # What is read here only picks the rule and checks the answer (the agent's
    # part of an interrupt never changes; its status is read again under the
    # lock), so an instance the request has just loaded with its run will do.
    current = interrupt if fresh else Interrupt.objects.select_related("run").get(pk=interrupt.pk)
    rule = rule if rule is not None and fresh else eligibility.rule_for(current)
    policies.refuse_unless_eligible(user, rule, current)
    claims.refuse_if_claimed(current, user, claim_confirmed, now)
    if current.status != Interrupt.Status.PENDING and _revisable(current, user, rule) is None:
        raise _already_decided(current)  # no point checking an answer that cannot be taken
    checked = replace(_check(current, status, payload, metadata, comment, now, rule, seen, action), unsent=unsent,
                      looked=looked, passkey=passkey)
    if rule.require_passkey and checked.action in PASSKEY_ACTIONS and passkey is None:
        raise Refusal("PASSKEY_REQUIRED", f"Policy {rule.name!r} asks for the approver's passkey on interrupt "
                                          f"{current.interrupt_id}: approve it on its card, where your passkey signs "
                                          "the approval; a session or token alone cannot.", status=403,
                      interrupt_id=current.interrupt_id, policy=rule.name)
    with transaction.atomic(durable=True):
        lock_batch(current.run_id)
        # The thread's conversation goes into the resume; the run's own input and outcome do not.
        interrupt = Interrupt.objects.select_related("run__thread", "run__agent").defer(
            *under("run", Run.CONVERSATION)).get(pk=interrupt.pk)
        if interrupt.status != Interrupt.Status.PENDING:
            if (live := _revisable(interrupt, user, rule)) is not None:
                return _revise(interrupt, live, user, checked, now)
            raise _already_decided(interrupt)
        _refuse_if_expired(interrupt, checked.status)
        decision = _take(interrupt, user, checked, now)
        _after_decision(interrupt, user, relay.Reason.DECIDED)
        return decision


def _take(interrupt: Interrupt, user, checked: _Checked, now) -> Decision:
    """Add ``user``'s answer to a pending interrupt under its batch's lock; close it if this completes it."""
    standing = approvals(interrupt)
    joined = _joined(standing, user) if checked.action == "approve" else None
    if joined is not None and not _same_answer(joined, checked):
        if checked.seen != answer_digest(joined):
            who = joined.user.get_full_name() or joined.user.get_username()
            raise Refusal(
                "ANSWER_CHANGED",
                f"Interrupt {interrupt.interrupt_id}'s standing answer is now {who}'s "
                f"({joined.action or joined.status}), not the one you saw: look at it again, then approve "
                "it, or answer with your own edits.",
                interrupt_id=interrupt.interrupt_id, standing=answer_digest(joined),
            )
        checked = checked.joining(joined)
    if checked.passkey is not None:
        # Signed before the lock, over what the approval was to take: it must be what it takes now,
        # and no decision on this interrupt (undone or revised ones too) may have used it already.
        passkeys.refuse_unless_it_signs(checked.passkey, interrupt, checked.status, checked.payload)
    # No longer standing: approvals of another answer, this reviewer's own earlier
    # answer, approvals by people who lost the right to decide since (left the
    # group, deactivated), and unsigned ones where the policy now asks for a
    # passkey: none of them is counted or attested.
    unsigned = checked.rule.require_passkey
    stale = [d for d in standing if d.user_id == user.pk or not _same_answer(d, checked)
             or policies.refusal(d.user, checked.rule, interrupt) is not None
             or (unsigned and d.passkey is None)]
    if stale:
        Decision.objects.filter(pk__in=[d.pk for d in stale]).supersede(now)
    counted = len(standing) - len(stale)
    closes = ends_at_once(checked.action) or counted + 1 >= checked.rule.required_approvals
    won = Interrupt.objects.filter(pk=interrupt.pk).answer(interrupt.version, checked.status if closes else None, now)
    if not won:
        raise _already_decided(Interrupt.objects.get(pk=interrupt.pk))
    # No savepoint: whoever adds a live decision to this interrupt moves its
    # version under the batch's lock, so the UPDATE just won is the proof no
    # one else did. Should the database still refuse it, nothing is kept: the
    # transaction rolls back whole, and the refusal does not query it again.
    try:
        decision = checked.recorded(interrupt, user)
    except IntegrityError:
        raise Refusal("ALREADY_DECIDED", f"Interrupt {interrupt.interrupt_id} was decided by someone else at the "
                      "same moment: look at it again.", interrupt_id=interrupt.interrupt_id) from None
    chain.record_decision(decision, superseded=bool(stale))
    return decision


def approvals(interrupt: Interrupt) -> list[Decision]:
    """The standing (live) decisions of an interrupt, in order: under a quorum, the approvals so far."""
    return list(interrupt.decisions.filter(superseded_at__isnull=True).select_related("user").order_by("pk"))


def _revisable(interrupt: Interrupt, user, rule: eligibility.Rule) -> Decision | None:
    """``user``'s live decision on a decided interrupt, if they may still replace it.

    Only a decision taken alone (one approval required) that closed the
    interrupt, and only until the batch is sent: under a quorum the
    approvers' answers were counted together, and one of them changing
    theirs afterwards would leave the others approving what they never saw.
    """
    if rule.required_approvals != 1:
        return None
    live = list(interrupt.decisions.filter(superseded_at__isnull=True))
    mine = live[0] if len(live) == 1 else None
    return mine if mine is not None and mine.user_id == user.pk and not _batch_sent(interrupt) else None


def _revise(interrupt, live, user, checked: _Checked, now) -> Decision:
    if checked.passkey is not None:  # as in _take: over this answer, and never used on this interrupt before
        passkeys.refuse_unless_it_signs(checked.passkey, interrupt, checked.status, checked.payload)
    # Superseding is the one change a decision row accepts (a database trigger
    # refuses any other), and only once: a racing revision loses here.
    if not Decision.objects.filter(pk=live.pk).supersede(now):
        raise _already_decided(interrupt)
    Interrupt.objects.filter(pk=interrupt.pk).revise(checked.status)
    decision = checked.recorded(interrupt, user)
    chain.record_decision(decision, superseded=True)
    _after_decision(interrupt, user, relay.Reason.REVISED)
    return decision


#: The trail's entry for a decision its author took back (``undo``), after its ``decision.superseded``.
UNDONE = "decision.undone"


def undo(interrupt: Interrupt, user) -> Interrupt:
    """Withdraw ``user``'s own standing decision on ``interrupt`` while its batch is unsent; the interrupt, pending.

    Withdraws the resume it completed while no process has taken it. Refused
    with NOT_DECIDED, NOT_YOURS, ALREADY_SENT or EXPIRED (docs/internals/decisions.md).
    """
    now = timezone.now()
    with transaction.atomic(durable=True):
        lock_batch(interrupt.run_id)
        current = Interrupt.objects.select_related("run__thread", "run__agent").get(pk=interrupt.pk)
        live = approvals(current)
        mine = next((d for d in live if d.user_id == user.pk), None)
        if mine is None:
            raise _nothing_to_undo(current, live)
        resume = current.run.resumed_by()
        if resume is not None and not runs.withdraw_resume(resume):
            raise Refusal(
                "ALREADY_SENT",
                f"Too late to undo: your answer to {current.interrupt_id} was sent to {current.run.agent.name} "
                f"(run {resume.run_id}), which has it. Ask the agent's owner, or answer what it asks next.",
                interrupt_id=current.interrupt_id, run_id=resume.run_id,
            )
        if current.expires_at is not None and now >= current.expires_at:
            raise Refusal("EXPIRED", f"Interrupt {current.interrupt_id} expired at "
                                     f"{current.expires_at:%Y-%m-%d %H:%M:%S} UTC: reopened, it would only expire.",
                          interrupt_id=current.interrupt_id)
        Decision.objects.filter(pk=mine.pk).supersede(now)
        # Under the batch's lock nobody else moves the version: the UPDATE cannot lose.
        Interrupt.objects.filter(pk=current.pk, version=current.version).reopen()
        chain.record_supersessions(current)
        chain.record(UNDONE, {
            "decision": mine.pk, "interrupt": current.pk, "interruptId": content.signable(current.interrupt_id),
            "threadId": current.run.thread.thread_id, "runId": current.run.run_id,
            "user": {"id": user.pk, "username": user.get_username()},
            "action": mine.action, "outcome": outcome_words(mine), "undoneAt": now.isoformat(),
            "withdrawnRunId": resume.run_id if resume is not None else None,
        }, subject=f"decision:{mine.pk}", decision=mine, interrupt=current)
        relay.inbox_changed(current.run.thread_id, current.run.thread.last_seq, relay.Reason.REVISED)
    return Interrupt.objects.select_related("run__thread", "run__agent").get(pk=current.pk)


def undo_many(interrupts: Iterable[Interrupt], user) -> tuple[list[Interrupt], list[tuple[Interrupt, ProtocolError]]]:
    """Undo ``user``'s decision on each interrupt, each as ``undo`` alone would; those it refuses, with why."""
    undone, skipped = [], []
    for interrupt in interrupts:
        try:
            undone.append(undo(interrupt, user))
        except ProtocolError as problem:
            skipped.append((interrupt, problem))
    return undone, skipped


def _nothing_to_undo(interrupt: Interrupt, live: list[Decision]) -> Refusal:
    if live:
        who = ", ".join(_name(d.user) for d in live)
        return Refusal("NOT_YOURS", f"Interrupt {interrupt.interrupt_id} was decided by {who}, not you: only the "
                                    "person who decided can undo a decision.", status=403,
                       interrupt_id=interrupt.interrupt_id, decided_by=live[-1].user.get_username())
    if interrupt.status == Interrupt.Status.PENDING:
        said = "it still waits for one"
    else:
        said = f"it closed without one ({interrupt.closed_reason or interrupt.get_status_display().lower()})"
    return Refusal("NOT_DECIDED", f"Interrupt {interrupt.interrupt_id} has no decision of yours to undo: {said}.",
                   interrupt_id=interrupt.interrupt_id)


def _reopen_lapsed(run: Run, now, decided: Iterable[int] = ()) -> list[Interrupt]:
    """Reopen each approved interrupt of the batch whose approvers no longer make its quorum.

    An approval counts only while its author may still decide: someone who
    left the policy's groups or was deactivated after approving one
    interrupt of a batch must not be attested when the batch's last
    interrupt is decided. Their decisions are superseded and the interrupt
    waits again. Rejections and cancels stand: they only stop the agent.
    ``decided``: interrupts decided in this very transaction, whose approvals
    ``_take`` has just judged under the same lock; they are not looked at again.
    """
    closed = list(Interrupt.objects.filter(run=run, status=Interrupt.Status.RESOLVED)
                  .exclude(pk__in=list(decided)).select_related("run"))
    if not closed:
        return []
    rules = eligibility.rules_held(closed)
    reopened = []
    for interrupt in closed:
        live = approvals(interrupt)
        if not live or ends_at_once(live[-1].action):
            continue
        lapsed = [d for d in live if policies.refusal(d.user, rules[interrupt.pk], interrupt) is not None]
        if not lapsed or len(live) - len(lapsed) >= rules[interrupt.pk].required_approvals:
            continue
        Decision.objects.filter(pk__in=[d.pk for d in lapsed]).supersede(now)
        Interrupt.objects.filter(pk=interrupt.pk, status=Interrupt.Status.RESOLVED).reopen()
        chain.record_supersessions(interrupt)
        reopened.append(interrupt)
    return reopened


def _after_decision(interrupt: Interrupt, user, reason: relay.Reason) -> None:
    run = interrupt.run
    # The batch in one read: what is still open, what expired (the resume cancels it), and
    # whether any other approval exists that could have lapsed since it was given.
    batch = Interrupt.objects.filter(run=run).aggregate(
        open=Count("pk", filter=Q(status=Interrupt.Status.PENDING)),
        expired=Count("pk", filter=Q(status=Interrupt.Status.EXPIRED)),
        approved_before=Count("pk", filter=Q(status=Interrupt.Status.RESOLVED) & ~Q(pk=interrupt.pk)),
        size=Count("pk"),
    )
    open_left = batch["open"] > 0
    if not open_left and batch["approved_before"] and _reopen_lapsed(run, timezone.now(), [interrupt.pk]):
        open_left = True
    # Expired interrupts do not keep it open: the resume cancels them (C20).
    if not open_left:
        runs.queue_resume(run, user=user, expired=bool(batch["expired"]), size=batch["size"])
    enqueue.decided(interrupt, user)
    thread_pk, seq = run.thread_id, run.thread.last_seq
    relay.inbox_changed(thread_pk, seq, reason)


#: How a bulk summary names what each action did.
_DONE = {"approve": "approved", "reject": "rejected", "cancel": "dismissed"}


@dataclass(frozen=True)
class Bulk:
    """What one bulk decision did: each interrupt decided, and each skipped with why."""

    action: str
    decided: list[Decision]
    skipped: list[tuple[Interrupt, ProtocolError]]

    @property
    def verb(self) -> str:
        """What the action did to each: "approved", "rejected", "dismissed"."""
        return _DONE[self.action]

    @property
    def summary(self) -> str:
        """'18 approved, 2 skipped: int-3 (ALREADY_DECIDED), int-9 (NOT_ELIGIBLE)'."""
        said = f"{len(self.decided)} {self.verb}"
        if self.skipped:
            said += f", {len(self.skipped)} skipped: " + ", ".join(
                f"{interrupt.interrupt_id} ({problem.code})" for interrupt, problem in self.skipped)
        return said


def decide_many(interrupts: Iterable[Interrupt], user, action: str, comment: str = "",
                claim_confirmed: bool = False, unsent: bool = False) -> Bulk:
    """Take one action (``BULK_ACTIONS``) on each interrupt, each as if decided alone; report what was skipped.

    Each goes through ``decide``: its policy and state are checked afresh, under
    its batch's lock, in a transaction of its own, so one refusal skips that
    interrupt only, and a batch whose last interrupt this decides is resumed
    once, as always. Skipped, not revised: an interrupt no longer pending
    (decided meanwhile, even by this reviewer), one this reviewer already
    answered under a quorum, and every refusal ``decide`` gives
    (``NOT_ELIGIBLE``, ``SELF_APPROVAL``, ``NEEDS_PAYLOAD`` for approving a form, ...),
    ``CLAIMED`` for a card a colleague is reviewing unless ``claim_confirmed``.
    ``interrupts`` must come with their runs loaded.
    """
    if action not in BULK_ACTIONS:
        raise Refusal("INVALID_ACTION", f"A bulk decision is one of {', '.join(BULK_ACTIONS)}, not {action!r}: "
                                        "answers of their own (edits, forms) are given one by one.", status=400)
    if len(comment) > MAX_COMMENT_CHARS:
        raise Refusal("TOO_LARGE", f"A comment holds at most {MAX_COMMENT_CHARS:,} characters.", status=400)
    decided, skipped = [], []
    for interrupt in interrupts:
        try:
            if interrupt.status != Interrupt.Status.PENDING:
                raise _already_decided(interrupt)
            if interrupt.decisions.filter(user=user, superseded_at__isnull=True).exists():
                raise Refusal("ALREADY_ANSWERED", f"You already answered interrupt {interrupt.interrupt_id}; it "
                                                  "waits for other approvers.", status=409,
                              interrupt_id=interrupt.interrupt_id)
            answer = answer_for(interrupt, action)
            decided.append(decide(interrupt, user, answer.status, answer.payload, comment=comment, fresh=True,
                                  claim_confirmed=claim_confirmed, unsent=unsent, action=answer.action))
        except ProtocolError as problem:
            skipped.append((interrupt, problem))
    return Bulk(action, decided, skipped)


@dataclass(frozen=True)
class PreparedResume:
    """A gateway resume checked against policy and agent data, ready for ``record_resume``."""

    answers: dict[str, _Checked]


def prepare_resume(interrupts: dict[str, Interrupt], entries: list[ResumeEntry], user) -> PreparedResume:
    """Check a gateway client's resume as decisions by ``user``, outside any transaction.

    The contract checks already passed (``check_input``); this applies the
    inbox's other rules to every entry, all before anything is recorded:
    ``NOT_ELIGIBLE`` / ``SELF_APPROVAL`` / ``PASSKEY_REQUIRED`` (403 in the API, RUN_ERROR here),
    ``RESERVED_METADATA_KEY``, ``UNSIGNABLE_PAYLOAD``; and copies the tool
    args each approval will run, which may be large.
    """
    rules = eligibility.rules_held(interrupts.values())
    answers = {}
    for entry in entries:
        interrupt = interrupts[entry.interrupt_id]
        rule = rules[interrupt.pk]
        policies.refuse_unless_eligible(user, rule, interrupt)
        refuse_reserved_metadata(entry.metadata, entry.interrupt_id)
        signing.canonical(entry.payload)
        resolved = entry.status == Decision.Status.RESOLVED
        action = action_of(interrupt, entry.status, entry.payload)
        if rule.require_passkey and action in PASSKEY_ACTIONS:
            raise Refusal("PASSKEY_REQUIRED", f"Policy {rule.name!r} asks for the approver's passkey on interrupt "
                                              f"{interrupt.interrupt_id}: approve it on its card in Countersign; a "
                                              "token alone cannot.", status=403,
                          interrupt_id=interrupt.interrupt_id, policy=rule.name)
        answers[entry.interrupt_id] = _Checked(
            entry.status, entry.payload if resolved else None, entry.metadata,
            _edited_args(interrupt, entry.payload) if resolved else None,
            "Answered through the AG-UI gateway.", action, rule,
        )
    return PreparedResume(answers)


def record_resume(interrupted: Run, prepared: PreparedResume, user) -> bool:
    """Record a gateway client's resume as decisions by ``user``, all or none; True if the batch is complete.

    ``prepared`` is ``prepare_resume`` of the same entries. If the inbox
    closed one of the batch's interrupts first, the whole resume is refused
    with ``ALREADY_RESOLVED`` (nothing is recorded, nothing is sent). Each
    answer counts like an inbox decision by ``user``: under a quorum an
    approval may leave its interrupt pending, and then no resume is sent
    (False): the rest of the approvals are given in the inbox, which sends
    it. Must be called inside the transaction that queues the resume run.
    """
    now = timezone.now()
    lock_batch(interrupted.pk)
    by_id = {i.interrupt_id: i for i in Interrupt.objects.filter(run=interrupted).select_related("run__thread")}
    # An expired interrupt is covered by the client's cancel (the gate refused
    # resolving it): the resume cancels it as expired, not as ``user``'s decision.
    expired = {iid for iid, i in by_id.items() if i.status == Interrupt.Status.EXPIRED}
    answered = [i for i in by_id.values() if i.status not in (Interrupt.Status.PENDING, Interrupt.Status.EXPIRED)]
    if answered:
        # The inbox answered part of this batch: a resume from here would drop
        # those answers (partial resumes are not allowed), so neither is sent.
        raise ContractViolation(
            "ALREADY_RESOLVED",
            f"Interrupt(s) {', '.join(i.interrupt_id for i in answered)} of this run were answered elsewhere "
            "first; answer the rest there.",
            interrupt_ids=[i.interrupt_id for i in answered],
        )
    for interrupt_id, checked in prepared.answers.items():
        if interrupt_id in expired:
            if checked.status != Decision.Status.CANCELLED:
                raise ContractViolation("EXPIRED", f"Interrupt {interrupt_id} expired and can no longer be answered; "
                                                   "cover it with status cancelled.", interrupt_id=interrupt_id)
            continue
        _take(by_id[interrupt_id], user, checked, now)
    complete = not Interrupt.objects.filter(run=interrupted, status=Interrupt.Status.PENDING).exists()
    if complete and _reopen_lapsed(interrupted, now, [by_id[i].pk for i in prepared.answers if i not in expired]):
        complete = False
    thread_pk = interrupted.thread_id
    relay.inbox_changed(thread_pk, 0, relay.Reason.DECIDED)
    return complete


def expire_due(now=None) -> int:
    """Expire every pending interrupt whose ``expiresAt`` has passed (or cannot be read); queue what it completes.

    Under each batch's lock, so a racing decision and the sweep queue the
    resume once between them (docs/internals/decisions.md, "Expiry"). Returns how many expired.
    """
    now = now or timezone.now()
    # An unreadable expiresAt was recorded as due at once (see outcomes._interrupt_rows).
    due = Interrupt.objects.filter(status=Interrupt.Status.PENDING, expires_at__lte=now)
    closed = 0
    for run_pk in set(due.values_list("run_id", flat=True)):
        with transaction.atomic(durable=True):
            lock_batch(run_pk)
            run = Run.objects.select_related("thread", "agent").get(pk=run_pk)
            count, event = outcomes.expire(run, now)
            closed += count
            if event is None:
                continue
            if (not Interrupt.objects.filter(run=run, status=Interrupt.Status.PENDING).exists()
                    and not _reopen_lapsed(run, now)):
                runs.queue_resume(run, hold=0)
            relay.inbox_changed(run.thread_id, event.seq, relay.Reason.EXPIRED)
    return closed


#: The trail's entry for a decision dropped because its reviewer was never told it was taken.
UNACKNOWLEDGED = "decision.unacknowledged"


def acknowledge(decisions: Iterable[Decision]) -> None:
    """These decisions' answers have reached their reviewers: they count, and a resume they held may go.

    Called once the reply that says so has been sent (``replies.after_reply``).
    A decision taken back meanwhile (undone, superseded) is simply no longer
    unacknowledged. Under the batch's lock, as every change to a batch.

    A resume this lets go at once (no undo hold) is claimed here for this
    process's supervisor and handed to it, when it has a slot free: one
    transaction on the resume's way to the agent, not two.
    """
    handoff, asking = None, settings.COUNTERSIGN_UNDO_SECONDS <= 0
    try:
        for decision in decisions:
            if handoff is None and asking:
                handoff = wakeup.hold_slot()  # before any lock: the supervisor's loop answers
                asking = handoff is not None  # none free now: the rest go the usual way
            taken = None
            with transaction.atomic(durable=True):
                # An interrupt's run never changes: the one the decision was taken with will do.
                run_pk = (decision.interrupt.run_id if Decision.interrupt.is_cached(decision)
                          else Interrupt.objects.values_list("run_id", flat=True).get(pk=decision.interrupt_id))
                lock_batch(run_pk)
                if not Interrupt.objects.filter(pk=decision.interrupt_id, unacknowledged=decision).update(
                        unacknowledged=None):
                    continue
                if not runs.unacknowledged(run_pk):
                    taken = runs.release_resume(run_pk, handoff)
            if taken is not None:  # committed: the claim is the supervisor's to stream
                held, handoff, run = handoff, None, taken
                try:
                    run = Run.objects.select_related("thread", "agent").get(pk=taken)  # outside the locks
                finally:
                    held.stream(run)  # its pk if that read failed: the stream reads it
    finally:
        if handoff is not None:
            handoff.give_back()


def drop_unacknowledged(now=None) -> int:
    """Take back every decision whose reply was never sent (its process died) within the grace; how many.

    Each is superseded, its interrupt waits again, and the resume it held is withdrawn.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.COUNTERSIGN_ACK_GRACE_SECONDS)
    lapsed = Interrupt.objects.filter(unacknowledged__created_at__lt=cutoff)
    dropped = 0
    for run_pk in set(lapsed.values_list("run_id", flat=True)):
        with transaction.atomic(durable=True):
            lock_batch(run_pk)
            for interrupt in (lapsed.filter(run_id=run_pk).select_related("unacknowledged__user", "run__thread")
                              .order_by("pk")):
                decision = interrupt.unacknowledged
                Interrupt.objects.filter(pk=interrupt.pk).update(unacknowledged=None)
                if decision.superseded_at is not None:
                    continue  # taken back already (undone, revised, reopened)
                resume = interrupt.run.resumed_by()
                if resume is not None and not runs.withdraw_resume(resume):
                    continue  # it left before this rule held it: what was sent stands
                Decision.objects.filter(pk=decision.pk).supersede(now)
                Interrupt.objects.filter(pk=interrupt.pk).reopen()
                chain.record_supersessions(interrupt)
                chain.record(UNACKNOWLEDGED, {
                    "decision": decision.pk, "interrupt": interrupt.pk,
                    "interruptId": content.signable(interrupt.interrupt_id),
                    "threadId": interrupt.run.thread.thread_id, "runId": interrupt.run.run_id,
                    "user": {"id": decision.user_id, "username": decision.user.get_username()},
                    "action": decision.action, "droppedAt": now.isoformat(),
                    "withdrawnRunId": resume.run_id if resume is not None else None,
                }, subject=f"decision:{decision.pk}", decision=decision, interrupt=interrupt)
                relay.inbox_changed(interrupt.run.thread_id, interrupt.run.thread.last_seq, relay.Reason.REVISED)
                dropped += 1
    return dropped
