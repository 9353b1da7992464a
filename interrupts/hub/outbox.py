"""The outbox: queued runs, and who streams each one.

A queued ``Run`` row is the outbox entry. It is written in the same transaction
as the change that caused it (``runs.start_run``, ``runs.queue_resume``,
``accept.accept_input``), so committed work is never lost. This module owns
what happens to it next: ``claim_due`` hands due runs to one process each
(row locks), ``renew`` keeps the claim alive while it streams, ``lapsed`` and
``take_over`` settle runs whose process died, ``defer`` queues a run again
with backoff (``retry_delay``) when its agent could not be reached, and
``retry_now`` makes a waiting run due at once.

The idempotency contract: a run is streamed by exactly one process at a time
(conditional UPDATEs on ``claimed_by``), and it is retried only when the agent
never accepted the request (nothing of it reached the agent); every resume
carries a ``resume_key``, so a resume sent twice is the same run, and the
agent sees the same ``runId``.

The delivery record: ``mark_sent`` commits ``Run.sent_at`` just before the
request leaves (and a resume's signed body into the audit trail); the agent's
answer is its recorded events. When a process dies
holding a run, ``streaming.recover`` reads them: a run whose terminal event is
recorded ends as it said; one never sent (no mark) is queued again
(``requeue_lost``, same runId, same input); one sent whose answer was lost is
queued again only for an agent that declares it dedupes by runId
(``protocol.capabilities.dedupes_run_id``), else it fails WORKER_LOST for a
person: the agent may have acted. README, "The outbox's contract".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from ..conf import settings
from ..live import relay
from ..models import Agent, Run, Thread
from ..protocol.trail import RESUME_SENT
from . import events, wakeup
from .refusals import Refusal
from .trail import chain


def refuse_if_agent_full(agent: Agent) -> None:
    # The agent's row lock, as in ``claim_due``: every streaming run of an
    # agent starts under it and is counted after taking it.
    list(Agent.objects.select_for_update().filter(pk=agent.pk).values_list("pk", flat=True))
    if Run.objects.filter(agent=agent, status=Run.Status.STREAMING).count() >= settings.COUNTERSIGN_MAX_AGENT_STREAMS:
        raise Refusal(
            "AGENT_AT_CAPACITY",
            f"Agent {agent.name} already streams {settings.COUNTERSIGN_MAX_AGENT_STREAMS} runs "
            "(COUNTERSIGN_MAX_AGENT_STREAMS): send the input again once one of them has ended.",
        )


def claim_due(limit: int, worker: str, new_limit: int | None = None) -> list[tuple[int, bool]]:
    """Take up to ``limit`` due queued runs for ``worker``; returns (pk, is it a resume) pairs.

    Resumes (runs with a ``resume_key``) are claimed before new runs, oldest
    first, so decisions already made go back to their agents before anything
    new starts; at most ``new_limit`` (default ``limit``) new runs are taken,
    so the caller keeps a share of its slots that only resumes may use
    (``supervisor.resume_slots``). Runs of an agent that already streams
    COUNTERSIGN_MAX_AGENT_STREAMS runs, in any process, are skipped and wait.

    Several processes poll at once. On PostgreSQL the rows are locked with
    ``FOR UPDATE SKIP LOCKED``, so each process takes different runs without
    waiting for the others; SQLite ignores the lock clause, but its IMMEDIATE
    transactions already run one writer at a time. The UPDATE is conditional
    on the run still being queued either way, so a run is never taken twice.

    The per-agent bound is exact, on both databases: a claim locks the agent's
    row (SKIP LOCKED too: an agent another claim, or a gateway request, holds
    is skipped until the next poll instead of waited for) and only then counts
    its streaming runs, which at READ COMMITTED include every claim committed
    before the lock was free; the gateway's ``accept_input`` takes the same
    lock. Runs that stop streaming only lower the count.
    """
    new_limit = limit if new_limit is None else min(new_limit, limit)
    now = timezone.now()
    due = _due(now)
    if not Run.objects.filter(due, status=Run.Status.QUEUED).exists():
        return []  # the usual poll: nothing queued, and no write lock taken to find out
    taken: list[tuple[int, bool]] = []
    delivering: dict[int, int] = {}  # runs taken that waited for their agent before: pk -> thread
    skipped: set[int] = set()  # agents at their limit, or locked by a concurrent claim
    room: dict[int, int] = {}  # agents this claim has locked: how many more runs each may stream
    # Not durable: tests hold its row locks inside an outer transaction to race a claim against an undo.
    with transaction.atomic():
        for resumes in (True, False):
            while True:
                new_taken = sum(1 for _pk, is_resume in taken if not is_resume)
                wanted = limit - len(taken) if resumes else min(limit - len(taken), new_limit - new_taken)
                if wanted <= 0:
                    break
                rows = list(
                    Run.objects.select_for_update(skip_locked=True)
                    .filter(due, status=Run.Status.QUEUED, resume_key__isnull=not resumes)
                    .exclude(agent_id__in=skipped)
                    .exclude(pk__in=[pk for pk, _ in taken])
                    .order_by("created_at", "pk")
                    .values_list("pk", "agent_id", "attempts", "thread_id")[:wanted]
                )
                if not rows:
                    break
                _lock_agents({row[1] for row in rows} - room.keys() - skipped, room, skipped)
                # Each pass takes a run or rules an agent out, so the loop ends.
                for pk, agent, attempts, thread_pk in rows:
                    if agent in skipped:
                        continue
                    taken.append((pk, resumes))
                    if attempts:
                        delivering[pk] = thread_pk
                    room[agent] -= 1
                    if room[agent] <= 0:
                        skipped.add(agent)
                if len(rows) < wanted:
                    break  # that was every due run of the kind: each is taken now or its agent is full
        if not taken:
            return []
        due = [pk for pk, _ in taken]
        updated = Run.objects.filter(pk__in=due).claim(
            worker, now, now + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS))
        if updated != len(due):  # never, under the row locks or SQLite's one writer; if it were, only ours count
            claimed = set(Run.objects.filter(pk__in=due, claimed_by=worker, status=Run.Status.STREAMING)
                          .values_list("pk", flat=True))
        else:
            claimed = set(due)
        if notify := {pk: thread for pk, thread in delivering.items() if pk in claimed}:
            # They were listed as waiting for their agent: the inbox drops them now.
            seqs = dict(Thread.objects.filter(pk__in=notify.values()).values_list("pk", "last_seq"))
            for thread_pk in notify.values():
                relay.inbox_changed(thread_pk, seqs[thread_pk], relay.Reason.DELIVERY)
        return [(pk, is_resume) for pk, is_resume in taken if pk in claimed]


def claim_now(run_pk: int, agent_pk: int, queued_at: datetime, worker: str) -> bool:
    """Take the resume ``run_pk`` (of agent ``agent_pk``, queued at ``queued_at``) for ``worker`` in the
    caller's transaction; False when its agent is at its limit or locked elsewhere, an older resume of
    that agent is due (``claim_due`` takes it first), or the run is no longer queued.

    For a service that has just made the resume due and holds a slot of this process's supervisor for it
    (``wakeup.hold_slot``): the claim ``claim_due`` would make next, under the same agent lock, without
    the round trip through the supervisor. The caller's lock on the run's batch keeps others' hands off it.
    """
    room: dict[int, int] = {}
    skipped: set[int] = set()
    _lock_agents({agent_pk}, room, skipped)
    if agent_pk in skipped:
        return False
    now = timezone.now()
    if Run.objects.filter(_due(now), agent_id=agent_pk, status=Run.Status.QUEUED, resume_key__isnull=False,
                          created_at__lt=queued_at).exists():
        return False
    lease_until = now + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS)
    return bool(Run.objects.filter(pk=run_pk).claim(worker, now, lease_until))


def _due(now: datetime) -> Q:
    """Queued runs that may go at ``now``: never tried, or their retry's (or undo hold's) time has come."""
    return Q(retry_at__isnull=True) | Q(retry_at__lte=now)


def _lock_agents(agents: set[int], room: dict[int, int], skipped: set[int]) -> None:
    """Lock these agents' rows (skipping those locked elsewhere) and note how many more runs each may stream."""
    if not agents:
        return
    locked = set(Agent.objects.select_for_update(skip_locked=True).filter(pk__in=agents)
                 .values_list("pk", flat=True))
    skipped |= agents - locked
    streaming = dict(Run.objects.filter(agent_id__in=locked, status=Run.Status.STREAMING)
                     .values("agent_id").annotate(n=Count("pk")).values_list("agent_id", "n"))
    for agent in locked:
        room[agent] = settings.COUNTERSIGN_MAX_AGENT_STREAMS - streaming.get(agent, 0)
        if room[agent] <= 0:
            skipped.add(agent)


def retry_delay(attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...): doubling, capped."""
    return min(settings.COUNTERSIGN_RETRY_BASE * 2 ** (attempt - 1), settings.COUNTERSIGN_RETRY_MAX_DELAY)


def defer(run: Run, worker: str, code: str, message: str) -> int | None:
    """Queue ``run`` again because its agent could not be reached; the attempt number, or None.

    Only for a failure before the agent accepted the request (nothing of the
    run reached it), so trying again cannot make it act twice. None when
    ``worker`` no longer holds the run (another process settled it).
    """
    attempt = run.attempts + 1
    retry_at = timezone.now() + timedelta(seconds=retry_delay(attempt))
    last_error = f"{code}: {message}"[:2000]
    with transaction.atomic(durable=True):
        taken = Run.objects.filter(pk=run.pk).requeue(
            worker, attempts=attempt, retry_at=retry_at, last_error=last_error)
        if not taken:
            return None
        # In the thread's log too, so its page and the audit trail show each try.
        event = events.note(run, relay.Note.DELIVERY_FAILED, {
            "runId": run.run_id, "attempt": attempt, "code": code, "message": message,
            "retryAt": retry_at.isoformat(),
        })
        relay.inbox_changed(run.thread_id, event.seq, relay.Reason.DELIVERY)
    run.status, run.attempts, run.retry_at, run.last_error = Run.Status.QUEUED, attempt, retry_at, last_error
    return attempt


def mark_sent(run: Run, worker: str, body: bytes, signature: str) -> bool:
    """Record that ``worker`` is sending the run now, committed before the request leaves; False if it lost the claim.

    One conditional UPDATE, which renews the lease too: from here on a crash
    cannot tell whether the agent got the request, so recovery treats it as sent.
    A resume's ``body`` and ``signature`` go into the trail with it (``RESUME_SENT``).
    """
    return _mark_sent(run, worker, body, signature, retried=False)


def mark_sent_again(run: Run, worker: str, body: bytes, signature: str) -> bool:
    """``mark_sent`` tried again after its commit's answer was lost (``streaming._persist``): the entry once."""
    return _mark_sent(run, worker, body, signature, retried=True)


def _mark_sent(run: Run, worker: str, body: bytes, signature: str, *, retried: bool) -> bool:
    now, subject = timezone.now(), f"run:{run.pk}"
    with transaction.atomic(durable=True):
        taken = Run.objects.filter(pk=run.pk, status=Run.Status.STREAMING, claimed_by=worker).update(
            sent_at=now, lease_until=now + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS))
        if taken and run.resume_key and not (retried and _recorded(subject, signature)):
            chain.record(RESUME_SENT, {"agent": run.agent.name, "threadId": run.input.get("threadId"),
                                       "runId": run.run_id, "body": body.decode(), "signature": signature},
                         subject=subject)
    return bool(taken)


def _recorded(subject: str, signature: str) -> bool:
    return (chain.last_data(subject) or {}).get("signature") == signature


def requeue_lost(run: Run, worker: str, message: str) -> bool:
    """Queue again, due at once, a lapsed run ``worker`` took over (``take_over``) that may be sent again.

    For a run never sent (no ``sent_at``), or sent to an agent that dedupes by
    runId: the same row, so the same runId and input go out. ``message`` says
    why in the thread's log, in plain words. False if ``worker`` lost the run.
    """
    with transaction.atomic(durable=True):
        taken = Run.objects.filter(pk=run.pk).requeue(worker, retry_at=None, losses=F("losses") + 1)
        if not taken:
            return False
        event = events.note(run, relay.Note.SENT_AGAIN, {
            "runId": run.run_id, "sent": run.sent_at is not None, "message": message})
        relay.inbox_changed(run.thread_id, event.seq, relay.Reason.DELIVERY)
        transaction.on_commit(wakeup.wake)
    run.status, run.claimed_by, run.sent_at = Run.Status.QUEUED, "", None
    return True


def retry_now(run: Run, user=None) -> bool:
    """Make a run waiting for its agent due at once (the Retry-now action); False if it is not waiting."""
    with transaction.atomic(durable=True):
        moved = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED, attempts__gt=0).update(
            retry_at=timezone.now())
        if not moved:
            return False
        event = events.note(run, relay.Note.RETRY_REQUESTED, {
            "runId": run.run_id, "by": user.get_username() if user is not None else None})
        relay.inbox_changed(run.thread_id, event.seq, relay.Reason.DELIVERY)
        transaction.on_commit(wakeup.wake)
    return True


def renew(run_pk: int, worker: str) -> bool:
    """Extend ``worker``'s claim on a streaming run; False if the claim was lost."""
    return bool(
        Run.objects.filter(pk=run_pk, status=Run.Status.STREAMING, claimed_by=worker).update(
            lease_until=timezone.now() + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS)
        )
    )


def lapsed(now: datetime) -> list[Run]:
    """Streaming runs whose process stopped renewing its claim (it died mid-stream)."""
    found = Run.objects.filter(status=Run.Status.STREAMING).filter(Q(lease_until__lt=now) | Q(lease_until__isnull=True))
    # Asked on every supervisor round and nearly always none: their pks first, the rows only when
    # there are any (the query for whole rows and their thread cost 0.65 ms to build, against 0.28).
    # The rows are read under the same condition: one taken over meanwhile is someone else's.
    pks = list(found.values_list("pk", flat=True))
    return list(found.filter(pk__in=pks).select_related("thread")) if pks else []


def take_over(run: Run, worker: str) -> bool:
    """Claim a lapsed run to settle it; with several processes exactly one wins."""
    return bool(
        Run.objects.filter(pk=run.pk, status=Run.Status.STREAMING, claimed_by=run.claimed_by,
                           lease_until=run.lease_until).update(
            claimed_by=worker, lease_until=timezone.now() + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS)
        )
    )
