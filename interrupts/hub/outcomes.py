"""How runs and interrupts end: a run finishes or fails, its interrupts are raised, closed or expire.

The status changes are ``transitions``' (docs/internals/outcomes.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ag_ui.core import Interrupt as WireInterrupt
from ag_ui.core import RunErrorEvent
from django.db import transaction
from django.utils import timezone

from ..conf import MAX_RAW_IN_ERROR  # a hub-generated RUN_ERROR carries the offending data, bounded
from ..live import relay
from ..models import Agent, Event, Interrupt, Run, Thread
from ..protocol import dialects, storable, versioning
from ..protocol.contract import interrupt_problems, parse_expiry
from ..protocol.errors import ContractViolation
from ..protocol.wire import dump
from . import events, policies, wakeup
from .notify import enqueue
from .trail import chain

# Given a toolCallId, what the agent proposed: (tool name, parsed args).
# toolCallId -> (tool name, proposed args, doubts about the proposal in words): streaming.proposals.
ProposalLookup = Callable[[str], tuple[str | None, object, list[str]]]


def _interrupt_rows(run: Run, terminal: dict, proposal: ProposalLookup, now) -> list[Interrupt]:
    """The Interrupt rows an interrupt outcome raises, unsaved, with every problem flagged.

    Built before ``finish``'s transaction: flagging means checking the
    agent's schema (metaschema, references, patterns, size), which is the
    agent's to make slow, and must never hold the database's write lock.
    """
    outcome = terminal.get("outcome") if terminal.get("type") == "RUN_FINISHED" else None
    if not outcome or outcome.get("type") != "interrupt":
        return []
    rows = []
    for raw in outcome["interrupts"]:
        wire = WireInterrupt.model_validate(raw)
        problems = [p.as_dict() for p in interrupt_problems(wire)]
        try:
            expires_at = parse_expiry(wire.expires_at)
        except ContractViolation:
            # Flagged in problems. An expiry nobody can read is not "never":
            # the interrupt is due at once and the expiry sweep closes it.
            expires_at = now
        tool_name, args = (None, None)
        if wire.tool_call_id:
            tool_name, args, doubts = proposal(wire.tool_call_id)
            # What makes the proposal doubtful (a snapshot naming another tool or
            # other args than the stream did): the card shows it beside the args.
            problems += [{"code": "DOUBTFUL_PROPOSAL", "interrupt_id": wire.id, "message": doubt} for doubt in doubts]
        if (action := dialects.proposed_action(raw)) is not None:
            # A framework that wraps or describes the call (ADK's confirmation, CrewAI's
            # feedback): the card, policies and attestation name the call itself.
            tool_name, args = action
            problems += [{"code": "DOUBTFUL_PROPOSAL", "interrupt_id": wire.id, "message": doubt}
                         for doubt in _wrapped_doubts(raw, action, proposal)]
        if args is not None and storable.problem(args, "") is not None:
            # Args that decode to what nothing can show or store (an escaped lone
            # surrogate): kept as JSON text, which can.
            args = json.dumps(args)
        reason = _fitted("reason", wire.reason, problems, wire.id)
        tool_name = _fitted("tool_name", tool_name or "", problems, wire.id)
        rows.append(Interrupt(
            run=run,
            run_agent_id=run.agent_id,
            interrupt_id=wire.id,
            reason=reason,
            message=wire.message or "",
            tool_call_id=wire.tool_call_id or "",
            tool_name=tool_name,
            proposed_args=args,
            response_schema=wire.response_schema,
            expires_at=expires_at,
            metadata=wire.metadata,
            raw=raw,
            problems=problems,
        ))
    policies.assign(rows, run.agent_id)
    return rows


def _wrapped_doubts(raw: dict, action: tuple, proposal: ProposalLookup) -> list[str]:
    """Where the stream's own call contradicts the call a wrapper names (ADK's original call), in words."""
    call = dialects.adk_call(raw)
    if call is None or not call["id"]:
        return []
    name, args, _doubts = proposal(call["id"])
    if name is None or (name, args) == action:
        return []
    return [f"The confirmation asks about {action[0]} with the args shown, but the agent's own call "
            f"{call['id'][:100]} was {name} with other args."]


def _fitted(field: str, value: str, problems: list[dict], interrupt_id: str) -> str:
    """``value`` cut to its column, with the cut flagged: the whole of it stays in the interrupt as sent."""
    limit = Interrupt._meta.get_field(field).max_length
    if len(value) <= limit:
        return value
    problems.append({"code": "FIELD_TOO_LONG", "interrupt_id": interrupt_id,
                     "message": f"Its {field.replace('_', ' ')} is {len(value)} characters long: shown cut to "
                                f"{limit}; the whole of it is in the interrupt as the agent sent it."})
    return value[:limit - 1] + "…"


def _finish(run: Run, payload: dict, raised: list[Interrupt], now, notice: str = "",
            pending: list[dict] | None = None) -> None:
    fields = {"finished_at": now, "lease_until": None, "notice": notice, "pending_tool_calls": pending or None}
    if payload["type"] == "RUN_ERROR":
        fields |= {
            "status": Run.Status.FAILED,
            "error_code": (payload.get("code") or "RUN_ERROR")[:100],
            "error_message": payload.get("message") or "",
        }
    else:
        outcome = payload.get("outcome")
        kind = (outcome or {}).get("type", "success")  # legacy: no outcome is success
        fields["outcome"] = outcome
        fields["status"] = {
            "interrupt": Run.Status.INTERRUPTED,
            "cancelled": Run.Status.CANCELLED,
        }.get(kind, Run.Status.SUCCEEDED)
    # Only a run still streaming ends here: one another process already
    # settled (its claim had lapsed) keeps the end it was given.
    if not Run.objects.filter(pk=run.pk).finish(**fields):
        return
    if fields["status"] == Run.Status.INTERRUPTED:
        Interrupt.objects.bulk_create(raised)
        # How it paused, remembered on the agent: its resumes are shaped for it (``dialects.for_agent``).
        # Matching no row once known, the update locks nothing the agent's other runs wait on.
        kind = dialects.pause_kind([row.raw for row in raised])
        Agent.objects.filter(pk=run.agent_id).exclude(paused_as=kind).update(paused_as=kind)
    for name, value in fields.items():
        setattr(run, name, value)


#: Standing approvals of raised interrupts: given the run, its unsaved interrupts and the time, found
#: before the transaction; the call it returns approves them inside it and says which (``automatic.standing``).
Standing = Callable[[Run, list[Interrupt], object], Callable[[], set[int]]]


def finish(run: Run, terminal: dict, proposal: ProposalLookup | None = None, *, notice: str = "",
           pending: list[dict] | None = None, version: str | None = None, standing: Standing | None = None) -> None:
    """End ``run`` as its terminal event says (fail, succeed, cancel, or raise its interrupts), once its stream closed.

    ``terminal``: the end as the agent's dialect reads it; ``notice``: what the dialect noticed;
    ``pending``: tool calls left for its client; ``version``: the protocolVersion its RUN_STARTED declared;
    ``standing``: what approves raised interrupts without asking (policy rules, grants), in the same transaction.
    """
    now = timezone.now()
    raised = _interrupt_rows(run, terminal, proposal or (lambda _id: (None, None, [])), now)
    spend = standing(run, raised, now) if standing is not None and raised else set
    notice = " ".join(part for part in (notice, versioning.notice(version)) if part)
    declared = (version or "")[:Agent._meta.get_field("protocol_version").max_length]
    with transaction.atomic(durable=True):
        _finish(run, terminal, raised, now, notice, pending)
        events.settle(run.thread_id)  # a stream that lost its carry may end with its fold unwritten
        # What the agent says it speaks now; only written when it changed.
        Agent.objects.filter(pk=run.agent_id).exclude(protocol_version=declared).update(protocol_version=declared)
        thread_pk = run.thread_id
        if run.status == Run.Status.INTERRUPTED:
            seq = Thread.objects.values_list("last_seq", flat=True).get(pk=thread_pk)
            approved = spend()
            if waiting := [row for row in raised if row.pk not in approved]:
                enqueue.raised(run, waiting)
            if any(row.expires_at is not None and row.expires_at <= now for row in raised):
                # Already past its expiry: the sweep expires it at once, under the
                # batch's lock, and queues the resume that cancels it (``decisions.expire_due``).
                transaction.on_commit(wakeup.wake)
            relay.inbox_changed(thread_pk, seq, relay.Reason.RAISED)
        elif run.status == Run.Status.FAILED and run.resume_key is not None:
            seq = Thread.objects.values_list("last_seq", flat=True).get(pk=thread_pk)
            enqueue.refused(run, run.error_code, run.error_message)
            relay.inbox_changed(thread_pk, seq, relay.Reason.REFUSED)


def expire(run: Run, now) -> tuple[int, Event | None]:
    """Expire ``run``'s pending interrupts that are past their ``expiresAt``: (how many expired, the note).

    Only those: the rest of the batch stays open for people (1.0, C20). Must
    be called inside the expiry sweep's transaction (``decisions.expire_due``).
    """
    late = list(Interrupt.objects.filter(run=run, status=Interrupt.Status.PENDING, expires_at__lte=now)
                .order_by("pk"))
    if not late:
        return 0, None
    closed = 0
    told: list[tuple[Interrupt, str]] = []
    for interrupt in late:
        # Raised already past its expiry: ``finish`` recorded it pending, and the sweep comes at once.
        when_raised = _raised_expired(interrupt)
        if any(p.get("code") == "INVALID_EXPIRY" for p in interrupt.problems or []):
            # An unreadable expiresAt was recorded as due at once (``_interrupt_rows``).
            reason = f"expiresAt {interrupt.raw.get('expiresAt')!r} is not an ISO-8601 timestamp"
        elif when_raised:
            reason = (f"expiresAt {interrupt.raw.get('expiresAt')} had already passed when the agent raised it "
                      f"({interrupt.created_at:%Y-%m-%d %H:%M:%S} UTC)")
        else:
            reason = f"expired at {interrupt.expires_at:%Y-%m-%d %H:%M:%S} UTC"
        if Interrupt.objects.filter(pk=interrupt.pk).expire(reason[:300], now):
            closed += 1
            chain.record_expiry(interrupt)
            told.append((interrupt, reason[:300]))
    enqueue.expired(run, told)
    raised_late = all(_raised_expired(i) for i in late)
    event = events.note(run, relay.Note.INTERRUPTS_EXPIRED, {
        "runId": run.run_id, **({"whenRaised": True} if raised_late else {}),
        "interrupts": [{"id": i.interrupt_id, "expiresAt": i.raw.get("expiresAt")} for i in late],
    })
    return closed, event


def _raised_expired(interrupt: Interrupt) -> bool:
    # As the agent wrote it: an unreadable one was due at once, so raised expired too.
    try:
        expires = parse_expiry(interrupt.raw.get("expiresAt") if isinstance(interrupt.raw, dict) else None)
    except ContractViolation:
        return True
    return expires is not None and expires <= interrupt.created_at


def fail(run: Run, code: str, message: str, raw: object = None) -> Event | None:
    """End ``run`` as failed with a RUN_ERROR of Countersign's own, recorded in its log; None if it had ended.

    Its pending interrupts close too: the stream that raised them cannot be trusted.
    """
    if isinstance(raw, (str, bytes)) and len(raw) > MAX_RAW_IN_ERROR:
        raw = raw[:MAX_RAW_IN_ERROR] + (b"..." if isinstance(raw, bytes) else "…")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    # What an agent sent may hold NUL, which PostgreSQL refuses in text and jsonb:
    # kept spelled out, so the failure itself can always be recorded.
    message = message.replace("\x00", "\\u0000")
    if isinstance(raw, str):
        raw = raw.replace("\x00", "\\u0000")
    now = timezone.now()
    error_code, error_message, fault = code, message, ""
    error = dump(RunErrorEvent(code=code, message=message, raw_event=raw))
    # Not durable: runs.cancel fails a run inside its own transaction (the stop and its audit commit together).
    with transaction.atomic():
        ended = Run.objects.filter(pk=run.pk).fail(error_code, error_message, fault, now)
        if not ended:
            # Already settled elsewhere: its log must not gain a second ending.
            return None
        event = events.append_own(run, error)
        events.settle(run.thread_id)  # it may have stopped between two writes of its thread's conversation
        if run.resume_key is not None:
            enqueue.refused(run, error_code, error_message)
        closed = Interrupt.objects.filter(run=run).cancel_pending(f"The run failed after raising it ({code}).", now)
        if closed:
            thread_pk, seq = run.thread_id, event.seq
            relay.inbox_changed(thread_pk, seq, relay.Reason.CLOSED)
    run.status, run.error_code, run.error_message, run.fault = Run.Status.FAILED, error_code, error_message, fault
    if run.resume_key is not None:
        # A resume the agent did not take: its batch waits for people again (``refused``).
        relay.inbox_changed(run.thread_id, event.seq, relay.Reason.REFUSED)
    return event
