"""Start and resume runs: the thread gate and building RunAgentInput.

Every run Countersign sends is created here, queued in the same transaction as
the change that caused it (a new message, the last decision of a batch, a
gateway request), so what is committed is never lost. What happens to a queued
run next (claims, leases, retries) is the ``outbox``'s; streaming it is
``streaming``'s, driven by the ``supervisor``; a request only commits the
queued run and wakes the supervisor after commit (``wakeup``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import uuid
from datetime import timedelta

from ag_ui.core import Interrupt as WireInterrupt
from ag_ui.core import ResumeEntry, RunAgentInput
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..conf import MAX_MESSAGE_CHARS, settings
from ..live import relay
from ..models import Agent, Decision, Interrupt, Run, Thread
from ..protocol import dialects, signing
from ..protocol.contract import ThreadGate, check_coverage, check_input, idempotency_key
from ..protocol.conversation import outgoing
from ..protocol.wire import dump
from . import events, outbox, outcomes, wakeup
from .refusals import Refusal


def input_defaults() -> dict:
    """RunAgentInput's list and object fields as Countersign sends them when there is nothing to say.

    Always present, since some agents (TanStack AI's chat()) refuse a body
    without them; fresh each time, as each input is its own.
    """
    return {"tools": [], "context": [], "forwardedProps": {}}


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
    if pending:
        # The batch's expired interrupts still await coverage, by a cancel (C14, C20).
        pending = list(Interrupt.objects.filter(
            run_id=pending[0].run_id, status__in=[Interrupt.Status.PENDING, Interrupt.Status.EXPIRED])
            .select_related("run").order_by("pk"))
    return ThreadGate(
        thread_id=thread.thread_id,
        open_run_id=pending[0].run.run_id if pending else None,
        open_interrupts=tuple(WireInterrupt.model_validate(i.raw) for i in pending),
        last_resume=entries,
        last_resume_run_id=last_resume.run_id if last_resume else None,
        pending_tool_calls=() if pending else left_to_client(thread),
    )


def left_to_client(thread: Thread) -> tuple[str, ...]:
    """The ids of the tool calls the thread's last run left for its client to answer (AG-UI 1.0 C21-C23).

    Only the last run's: the next input answers them or the thread stays
    where it is, so an earlier run's were answered (or the thread moved on
    before 1.0's rule was kept here). A run still streaming has left nothing yet.
    """
    last = (Run.objects.filter(thread=thread).order_by("-created_at", "-pk")
            .values_list("status", "pending_tool_calls").first())
    if last is None or last[0] not in (Run.Status.SUCCEEDED, Run.Status.INTERRUPTED):
        return ()
    return tuple(call["id"] for call in last[1] or [] if isinstance(call, dict) and call.get("id"))


def refuse_if_left_to_client(thread: Thread) -> None:
    """Refuse Countersign's own new input on a thread whose last run waits on a tool its client runs (C23, C24).

    Countersign runs no client's tool, so it cannot answer the calls the
    next input must answer: that client answers them through the gateway,
    or the conversation goes on in a new thread.
    """
    if not left_to_client(thread):
        return
    last = Run.objects.filter(thread=thread).order_by("-created_at", "-pk").first()
    raise Refusal(
        "UNANSWERED_TOOL_CALLS",
        f"This thread's last run is {last.waiting_on_client}, and Countersign cannot run that tool or answer for "
        "it. Let the client that owns the tool answer it, or start a new thread to go on.",
        run_id=last.run_id,
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
    """The gate for Countersign's own input without a resume: only the open interrupts' ids matter (rule 4).

    Its tool calls left to a client are refused in words of their own (``refuse_if_left_to_client``).

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
        return ((), None, None)
    pending = tuple(Interrupt.objects.filter(run__thread=thread, status=Interrupt.Status.PENDING)
                    .order_by("pk").values_list("pk", "version"))
    last = None if pending else Run.objects.filter(thread=thread, resume_key__isnull=False).order_by(
        "-created_at", "-pk").values_list("pk", flat=True).first()
    # The last run and how it stands: it decides which tool calls the input must answer (left_to_client).
    latest = Run.objects.filter(thread=thread).order_by("-created_at", "-pk").values_list("pk", "status").first()
    return (pending, last, latest)


def resume_key(interrupted_run_id: str, contract_key: str, round: int = 0) -> str:
    """The unique key of the resume of one interrupted run.

    The contract's key is (thread, answers); the run is added so that a later
    batch reusing the same interrupt ids and answers still gets its own resume.
    ``round`` counts the batch's settled resumes (``batch_resume_key``): the
    same answers given again after the agent refused them make a new resume.
    """
    text = f"{interrupted_run_id}\n{contract_key}" + (f"\nround {round}" if round else "")
    return hashlib.sha256(text.encode()).hexdigest()


def batch_resume_key(interrupted: Run, contract_key: str) -> tuple[str, Run | None]:
    """The key the resume of ``interrupted`` with these answers takes, and the run that already has it.

    Answers given again after the agent refused them (the batch reopened,
    perhaps after re-sends refused too) are a new resume: the key then
    counts the batch's settled resumes, a number that only grows, so it is
    never one an earlier resume took. Exact only under the batch's lock
    (``decisions.lock_batch``), as every caller holds it.
    """
    key = resume_key(interrupted.run_id, contract_key)
    resumes = Run.objects.defer(*Run.CONVERSATION)  # callers name the run; its input is not read again
    existing = resumes.filter(resume_key=key).first()
    if existing is not None and existing.settlement:
        rounds = Run.objects.filter(parent=interrupted, resume_key__isnull=False).exclude(settlement="").count()
        key = resume_key(interrupted.run_id, contract_key, rounds)
        existing = resumes.filter(resume_key=key).first()
    return key, existing


def refuse_if_refused(thread: Thread) -> None:
    """Refuse new input while the thread's last resume was refused and nobody has dealt with it.

    The agent did not take the answers: people send them again, reopen the
    batch or close it (``refused``) before the thread moves on, so an answer
    is never silently dropped by the next message.
    """
    last = _last_resume(thread)
    if last is not None and last.refused:
        raise Refusal(
            "ANSWER_REFUSED",
            f"The agent refused the answers sent by run {last.run_id} ({last.error_code}): send them again, "
            "reopen the batch for new answers, or close it before the thread takes new input.",
            run_id=last.run_id,
        )


def check_id(kind: str, value: str) -> None:
    # Ids travel in URLs and 200-character columns: refuse what cannot be stored or linked.
    if not value or len(value) > 200 or "/" in value or any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise Refusal("INVALID_ID", f"{kind} must be 1 to 200 characters without '/', spaces or control characters.",
                      status=400)


def refuse_steering(forwarded_props: object) -> None:
    """Refuse ``forwardedProps`` that would steer a LangGraph agent past its interrupts (``dialects.steering``).

    ``RESERVED_FORWARDED_PROPS`` (400): ``node_name`` makes ag-ui-langgraph
    skip to a node as if it ran (the approval step), ``command.resume``
    answers an interrupt outside the inbox. Checked before anything is recorded.
    """
    if keys := dialects.steering(forwarded_props):
        raise Refusal(
            "RESERVED_FORWARDED_PROPS",
            f"forwardedProps {', '.join(repr(k) for k in keys)[:300]} would steer a LangGraph agent past its "
            "interrupts (node_name skips to a node as if it had run; command.resume answers an interrupt): "
            "Countersign does not pass them on. Leave them out; answers go through the inbox or resume[].",
            status=400,
        )


def refuse_if_busy(thread: Thread) -> None:
    busy = Run.objects.filter(thread=thread, status__in=[Run.Status.QUEUED, Run.Status.STREAMING]).first()
    if busy is not None:
        raise Refusal(
            "RUN_IN_PROGRESS",
            f"Run {busy.run_id} of thread {thread.thread_id} is still {busy.status}: wait for it to end, "
            "so the next run starts from its messages and state.",
        )


def thread_for(agent: Agent, thread_id: str | None, title: str = "") -> Thread:
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


def enqueue(thread: Thread, agent: Agent, run_input: dict, *, user=None, parent=None, resume_key=None,
           origin=Run.Origin.HUB, claimed_by: str = "", hold: float = 0) -> Run:
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
        # ``claim_due`` takes no queued run before its retry_at: the hold is the same gate as a retry's backoff.
        retry_at=now + timedelta(seconds=hold) if hold > 0 else None,
    )
    if not claimed_by:
        transaction.on_commit(functools.partial(_wake_after, hold) if hold > 0 else wakeup.wake)
    return run


def _wake_after(hold: float) -> None:
    # The supervisor was not woken when the run was committed (it could not take
    # it yet): a timer on its loop wakes it when the hold ends, so the resume
    # leaves then, not at the next poll. Without a supervisor here, the poll of
    # whichever process has one finds it.
    wakeup.call_soon(_wake_later, hold)


def _wake_later(hold: float) -> None:
    # On the serving loop; a little after the hold, as the loop's clock and the database's need not agree.
    asyncio.get_running_loop().call_later(hold + 0.05, wakeup.wake)


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

    The input carries the thread's conversation as its events built it
    (``protocol.conversation.outgoing``: no activity messages) plus
    ``message`` as a new user message, and its state. Refused with
    ``PENDING_INTERRUPTS`` while the thread waits for decisions.
    """
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        raise Refusal("TOO_LARGE", f"A message holds at most {MAX_MESSAGE_CHARS:,} characters.", status=400)
    refuse_steering(forwarded_props)
    with transaction.atomic(durable=True):
        thread = thread_for(agent, thread_id, title or (message or "")[:80])
        # The thread keeps every message (activity included); the agent gets them without activity (C53).
        messages = list(events.conversation_of(thread)[0])
        if message:
            messages.append({"id": f"msg-{uuid.uuid4().hex}", "role": "user", "content": message})
        run_input = {
            "threadId": thread.thread_id,
            "runId": new_run_id(),
            "state": thread.state if thread.state is not None else {},
            "messages": outgoing(messages),
            **input_defaults(),
            **({"forwardedProps": forwarded_props} if forwarded_props is not None else {}),
        }
        # Only the ids and the (absent) resume matter to the gate: the
        # conversation, which the agent wrote and may be large, is not parsed
        # again inside the transaction.
        check_input(_new_input_gate(thread), RunAgentInput.model_construct(
            thread_id=thread.thread_id, run_id=run_input["runId"], resume=None), timezone.now())
        refuse_if_busy(thread)
        refuse_if_refused(thread)
        refuse_if_left_to_client(thread)
        # The user's message is part of the conversation from now on, whatever the agent sends back.
        Thread.objects.filter(pk=thread.pk).update(messages=messages, folded_seq=F("last_seq"))
        return enqueue(thread, agent, run_input, user=user)


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
    # A call a framework wraps or describes (``dialects.proposed_action``) is named as the call itself,
    # with or without a toolCallId of its own (CrewAI's feedback has none).
    if ((interrupt.tool_call_id or interrupt.tool_name) and status == Decision.Status.RESOLVED
            and closing.action in ("approve", "edit")):
        # What will run: the edited args, or the proposal as approved. Signed with
        # the rest of the body, so an agent can run these rather than its own copy.
        args = closing.edited_args if closing.edited_args is not None else interrupt.proposed_args
        bound = {"toolCallId": interrupt.tool_call_id or None, "toolName": interrupt.tool_name or None, "args": args}
    return {
        **bound,
        "decisions": [
            {"username": d.user.get_username(), "userId": d.user_id, "action": d.action or "",
             "at": d.created_at.isoformat(), "comment": d.comment,
             # Approved by a standing grant in its author's name, not by the person at that moment.
             **({"grant": {"id": d.grant_id, "by": d.user.get_username()}} if d.grant_id else {}),
             # Approved by the policy's "auto-approve when" rule, set by that person.
             **({"byPolicy": {"name": d.policy, "by": d.user.get_username()}} if d.by_policy else {}),
             # The passkey assertion over this exact approval, with the public key that checks it.
             **({"passkey": d.passkey} if d.passkey else {})}
            for d in live
        ],
        "policy": {"name": closing.policy, "requiredApprovals": closing.required_approvals},
        "fingerprint": answer_fingerprint(interrupt, thread_id, status, payload),
    }


def answer_fingerprint(interrupt: Interrupt, thread_id: str, status: str, payload) -> str:
    """The fingerprint of this answer to ``interrupt``: what its resume entry attests, and a passkey signs."""
    return signing.fingerprint(thread_id=thread_id, run_id=interrupt.run.run_id, interrupt_id=interrupt.interrupt_id,
                               tool_call_id=interrupt.tool_call_id or None, status=status, payload=payload)


def resume_entries(interrupted: Run, *, expired: bool | None = None) -> list[dict]:
    """One resume entry per interrupt of ``interrupted``, from its live decisions or its expiry (wire form).

    See ``_answers``, which also says whether any of them is unacknowledged.
    """
    return _answers(interrupted, expired=expired)[0]


def _answers(interrupted: Run, *, expired: bool | None = None) -> tuple[list[dict], bool]:
    """``resume_entries``, and whether a live decision among them has not reached its reviewer yet.

    The answer is the one that closed the interrupt (its last live
    decision: under a quorum every live approval carries the same answer);
    its metadata is the reviewer's, plus Countersign's ``attestation``. An
    expired interrupt is covered as 1.0 requires (C14, C20): ``cancelled``,
    attested as expired (``expiry_attestation``), not as anyone's decision.
    ``expired``: whether the batch has any, when the caller already knows
    (then they are not looked for when it has none).
    """
    live: dict[int, list[Decision]] = {}
    # Each interrupt's run is ``interrupted``, in hand: not joined and decoded again per row.
    decisions = Decision.objects.filter(interrupt__run=interrupted, superseded_at__isnull=True).select_related(
        "interrupt", "user"
    ).order_by("pk")
    for decision in decisions:
        decision.interrupt.run = interrupted
        live.setdefault(decision.interrupt_id, []).append(decision)
    expired = {} if expired is False else {
        i.pk: i for i in Interrupt.objects.filter(run=interrupted, status=Interrupt.Status.EXPIRED)}
    for interrupt in expired.values():
        interrupt.run = interrupted
    thread_id = interrupted.thread.thread_id
    entries = []
    for interrupt_pk in sorted(live.keys() | expired.keys()):
        if interrupt_pk in expired:
            interrupt, status, payload, metadata = expired[interrupt_pk], Decision.Status.CANCELLED, None, {}
            attested = expiry_attestation(interrupt, thread_id)
        else:
            closing = live[interrupt_pk][-1]
            interrupt = closing.interrupt
            status, metadata = closing.status, closing.metadata or {}
            payload = closing.payload if closing.status == Decision.Status.RESOLVED else None
            attested = attestation(interrupt, thread_id, status, payload, live[interrupt_pk])
        # The reviewer's metadata, what the interrupt's framework needs to
        # continue (``dialects.entry_metadata``), and Countersign's attestation, last.
        metadata = {**metadata, **dialects.entry_metadata(interrupt.raw, status, payload),
                    signing.METADATA_KEY: attested}
        entry = ResumeEntry(interrupt_id=interrupt.interrupt_id, status=status, payload=payload, metadata=metadata)
        entries.append(dump(entry))
    # As ``unacknowledged`` asks, read off the decisions loaded already: no query on the deciding path.
    standing = {decision.pk for batch in live.values() for decision in batch}
    waiting = any(decision.interrupt.unacknowledged_id in standing for batch in live.values() for decision in batch)
    return entries, waiting


def expiry_attestation(interrupt: Interrupt, thread_id: str) -> dict:
    """``metadata.countersign`` of an expired interrupt's entry: that it expired, and why; nobody decided it."""
    return {
        "expired": True,
        "expiresAt": interrupt.raw.get("expiresAt") if isinstance(interrupt.raw, dict) else None,
        "reason": interrupt.closed_reason,
        "fingerprint": answer_fingerprint(interrupt, thread_id, Decision.Status.CANCELLED, None),
    }


def queue_resume(interrupted: Run, user=None, *, hold: float | None = None, expired: bool | None = None,
                 size: int | None = None) -> Run:
    """Queue the run that sends every decision of ``interrupted`` back to its agent.

    Called by ``decisions`` in the transaction that records the batch's last
    decision, under the batch's lock. The resume's idempotency key is unique: the same answers can
    start at most one run, so a second dispatch returns the first.

    The run is held for COUNTERSIGN_UNDO_SECONDS (its ``retry_at``) before the
    outbox may take it: until then the person who decided may take the
    decision back (``decisions.undo``, which withdraws it with
    ``withdraw_resume``). A gateway client's resume and a refused answer sent
    again are not decisions made here and are never held; nor is the resume
    the expiry sweep queues (``hold=0``). ``expired``: as ``resume_entries``
    takes it; ``size``: how many interrupts the batch has, when the caller
    counted them.
    """
    thread = interrupted.thread
    entries, waiting = _answers(interrupted, expired=expired)
    # C14, C15: every interrupt of the batch answered exactly once, or nothing is sent. Entries
    # come from this run's interrupts only, so as many distinct ones as the batch has (``size``,
    # counted by the caller under the batch's lock) cover it: no query on the deciding path.
    ids = ([entry["interruptId"] for entry in entries] if size == len(entries) else
           Interrupt.objects.filter(run=interrupted).order_by("pk").values_list("interrupt_id", flat=True))
    check_coverage(ids, [ResumeEntry.model_validate(e) for e in entries], interrupted.run_id, thread.thread_id)
    # Exact: every caller holds the batch's lock (``decisions.lock_batch``), so
    # no other resume of this batch can be written between this and the insert.
    key, existing = batch_resume_key(
        interrupted, idempotency_key(thread.thread_id, [ResumeEntry.model_validate(e) for e in entries]))
    if existing is not None:
        return existing
    run_input = {
        "threadId": thread.thread_id,
        "runId": new_run_id(),
        "parentRunId": interrupted.run_id,
        "state": thread.state if thread.state is not None else {},
        "messages": outgoing(events.conversation_of(thread)[0]),
        **input_defaults(),
        "resume": entries,
    }
    run_input = dialect_input(interrupted, run_input)
    hold = settings.COUNTERSIGN_UNDO_SECONDS if hold is None else hold
    if waiting:
        # Some answer it carries has not reached its reviewer yet: held until it
        # has (``release_resume``), or taken back if it never does.
        hold = UNTIL_ACKNOWLEDGED
    return enqueue(thread, interrupted.agent, run_input, user=user, parent=interrupted, resume_key=key, hold=hold)


#: A resume held for an answer not yet acknowledged: longer than any grace, so only
#: ``release_resume`` or ``decisions.drop_unacknowledged`` ends the hold.
UNTIL_ACKNOWLEDGED = 10 * 365 * 24 * 3600.0


def undo_until(resume: Run):
    """When ``resume``'s undo hold ends, or None when it is due: a hold for an acknowledgement is not shown as one."""
    if resume.retry_at is None:
        return None
    return min(resume.retry_at, resume.created_at + timedelta(seconds=settings.COUNTERSIGN_UNDO_SECONDS))


def unacknowledged(interrupted_pk: int) -> bool:
    """Whether a standing decision of this batch has not reached its reviewer yet (``decisions.acknowledge``)."""
    return Interrupt.objects.filter(run_id=interrupted_pk, unacknowledged__isnull=False,
                                    unacknowledged__superseded_at__isnull=True).exists()


def release_resume(interrupted_pk: int, handoff: wakeup.Handoff | None = None) -> int | None:
    """Let the held resume of the run ``interrupted_pk`` go, now that every answer it carries was acknowledged.

    It keeps what is left of its undo hold (COUNTERSIGN_UNDO_SECONDS from when
    it was queued). Call under the batch's lock (``decisions.lock_batch``).
    With ``handoff`` (a slot of this process's supervisor), a resume due at once may be
    claimed for it here (``outbox.claim_now``): its pk is returned, for the caller to hand
    over after commit. Otherwise None, and the supervisor is woken to claim it.
    """
    now = timezone.now()
    taken = None
    # Its key and when it was queued: not the conversation it carries.
    for pk, created_at, agent_pk in Run.objects.filter(
            parent_id=interrupted_pk, resume_key__isnull=False, status=Run.Status.QUEUED, claimed_by="", attempts=0
    ).values_list("pk", "created_at", "agent_id"):
        due = created_at + timedelta(seconds=settings.COUNTERSIGN_UNDO_SECONDS)
        if due <= now and handoff is not None and taken is None and outbox.claim_now(
                pk, agent_pk, created_at, handoff.worker):
            taken = pk
            continue
        Run.objects.filter(pk=pk).update(retry_at=due if due > now else None)
        left = (due - now).total_seconds()
        transaction.on_commit(functools.partial(_wake_after, left) if left > 0 else wakeup.wake)
    return taken


def withdrawable(resume: Run) -> bool:
    """Whether ``resume`` may still be withdrawn: queued, never taken by a process nor tried (no query).

    Only a hint for pages (whether to offer Undo): ``withdraw_resume`` decides.
    """
    return resume.status == Run.Status.QUEUED and not resume.claimed_by and not resume.attempts


def withdraw_resume(resume: Run) -> bool:
    """Take back a queued resume nothing has sent yet (an undo); False once a process took it or tried it.

    Call under the batch's lock (``decisions.lock_batch``), in the
    transaction that reopens its decisions. The row is deleted, not
    cancelled: the agent never heard of its runId, and its ``resume_key``
    must be free for the same answers given again (a cancelled row would
    keep the key, and the next resume of those answers would be taken for
    it). Nothing references a run no process has taken: events, interrupts
    and child runs (all PROTECT) appear only once it streams, and the audit
    trail names runs by their ids, never by foreign key.

    The race with ``outbox.claim_due``: the row is locked first, with the
    conditions that make it withdrawable. On PostgreSQL a claim that locked
    it first (``SKIP LOCKED`` never waits, so no deadlock) has committed by
    the time this lock is granted, and the row, read again, no longer
    matches: False. One that comes later skips the locked row, and then
    finds it gone. SQLite runs one writer at a time, so the claim is before
    or after this transaction, never inside it.
    """
    held = Run.objects.filter(pk=resume.pk, status=Run.Status.QUEUED, claimed_by="", attempts=0)
    if held.select_for_update().values_list("pk", flat=True).first() is None:
        return False
    held.delete()
    return True


def dialect_input(interrupted: Run, run_input: dict) -> dict:
    """A resume's RunAgentInput as the agent's framework takes it (``protocol.dialects``)."""
    dialect = dialects.for_agent(interrupted.agent.dialect, interrupted.agent.paused_as)
    if not dialect.reshapes_resume:
        return run_input
    batch = list(Interrupt.objects.filter(run=interrupted).order_by("pk").values_list("raw", flat=True))
    return dialect.resume_input(run_input, batch)


def cancel(run: Run, user=None, *, by: str = "") -> bool:
    """Stop a run as an operator: streaming, or queued (waiting for its agent); False if it already ended.

    The run fails with a RUN_ERROR ``CANCELLED_BY_OPERATOR`` naming who
    stopped it, recorded through ``outcomes.fail`` (which closes any pending
    interrupt of the run), so the thread takes input again. The stream stops
    without writing anything after it: at once when this process streams it
    (``wakeup.stop_stream``), otherwise at that process's next batch
    (``append_many`` refuses it) or heartbeat. ``user`` None is the command
    line, named by ``by``. Refused with ``STAFF_ONLY`` (403) for anyone not
    staff; callers answer False with ``NOT_RUNNING``.
    """
    if user is not None and not user.is_staff:
        raise Refusal("STAFF_ONLY", "Only staff can stop a run.", status=403)
    who = user.get_username() if user is not None else (by or "an operator")
    with transaction.atomic(durable=True):
        event = outcomes.fail(run, "CANCELLED_BY_OPERATOR", f"Stopped by {who}.")
        if event is None:
            return False
        # It may have been listed as waiting for its agent: the inbox drops it.
        relay.inbox_changed(run.thread_id, event.seq, relay.Reason.DELIVERY)
        transaction.on_commit(functools.partial(wakeup.stop_stream, run.pk))
    return True
