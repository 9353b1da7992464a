"""Start and resume runs: the thread gate, building RunAgentInput, claiming work.

Every run Countersign sends is created here, queued in the same transaction as
the change that caused it (a new message, the last decision of a batch, a
gateway request), so what is committed is never lost. Streaming is someone
else's job (``streaming``, driven by the ``supervisor``); a request only
commits the queued run and wakes the supervisor after commit.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from ag_ui.core import Interrupt as WireInterrupt, ResumeEntry, RunAgentInput
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from . import recording, relay, supervisor
from .models import Agent, Decision, Interrupt, Run, Thread
from .protocol import signing
from .protocol.contract import ThreadGate, Verdict, check_input, idempotency_key
from .protocol.wire import dump
from .refusals import Refusal

MAX_MESSAGE_CHARS = 100_000


def new_run_id() -> str:
    """A fresh runId: random, so two processes never pick the same one."""
    return f"run-{uuid.uuid4().hex}"


def thread_gate(thread: Thread | None, thread_id: str = "") -> ThreadGate:
    """The thread as the contract sees it: its open interrupts and its last accepted resume.

    ``None`` (a thread not yet created) is a thread with nothing open. This
    parses what the agent sent (every open interrupt, schemas included):
    call it outside any transaction, and confirm under the lock with
    ``gate_fingerprint`` that the thread is still as it was read.
    """
    if thread is None:
        return ThreadGate(thread_id=thread_id)
    pending = _pending(thread)
    last_resume = None if pending else _last_resume(thread)
    entries = ()
    if last_resume is not None:
        entries = tuple(ResumeEntry.model_validate(e) for e in last_resume.input.get("resume") or [])
    return ThreadGate(
        thread_id=thread.thread_id,
        open_run_id=pending[0].run.run_id if pending else None,
        open_interrupts=tuple(WireInterrupt.model_validate(i.raw) for i in pending),
        last_resume=entries,
        last_resume_run_id=last_resume.run_id if last_resume else None,
    )


def _pending(thread: Thread) -> list[Interrupt]:
    return list(
        Interrupt.objects.filter(run__thread=thread, status=Interrupt.Status.PENDING)
        .select_related("run")
        .order_by("pk")
    )


def _last_resume(thread: Thread) -> Run | None:
    # With interrupts open, the same answers are meant for them, not a replay
    # of an earlier batch that happened to use the same ids: callers only ask
    # when nothing is pending.
    return Run.objects.filter(thread=thread, resume_key__isnull=False).order_by("-created_at", "-pk").first()


def _new_input_gate(thread: Thread) -> ThreadGate:
    """The gate for input without a resume: only the open interrupts' ids matter (rule 4).

    Built from columns, not by parsing each interrupt as the agent sent it,
    so it is cheap enough to read inside the transaction that queues the run.
    """
    pending = list(Interrupt.objects.filter(run__thread=thread, status=Interrupt.Status.PENDING)
                   .order_by("pk").values_list("interrupt_id", "reason", "run__run_id"))
    return ThreadGate(
        thread_id=thread.thread_id,
        open_run_id=pending[0][2] if pending else None,
        open_interrupts=tuple(WireInterrupt.model_construct(id=iid, reason=reason) for iid, reason, _ in pending),
    )


def gate_fingerprint(thread: Thread | None) -> tuple:
    """What ``thread_gate`` depends on, cheaply: the open interrupts' (pk, version) and the last resume.

    Two equal fingerprints mean the gate read from them is the same (an
    interrupt's raw form never changes; its version moves with its status).
    """
    if thread is None:
        return ((), None)
    pending = tuple(Interrupt.objects.filter(run__thread=thread, status=Interrupt.Status.PENDING)
                    .order_by("pk").values_list("pk", "version"))
    last = None if pending else Run.objects.filter(thread=thread, resume_key__isnull=False).order_by(
        "-created_at", "-pk").values_list("pk", flat=True).first()
    return (pending, last)


def resume_key(interrupted_run_id: str, contract_key: str) -> str:
    """The unique key of the resume of one interrupted run.

    The contract's key is (thread, answers); the run is added so that a later
    batch reusing the same interrupt ids and answers still gets its own resume.
    """
    return hashlib.sha256(f"{interrupted_run_id}\n{contract_key}".encode()).hexdigest()


def _check_id(kind: str, value: str) -> None:
    # Ids travel in URLs and 200-character columns: refuse what cannot be stored or linked.
    if not value or len(value) > 200 or "/" in value or any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise Refusal("INVALID_ID", f"{kind} must be 1 to 200 characters without '/', spaces or control characters.",
                      status=400)


def _refuse_if_busy(thread: Thread) -> None:
    busy = Run.objects.filter(thread=thread, status__in=[Run.Status.QUEUED, Run.Status.STREAMING]).first()
    if busy is not None:
        raise Refusal(
            "RUN_IN_PROGRESS",
            f"Run {busy.run_id} of thread {thread.thread_id} is still {busy.status}: wait for it to end, "
            "so the next run starts from its messages and state.",
        )


def _thread_for(agent: Agent, thread_id: str | None, title: str = "") -> Thread:
    if not thread_id:
        return Thread.objects.create(thread_id=f"thread-{uuid.uuid4().hex}", agent=agent, title=title[:200])
    thread, _ = Thread.objects.get_or_create(thread_id=thread_id, defaults={"agent": agent, "title": title[:200]})
    if thread.agent_id != agent.pk:
        raise Refusal(
            "AGENT_MISMATCH",
            f"Thread {thread_id} belongs to agent {thread.agent.name}, not {agent.name}: "
            "start a new thread to talk to another agent.",
        )
    return thread


def _queue(thread: Thread, agent: Agent, run_input: dict, *, user=None, parent=None, resume_key=None,
           origin=Run.Origin.HUB, claimed_by: str = "") -> Run:
    now = timezone.now()
    # A resume continues its parent's request: whoever decided it did not ask for it.
    requested_by_id = parent.requested_by_id if resume_key and parent is not None else (user.pk if user else None)
    run = Run.objects.create(
        requested_by_id=requested_by_id,
        thread=thread,
        agent=agent,
        run_id=run_input["runId"],
        parent=parent,
        input=run_input,
        resume_key=resume_key,
        created_by=user,
        origin=origin,
        status=Run.Status.STREAMING if claimed_by else Run.Status.QUEUED,
        claimed_by=claimed_by,
        lease_until=now + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS) if claimed_by else None,
        started_at=now if claimed_by else None,
    )
    if not claimed_by:
        transaction.on_commit(supervisor.wake)
    return run


def start_run(
    agent: Agent,
    *,
    user=None,
    thread_id: str | None = None,
    message: str | None = None,
    forwarded_props: object = None,
    title: str = "",
) -> Run:
    """Queue a new (non-resume) run on a thread, creating the thread if needed.

    The input carries the thread's latest MESSAGES_SNAPSHOT plus ``message``
    as a new user message, and its latest STATE_SNAPSHOT. Refused with
    ``PENDING_INTERRUPTS`` while the thread waits for decisions.
    """
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        raise Refusal("TOO_LARGE", f"A message holds at most {MAX_MESSAGE_CHARS:,} characters.", status=400)
    with transaction.atomic():
        thread = _thread_for(agent, thread_id, title or (message or "")[:80])
        messages = list(thread.messages or [])
        if message:
            messages.append({"id": f"msg-{uuid.uuid4().hex}", "role": "user", "content": message})
        run_input = {
            "threadId": thread.thread_id,
            "runId": new_run_id(),
            "state": thread.state if thread.state is not None else {},
            "messages": messages,
            "tools": [],
            "context": [],
            "forwardedProps": forwarded_props if forwarded_props is not None else {},
        }
        # Only the ids and the (absent) resume matter to the gate: the
        # conversation, which the agent wrote and may be large, is not parsed
        # again inside the transaction.
        check_input(_new_input_gate(thread), RunAgentInput.model_construct(
            thread_id=thread.thread_id, run_id=run_input["runId"], resume=None), timezone.now())
        _refuse_if_busy(thread)
        # The user's message is part of the conversation from now on, even if
        # the agent never sends a MESSAGES_SNAPSHOT.
        Thread.objects.filter(pk=thread.pk).update(messages=messages)
        return _queue(thread, agent, run_input, user=user)


def attestation(interrupt: Interrupt, thread_id: str, status: str, payload, live: list[Decision]) -> dict:
    """``metadata.countersign`` of one resume entry: who decided, under which policy, and what exactly.

    Written by Countersign alone (a reviewer's or client's ``countersign``
    key is refused), so an agent that verifies the request's signature can
    trust it: ``fingerprint`` binds the answer to its thread, interrupted
    run, interrupt and tool call (``protocol.signing.fingerprint``); for an
    approved tool call, ``toolName`` and ``args`` say what was approved to run.
    """
    closing = live[-1]
    bound = {}
    if interrupt.tool_call_id and status == Decision.Status.RESOLVED and closing.action in ("approve", "edit"):
        # What will run: the edited args, or the proposal as approved. Signed with
        # the rest of the body, so an agent can run these rather than its own copy.
        args = closing.edited_args if closing.edited_args is not None else interrupt.proposed_args
        bound = {"toolCallId": interrupt.tool_call_id, "toolName": interrupt.tool_name or None, "args": args}
    return {
        **bound,
        "decisions": [
            {"username": d.user.get_username(), "userId": d.user_id, "action": d.action or "",
             "at": d.created_at.isoformat(), "comment": d.comment}
            for d in live
        ],
        "policy": {"name": closing.policy, "requiredApprovals": closing.required_approvals},
        "fingerprint": signing.fingerprint(
            thread_id=thread_id, run_id=interrupt.run.run_id, interrupt_id=interrupt.interrupt_id,
            tool_call_id=interrupt.tool_call_id or None, status=status, payload=payload,
        ),
    }


def resume_entries(interrupted: Run) -> list[dict]:
    """One resume entry per interrupt of ``interrupted``, from its live decisions (wire form).

    The answer is the one that closed the interrupt (its last live
    decision: under a quorum every live approval carries the same answer);
    its metadata is the reviewer's, plus Countersign's ``attestation``.
    """
    live: dict[int, list[Decision]] = {}
    decisions = Decision.objects.filter(interrupt__run=interrupted, superseded_at__isnull=True).select_related(
        "interrupt__run", "user"
    ).order_by("pk")
    for decision in decisions:
        live.setdefault(decision.interrupt_id, []).append(decision)
    thread_id = interrupted.thread.thread_id
    entries = []
    for interrupt_pk in sorted(live):
        closing = live[interrupt_pk][-1]
        interrupt = closing.interrupt
        payload = closing.payload if closing.status == Decision.Status.RESOLVED else None
        metadata = {**(closing.metadata or {}),
                    signing.METADATA_KEY: attestation(interrupt, thread_id, closing.status, payload,
                                                      live[interrupt_pk])}
        entry = ResumeEntry(interrupt_id=interrupt.interrupt_id, status=closing.status, payload=payload,
                            metadata=metadata)
        entries.append(dump(entry))
    return entries


def queue_resume(interrupted: Run, user=None) -> Run:
    """Queue the run that sends every decision of ``interrupted`` back to its agent.

    Called by ``decisions`` in the transaction that records the batch's last
    decision. The resume's idempotency key is unique: the same answers can
    start at most one run, so a second dispatch returns the first.
    """
    thread = interrupted.thread
    entries = resume_entries(interrupted)
    key = resume_key(interrupted.run_id,
                     idempotency_key(thread.thread_id, [ResumeEntry.model_validate(e) for e in entries]))
    existing = Run.objects.filter(resume_key=key).first()
    if existing is not None:
        return existing
    run_input = {
        "threadId": thread.thread_id,
        "runId": new_run_id(),
        "parentRunId": interrupted.run_id,
        "state": thread.state if thread.state is not None else {},
        "messages": list(thread.messages or []),
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "resume": entries,
    }
    try:
        with transaction.atomic():
            return _queue(thread, interrupted.agent, run_input, user=user, parent=interrupted, resume_key=key)
    except IntegrityError:
        return Run.objects.get(resume_key=key)


@dataclass(frozen=True)
class Accepted:
    """What the gateway does with an input: stream ``run`` (new or resume), or replay it.

    ``run`` is None for a resume whose approvals were recorded but do not
    yet complete the batch (a quorum): nothing is sent to the agent yet.
    """

    verdict: Verdict
    run: Run | None


#: What a gateway client's resume may set in the input sent to the agent: its own
#: runtime (tools, context, forwardedProps). The rest is Countersign's record.
CLIENT_RESUME_FIELDS = ("tools", "context", "forwardedProps")

# How often the gateway checks a resume again when the thread changed between
# the check (outside the lock) and the record (under it): a busy thread, not a
# retry loop that can spin.
ACCEPT_ATTEMPTS = 3


def accept_input(agent: Agent, run_input: RunAgentInput, user, worker: str) -> Accepted:
    """Hold a client's RunAgentInput to the contract and record it as a run of this process.

    New input and resumes become a run claimed by ``worker`` (the gateway
    streams it at once); a resume's answers are recorded as decisions by
    ``user``, racing the inbox fairly: whoever answers first wins, the other
    gets ``ALREADY_RESOLVED``. A replay of the last accepted resume returns
    the run it started, and nothing is sent to the agent again.

    Every contract rule, the answers' schemas included, is checked before
    the transaction, against the thread as read then; under the lock only
    ``gate_fingerprint`` confirms the thread is unchanged. If it changed
    (interrupts raised or answered meanwhile), the check runs again, at most
    ``ACCEPT_ATTEMPTS`` times, then ``THREAD_BUSY`` (409). Other refusals:
    the contract's codes, ``INVALID_ID``, ``AGENT_MISMATCH``,
    ``DUPLICATE_RUN_ID``, ``RUN_IN_PROGRESS``, and ``AGENT_AT_CAPACITY``
    when the agent already streams COUNTERSIGN_MAX_AGENT_STREAMS runs
    (counted over every process, under the agent's row lock as in
    ``claim_due``; a resume counts like a new run, a replay calls nobody and
    is never refused). A refused input leaves nothing behind, not even a
    resume's decisions: the client may send it again.
    """
    from . import decisions  # decisions queues resumes through this module

    _check_id("threadId", run_input.thread_id)
    _check_id("runId", run_input.run_id)
    for _attempt in range(ACCEPT_ATTEMPTS):
        existing = Thread.objects.filter(thread_id=run_input.thread_id).select_related("agent").first()
        if existing is not None and existing.agent_id != agent.pk:
            _thread_for(agent, run_input.thread_id)  # refuses with AGENT_MISMATCH
        seen = gate_fingerprint(existing)
        verdict = check_input(thread_gate(existing, run_input.thread_id), run_input, timezone.now())
        prepared = None
        if verdict.kind == "resume":
            by_id = {i.interrupt_id: i for i in Interrupt.objects.filter(
                run__thread=existing, run__run_id=verdict.interrupted_run_id).select_related("run")}
            prepared = decisions.prepare_resume(by_id, list(run_input.resume), user)
        wire_input = dump(run_input)
        with transaction.atomic():
            thread = _thread_for(agent, run_input.thread_id)
            if gate_fingerprint(thread) != seen:
                continue  # raised or answered meanwhile: check again against what is there now
            if verdict.kind == "replay":
                return Accepted(verdict, Run.objects.get(thread=thread, run_id=verdict.replay_of_run_id))
            _refuse_if_agent_full(agent)
            if Run.objects.filter(thread=thread, run_id=run_input.run_id).exists():
                raise Refusal(
                    "DUPLICATE_RUN_ID",
                    f"Thread {thread.thread_id} already has a run {run_input.run_id}: use a fresh runId.",
                )
            parent = key = None
            if verdict.kind == "resume":
                parent = Run.objects.select_related("thread").get(thread=thread, run_id=verdict.interrupted_run_id)
                if not decisions.record_resume(parent, prepared, user):
                    return Accepted(verdict, None)
                key = resume_key(parent.run_id, verdict.idempotency_key)
                # What the agent receives is Countersign's record, not the client's: the
                # answers, attested, and the thread's state and messages as the agent
                # last sent them. A client's own state could otherwise change what an
                # approval makes the agent do (an approval's payload names no args).
                # Only the fields RunAgentInput defines, too: a client's extra keys would
                # travel signed beside the attestation, as if Countersign said them.
                wire_input = {**{k: wire_input[k] for k in CLIENT_RESUME_FIELDS if k in wire_input},
                              "threadId": thread.thread_id, "runId": run_input.run_id,
                              "parentRunId": parent.run_id, "resume": resume_entries(parent),
                              "state": thread.state if thread.state is not None else {},
                              "messages": list(thread.messages or [])}
            else:
                _refuse_if_busy(thread)
                # The client's conversation and state are the thread's record from now on
                # (a resume sends the record, not whatever the client sends then).
                recorded = {"messages": wire_input.get("messages") or []}
                if wire_input.get("state") is not None:
                    recorded["state"] = wire_input["state"]
                Thread.objects.filter(pk=thread.pk).update(**recorded)
            run = _queue(thread, agent, wire_input, user=user, parent=parent, resume_key=key,
                         origin=Run.Origin.GATEWAY, claimed_by=worker)
            return Accepted(verdict, run)
    raise Refusal("THREAD_BUSY", f"Thread {run_input.thread_id} kept changing while this input was checked "
                                 "(interrupts raised or answered meanwhile); send it again.")


def _refuse_if_agent_full(agent: Agent) -> None:
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
    taken: list[tuple[int, bool]] = []
    skipped: set[int] = set()  # agents at their limit, or locked by a concurrent claim
    room: dict[int, int] = {}  # agents this claim has locked: how many more runs each may stream
    with transaction.atomic():
        for resumes in (True, False):
            while True:
                new_taken = sum(1 for _pk, is_resume in taken if not is_resume)
                wanted = limit - len(taken) if resumes else min(limit - len(taken), new_limit - new_taken)
                if wanted <= 0:
                    break
                rows = list(
                    Run.objects.select_for_update(skip_locked=True)
                    .filter(status=Run.Status.QUEUED, resume_key__isnull=not resumes)
                    .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
                    .exclude(agent_id__in=skipped)
                    .exclude(pk__in=[pk for pk, _ in taken])
                    .order_by("created_at", "pk")
                    .values_list("pk", "agent_id")[:wanted]
                )
                if not rows:
                    break
                _lock_agents({agent for _pk, agent in rows} - room.keys() - skipped, room, skipped)
                # Each pass takes a run or rules an agent out, so the loop ends.
                for pk, agent in rows:
                    if agent in skipped:
                        continue
                    taken.append((pk, resumes))
                    room[agent] -= 1
                    if room[agent] <= 0:
                        skipped.add(agent)
        if not taken:
            return []
        due = [pk for pk, _ in taken]
        Run.objects.filter(pk__in=due, status=Run.Status.QUEUED).update(
            status=Run.Status.STREAMING,
            claimed_by=worker,
            started_at=now,
            retry_at=None,
            lease_until=now + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS),
        )
        claimed = {pk: (attempts, thread_pk, seq) for pk, attempts, thread_pk, seq in
                   Run.objects.filter(pk__in=due, claimed_by=worker, status=Run.Status.STREAMING)
                   .values_list("pk", "attempts", "thread_id", "thread__last_seq")}
        for attempts, thread_pk, seq in claimed.values():
            if attempts:  # it was listed as waiting for its agent: the inbox drops it now
                _tell_inbox(thread_pk, seq)
        return [(pk, is_resume) for pk, is_resume in taken if pk in claimed]


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


def _tell_inbox(thread_pk: int, seq: int) -> None:
    # The inbox lists runs waiting for their agent: after commit, its watchers refresh.
    transaction.on_commit(lambda: relay.inbox_changed(thread_pk, seq, "delivery"))


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
    with transaction.atomic():
        taken = Run.objects.filter(pk=run.pk, status=Run.Status.STREAMING, claimed_by=worker).update(
            status=Run.Status.QUEUED, claimed_by="", lease_until=None, started_at=None,
            attempts=attempt, retry_at=retry_at, last_error=last_error,
        )
        if not taken:
            return None
        # In the thread's log too, so its page and the audit trail show each try.
        event = recording.note(run, "countersign.delivery_failed", {
            "runId": run.run_id, "attempt": attempt, "code": code, "message": message,
            "retryAt": retry_at.isoformat(),
        })
        _tell_inbox(run.thread_id, event.seq)
    run.status, run.attempts, run.retry_at, run.last_error = Run.Status.QUEUED, attempt, retry_at, last_error
    return attempt


def retry_now(run: Run, user=None) -> bool:
    """Make a run waiting for its agent due at once (the Retry-now action); False if it is not waiting."""
    with transaction.atomic():
        moved = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED, attempts__gt=0).update(
            retry_at=timezone.now())
        if not moved:
            return False
        event = recording.note(run, "countersign.retry_requested", {
            "runId": run.run_id, "by": user.get_username() if user is not None else None})
        _tell_inbox(run.thread_id, event.seq)
        transaction.on_commit(supervisor.wake)
    return True


def cancel(run: Run, user=None, *, by: str = "") -> bool:
    """Stop a run as an operator: streaming, or queued (waiting for its agent); False if it already ended.

    The run fails with a RUN_ERROR ``CANCELLED_BY_OPERATOR`` naming who
    stopped it, recorded through ``recording.fail`` (which closes any pending
    interrupt of the run), so the thread takes input again. The stream stops
    without writing anything after it: at once when this process streams it
    (``supervisor.stop_stream``), otherwise at that process's next batch
    (``append_many`` refuses it) or heartbeat. ``user`` None is the command
    line, named by ``by``. Refused with ``STAFF_ONLY`` (403) for anyone not
    staff; callers answer False with ``NOT_RUNNING``.
    """
    if user is not None and not user.is_staff:
        raise Refusal("STAFF_ONLY", "Only staff can stop a run.", status=403)
    who = user.get_username() if user is not None else (by or "an operator")
    with transaction.atomic():
        event = recording.fail(run, "CANCELLED_BY_OPERATOR", f"Stopped by {who}.")
        if event is None:
            return False
        # It may have been listed as waiting for its agent: the inbox drops it.
        _tell_inbox(run.thread_id, event.seq)
        transaction.on_commit(functools.partial(supervisor.stop_stream, run.pk))
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
    return list(
        Run.objects.filter(status=Run.Status.STREAMING)
        .filter(Q(lease_until__lt=now) | Q(lease_until__isnull=True))
        .select_related("thread")
    )


def take_over(run: Run, worker: str) -> bool:
    """Claim a lapsed run to settle it; with several processes exactly one wins."""
    return bool(
        Run.objects.filter(pk=run.pk, status=Run.Status.STREAMING, claimed_by=run.claimed_by,
                           lease_until=run.lease_until).update(
            claimed_by=worker, lease_until=timezone.now() + timedelta(seconds=settings.COUNTERSIGN_LEASE_SECONDS)
        )
    )
