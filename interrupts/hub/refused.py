"""Answers the agent refused: a resumed run that failed, and how people settle it.

A failed resume stays *refused* (``Run.refused``), and its thread takes no new
input, until someone settles it under the batch's lock, once: ``resend`` the
same answers, ``reopen`` the interrupts for new ones, or ``close`` them
cancelled. Staff may settle any; others only if eligible for every interrupt
of the batch. Each settlement is an audit entry and a note in the thread's log.
"""

from __future__ import annotations

import hashlib

from django.db import transaction
from django.utils import timezone

from ..live import relay
from ..models import Interrupt, Run
from ..rules import eligibility
from ..rules.settling import may_have_acted
from . import decisions, events, policies, runs
from .refusals import Refusal
from .trail import chain

SETTLED = "resume.settled"

#: How much of the agent's error message the audit entry keeps (the run keeps it whole).
MAX_ERROR_IN_TRAIL = 500


def _refused(run: Run) -> Run:
    """``run`` re-read under its batch's lock, refused with ``NOT_REFUSED`` (409) unless it is a refused answer."""
    current = Run.objects.select_related("thread", "agent", "parent").get(pk=run.pk)
    if current.resume_key is None or current.parent_id is None:
        raise Refusal("NOT_REFUSED", f"Run {current.run_id} is not a resume: it sent no answers.", status=409)
    if current.status != Run.Status.FAILED:
        raise Refusal("NOT_REFUSED", f"Run {current.run_id} is {current.status}: the agent did not refuse its "
                                     "answers.", status=409)
    if current.settlement:
        who = current.settled_by.get_username() if current.settled_by_id else "someone"
        raise Refusal("ALREADY_SETTLED", f"Run {current.run_id}'s refused answer was already dealt with: "
                                         f"{current.get_settlement_display().lower()} by {who}.",
                      status=409, settlement=current.settlement, settled_by=who)
    return current


def _refusals(user, refused_runs: list[Run]) -> dict[int, Refusal | None]:
    """For each refused run (by pk), why ``user`` may not settle it, or None: two queries for any number."""
    if user.is_staff:
        return {run.pk: None for run in refused_runs}
    parents = {run.parent_id: run.pk for run in refused_runs}
    # The policies in force now, not the one stored on each interrupt: that is
    # kept current for pending interrupts only, and these were decided.
    batch = list(Interrupt.objects.filter(run_id__in=list(parents)).select_related("run"))
    rules = eligibility.rules_held(batch)
    found: dict[int, Refusal | None] = {run.pk: None for run in refused_runs}
    for interrupt in batch:
        pk = parents[interrupt.run_id]
        if found[pk] is None:
            found[pk] = policies.refusal(user, rules[interrupt.pk], interrupt)
    return found


def refuse_unless_may_settle(user, run: Run) -> None:
    """Staff, or someone eligible to decide every interrupt of the refused batch; else the policy's refusal (403)."""
    problem = _refusals(user, [run])[run.pk]
    if problem is not None:
        raise problem


def _settle(run: Run, user, settlement: str, now) -> None:
    if not Run.objects.filter(pk=run.pk).settle(settlement, user, now):
        raise Refusal("ALREADY_SETTLED", f"Run {run.run_id}'s refused answer was just dealt with by someone else.",
                      status=409)
    run.settlement, run.settled_by, run.settled_at = settlement, user, now


def _record(run: Run, user, settlement: str, **more) -> None:
    chain.record(SETTLED, {
        "run": run.pk,
        "threadId": run.thread.thread_id,
        "runId": run.run_id,
        "parentRunId": run.parent.run_id,
        "errorCode": run.error_code,
        "errorMessage": run.error_message[:MAX_ERROR_IN_TRAIL],
        "fault": run.fault[:MAX_ERROR_IN_TRAIL],
        "settlement": settlement,
        "by": user.get_username(),
        **more,
    }, subject=f"run:{run.pk}")
    event = events.note(run, relay.Note.REFUSED_ANSWER_SETTLED,
                     {"runId": run.run_id, "settlement": settlement, "by": user.get_username(), **more})
    relay.inbox_changed(run.thread_id, event.seq, relay.Reason.SETTLED)


def resend(run: Run, user) -> Run:
    """Send the refused answers again, unchanged, as a new run; returns it.

    The new run's input is the refused one's with a fresh runId: the same
    answers, attestations and parentRunId (signed afresh when sent). Refused
    with ``MAY_HAVE_ACTED`` when the agent may have acted on them already
    (``may_have_acted``), and ``RUN_IN_PROGRESS`` while the thread streams
    another run.
    """
    refuse_unless_may_settle(user, run)
    with transaction.atomic(durable=True):
        decisions.lock_batch(run.parent_id)
        run = _refused(run)
        if Run.objects.filter(may_have_acted(), pk=run.pk).exists():
            raise Refusal("MAY_HAVE_ACTED", f"The agent may have acted on the answers run {run.run_id} sent "
                                            "(it streamed more than an error, or its stream was lost mid-run): "
                                            "sending them again could make it act twice. Reopen the batch to "
                                            "answer again, or close it.", status=409)
        runs.refuse_if_busy(run.thread)
        now = timezone.now()
        run_input = {**run.input, "runId": runs.new_run_id()}
        _settle(run, user, Run.Settlement.RESENT, now)
        # A key of its own: the refused run keeps the answers' key, and each
        # re-send is one new run, never two.
        key = hashlib.sha256(f"{run.resume_key}\nresent as {run_input['runId']}".encode()).hexdigest()
        again = runs.enqueue(run.thread, run.agent, run_input, user=user, parent=run.parent, resume_key=key)
        _record(run, user, Run.Settlement.RESENT, resentAs=again.run_id)
        return again


def reopen(run: Run, user) -> list[Interrupt]:
    """Return the refused batch's interrupts to pending; their answers stay in the trail, superseded.

    A new decision on each then makes a new resume (``runs.batch_resume_key``
    counts the settled resumes, so the same answers given again are sent
    again). Refused with ``EXPIRED`` when an interrupt of the batch is past
    its ``expiresAt``: it could not be answered again.
    """
    refuse_unless_may_settle(user, run)
    with transaction.atomic(durable=True):
        decisions.lock_batch(run.parent_id)
        run = _refused(run)
        now = timezone.now()
        # Only the answered ones reopen: an expired one stays expired, and the next resume cancels it.
        late = Interrupt.objects.filter(run_id=run.parent_id, expires_at__lte=now).exclude(
            status=Interrupt.Status.EXPIRED).values_list("interrupt_id", flat=True)
        if late:
            # Reopened, it would only expire again: nobody may answer it now.
            raise Refusal("EXPIRED", f"Interrupt(s) {', '.join(late)} of this batch expired: they can no longer be "
                                     "answered. Send the answers again, or close the batch.", status=409)
        _settle(run, user, Run.Settlement.REOPENED, now)
        decided = list(Interrupt.objects.filter(
            run_id=run.parent_id, status__in=[Interrupt.Status.RESOLVED, Interrupt.Status.CANCELLED]
        ).select_related("run__thread").order_by("pk"))
        for interrupt in decided:
            interrupt.decisions.supersede(now)
            Interrupt.objects.filter(pk=interrupt.pk).reopen()
            chain.record_supersessions(interrupt)
        _record(run, user, Run.Settlement.REOPENED, interruptIds=[i.interrupt_id for i in decided])
        return decided


def close(run: Run, user) -> list[Interrupt]:
    """End the refused batch: its interrupts close cancelled, and the thread takes new input again."""
    refuse_unless_may_settle(user, run)
    with transaction.atomic(durable=True):
        decisions.lock_batch(run.parent_id)
        run = _refused(run)
        now = timezone.now()
        _settle(run, user, Run.Settlement.CLOSED, now)
        reason = f"Closed by {user.get_username()} after the agent refused the answer ({run.error_code})."
        closing = list(Interrupt.objects.filter(run_id=run.parent_id).exclude(status=Interrupt.Status.EXPIRED)
                       .order_by("pk"))
        Interrupt.objects.filter(pk__in=[i.pk for i in closing]).close(Interrupt.Status.CANCELLED, reason[:300], now)
        _record(run, user, Run.Settlement.CLOSED, interruptIds=[i.interrupt_id for i in closing])
        return closing
