"""The event log: the only writer of Event rows, and of what they mean for runs, threads and interrupts.

Three functions add events, each numbering them within the thread
(``Thread.last_seq``) and broadcasting after commit through ``relay``:
``append_many`` records what an agent said, in the batches it arrives in (a
transaction per event would cap the relay at the database's commit rate),
folding them into the thread's conversation (``protocol.conversation``); ``fail`` ends a run with a
hub-generated RUN_ERROR (closing its pending interrupts); ``note`` adds a
CUSTOM event of Countersign's own (``relay.Note``). Nothing else writes an
Event. ``finish`` ends a run as its terminal event (already appended) says,
raising its interrupts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import closing

from ag_ui.core import CustomEvent, Interrupt as WireInterrupt, RunErrorEvent
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from . import policies, wakeup
from .notify import enqueue
from .trail import chain
from ..conf import MAX_RAW_IN_ERROR  # a hub-generated RUN_ERROR carries the offending data, bounded
from ..conf import settings
from ..live import relay
from ..models import Agent, Event, Interrupt, Run, Thread
from ..protocol import conversation, dialects, storable, versioning
from ..protocol.contract import interrupt_problems, parse_expiry
from ..protocol.errors import ContractViolation
from ..protocol.wire import dump

logger = logging.getLogger(__name__)

# Given a toolCallId, what the agent proposed: (tool name, parsed args).
# toolCallId -> (tool name, proposed args, doubts about the proposal in words): streaming.proposals.
ProposalLookup = Callable[[str], tuple[str | None, object, list[str]]]


def _next_seq(thread_pk: int, count: int = 1) -> int:
    """Reserve ``count`` sequence numbers of the thread; the last one."""
    # The UPDATE takes the thread row's write lock (PostgreSQL) or the
    # database's (SQLite, IMMEDIATE): two writers can never get one number.
    # One statement (RETURNING) rather than an UPDATE and a SELECT: each
    # statement gives up the GIL, and a database thread waits up to 5 ms to
    # get it back from a busy event loop.
    quote = connection.ops.quote_name
    meta = Thread._meta
    last_seq, updated_at = (quote(meta.get_field(name).column) for name in ("last_seq", "updated_at"))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(meta.db_table)} SET {last_seq} = {last_seq} + %s, {updated_at} = %s "
            f"WHERE {quote(meta.pk.column)} = %s RETURNING {last_seq}",
            [count, connection.ops.adapt_datetimefield_value(timezone.now()), thread_pk])
        return cursor.fetchone()[0]


def _log(run: Run, payload: dict, from_agent: bool) -> Event:
    seq = _next_seq(run.thread_id)
    event = Event.objects.create(
        thread_id=run.thread_id, run=run, seq=seq, type=payload["type"], payload=payload, from_agent=from_agent
    )
    thread_pk, event_type = run.thread_id, payload["type"]
    relay.event_appended(thread_pk, seq, event_type)
    return event


class Received:
    """One agent event as it arrived: its type, its JSON text exactly as sent, and that text decoded.

    ``payload`` may be None for an event whose content the hub never reads
    (the streamer decodes only what it needs: snapshots, deltas, the
    terminal event): the text is what is stored.
    """

    __slots__ = ("type", "text", "payload")

    def __init__(self, type: str, text: str, payload: dict | None = None) -> None:
        self.type, self.text, self.payload = type, text, payload

    @classmethod
    def of(cls, payload: dict) -> Received:
        return cls(payload["type"], json.dumps(payload), payload)


# Events whose content folds into the thread (or closes a chunk stream that does): the streamer decodes them.
FOLDED = conversation.FOLDED_TYPES
# Of those, the ones that can change the thread's messages, or its state.
_MESSAGE_TYPES = FOLDED - {"STATE_SNAPSHOT", "STATE_DELTA", "RUN_FINISHED", "RUN_ERROR", "STEP_STARTED",
                           "STEP_FINISHED", "REASONING_START", "REASONING_END", "CUSTOM", "SUBAGENT_FINISHED",
                           "SUBAGENT_ERROR"}
_STATE_TYPES = frozenset({"STATE_SNAPSHOT", "STATE_DELTA"})

# What a batch of events leaves unchanged in the thread (its state, its messages).
_UNCHANGED = object()


class _Carry:
    """What the streamer's run carries from one batch to the next: the conversation folded so far.

    Only the run streaming now writes its thread's messages and state (a thread
    streams one run at a time), so the thread is read once per run, not once
    per batch; ``openers`` reopen a chunk stream a batch left open.
    """

    __slots__ = ("messages", "state", "openers")

    def __init__(self, messages: list, state: object, openers: list) -> None:
        self.messages, self.state, self.openers = messages, state, openers


def _folded(run: Run, events: list[Received]) -> tuple[object, object, _Carry | None]:
    """The thread's state and messages after ``events`` (``_UNCHANGED`` where none of them says), and the carry.

    Every event that builds the conversation is folded (``protocol.conversation``),
    as an AG-UI client folds it. Worked out before ``append_many``'s
    transaction: a STATE_DELTA is the agent's JSON Patch, and applying it is
    work the agent chooses (see ``protocol.state``), never to be done holding
    the database's write lock.
    """
    kinds = {event.type for event in events}
    messages_change, state_changes = bool(kinds & _MESSAGE_TYPES), bool(kinds & _STATE_TYPES)
    if not messages_change and not state_changes:
        return _UNCHANGED, _UNCHANGED, None
    carry = getattr(run, "_conversation_carry", None)
    if carry is None:
        messages, state = Thread.objects.values_list("messages", "state").get(pk=run.thread_id)
        carry = _Carry(messages or [], state, [])
    payloads = [event.payload if event.payload is not None else json.loads(event.text)
                for event in events if event.type in FOLDED]
    folded = conversation.fold(carry.openers + payloads, carry.messages, carry.state,
                               max_state_bytes=settings.COUNTERSIGN_MAX_EVENT_BYTES)
    for warning in folded.warnings:
        # The event stays in the log; the thread keeps what could be built (C59).
        logger.warning("run %s: %s", run.run_id, warning)
    openers = conversation.chunk_openers(payloads, carry.openers) if carry.openers or kinds & _CHUNKS else []
    # A state no event touched keeps its stored spelling (None stays None rather than fold's {}).
    state = folded.state if state_changes else carry.state
    return (state if state_changes else _UNCHANGED, folded.messages if messages_change else _UNCHANGED,
            _Carry(folded.messages, state, openers))


_CHUNKS = frozenset({"TEXT_MESSAGE_CHUNK", "TOOL_CALL_CHUNK", "REASONING_MESSAGE_CHUNK"})


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
    if not Run.objects.filter(pk=run.pk, status=Run.Status.STREAMING).update(**fields):
        return
    if fields["status"] == Run.Status.INTERRUPTED:
        Interrupt.objects.bulk_create(raised)
        # How it paused, remembered on the agent: its resumes are shaped for it (``dialects.for_agent``).
        # Matching no row once known, the update locks nothing the agent's other runs wait on.
        kind = dialects.pause_kind([row.raw for row in raised])
        Agent.objects.filter(pk=run.agent_id).exclude(paused_as=kind).update(paused_as=kind)
    for name, value in fields.items():
        setattr(run, name, value)


def append_many(run: Run, events: list[Received | dict], worker: str | None = None) -> list[int] | None:
    """Record events of ``run`` (as received, or wire JSON dicts) in order and fold them into the thread, atomically.

    Returns their sequence numbers, or None (nothing written) when the run
    has ended meanwhile, or ``worker`` no longer holds it: an operator
    stopped it, or another process settled it. The streamer stops on None.
    Every event that builds the conversation (text, tool calls and results,
    reasoning, activity, snapshots, state deltas) updates the thread's
    messages and state, as an AG-UI client builds them. A
    terminal event is recorded here but finishes the run only through
    ``finish``, once the stream has ended cleanly after it. Watchers get one
    poke, for the last event, after commit.
    """
    if not events:
        return []
    events = [event if isinstance(event, Received) else Received.of(event) for event in events]
    state, messages, carry = _folded(run, events)
    with transaction.atomic():
        # Locked before the thread's sequence numbers, in the order ``fail``
        # takes them (run, then thread): a RUN_ERROR recorded by anyone else
        # either waits for this batch, or is seen here and nothing follows it.
        # On PostgreSQL a locked row changed meanwhile is re-checked on its new
        # version; SQLite's IMMEDIATE transactions run one writer at a time.
        holding = Run.objects.select_for_update().filter(
            pk=run.pk, status__in=[Run.Status.QUEUED, Run.Status.STREAMING])
        if worker is not None:
            holding = holding.filter(status=Run.Status.STREAMING, claimed_by=worker)
        if not holding.exists():
            return None
        last = _next_seq(run.thread_id, len(events))
        seqs = list(range(last - len(events) + 1, last + 1))
        _insert_events(run, seqs, events)
        if state is not _UNCHANGED:
            Thread.objects.filter(pk=run.thread_id).update(state=state)
        if messages is not _UNCHANGED:
            Thread.objects.filter(pk=run.thread_id).update(messages=messages)
        thread_pk, event_type = run.thread_id, events[-1].type
        relay.event_appended(thread_pk, last, event_type)
    if carry is not None:
        run._conversation_carry = carry
    return seqs


# Rows per INSERT on SQLite: 7 parameters each, within the 32,766 SQLite
# allows by default; a statement per 500 rows cost the writer a wait for the
# GIL each (see _next_seq).
INSERT_ROWS = 4096
# From this many rows PostgreSQL takes them by COPY; a smaller batch (a slow
# agent's event, a terminal one) by INSERT, one round trip where COPY takes two.
COPY_ROWS = 32
EVENT_COLUMNS = ("thread", "run", "seq", "type", "payload", "from_agent", "received_at")


def _insert_events(run: Run, seqs: list[int], events: list[Received]) -> None:
    # Not bulk_create: building a model instance and its SQL per event cost
    # ~140 µs, most of the relay's time. PostgreSQL takes a large batch by
    # COPY (~40 µs a row, against ~140 µs for a multi-row INSERT, whose
    # parameters psycopg quotes one by one); SQLite by multi-row INSERT.
    # Agent events only: they need no save() logic (the table is
    # append-only, guarded by triggers) and no signals.
    meta = Event._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    columns = ", ".join(quote(meta.get_field(name).column) for name in EVENT_COLUMNS)
    received = connection.ops.adapt_datetimefield_value(timezone.now())
    # The payload column takes the agent's text as sent (json on PostgreSQL, text on SQLite).
    thread_pk, run_pk = run.thread_id, run.pk
    rows = [(thread_pk, run_pk, seq, event.type[:64], event.text, True, received)
            for seq, event in zip(seqs, events)]
    # The driver's own cursor, on the same connection (so in the same transaction
    # as the sequence numbers), with Django's error translation kept: Django's
    # cursor rewrites the SQL's placeholders on every call, and under DEBUG
    # logged each 500-row INSERT by quoting its 3,500 parameters with a query
    # of their own.
    connection.ensure_connection()
    with connection.wrap_database_errors, closing(connection.connection.cursor()) as cursor:
        postgresql = connection.vendor == "postgresql"
        if postgresql and len(rows) >= COPY_ROWS:
            with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        placeholders = "(" + ", ".join(["%s" if postgresql else "?"] * len(EVENT_COLUMNS)) + ")"
        for start in range(0, len(rows), INSERT_ROWS):
            chunk = rows[start:start + INSERT_ROWS]
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {', '.join([placeholders] * len(chunk))}",
                           [value for row in chunk for value in row])


def finish(run: Run, terminal: dict, proposal: ProposalLookup | None = None, *, notice: str = "",
           pending: list[dict] | None = None, version: str | None = None) -> None:
    """End ``run`` as its terminal event says, once its stream closed cleanly.

    RUN_ERROR fails it with the agent's code; RUN_FINISHED succeeds, is
    cancelled, or (interrupt outcome) raises one pending ``Interrupt`` per
    item, with the tool call's name and proposed args from ``proposal``.
    ``terminal`` is the end as the agent's dialect reads it
    (``protocol.dialects``); ``notice`` what the dialect noticed.
    ``pending``: the tool calls the run left for its client
    (``streaming.left_to_client``). ``version``: the protocolVersion its
    RUN_STARTED declared, kept on the agent (None: it declared none), and
    warned about in the notice when newer or unreadable (C66, C67).

    An interrupt whose ``expiresAt`` had already passed when it was raised
    is due at once: the supervisor is woken to sweep it (``decisions.expire_due``).
    """
    now = timezone.now()
    raised = _interrupt_rows(run, terminal, proposal or (lambda _id: (None, None, [])), now)
    notice = " ".join(part for part in (notice, versioning.notice(version)) if part)
    declared = (version or "")[:Agent._meta.get_field("protocol_version").max_length]
    with transaction.atomic():
        _finish(run, terminal, raised, now, notice, pending)
        # What the agent says it speaks now; only written when it changed.
        Agent.objects.filter(pk=run.agent_id).exclude(protocol_version=declared).update(protocol_version=declared)
        thread_pk = run.thread_id
        if run.status == Run.Status.INTERRUPTED:
            seq = Thread.objects.values_list("last_seq", flat=True).get(pk=thread_pk)
            enqueue.raised(run, raised)
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

    Only those: the rest of the batch stays open for people (1.0, C20: an
    expired interrupt is still covered, abandoned with ``cancelled``, when
    the batch is resumed; ``runs.resume_entries``). Each says why, each
    expiry is in the audit trail, and one CUSTOM note of Countersign's lists
    them in the log. Called by the expiry sweep (``decisions.expire_due``),
    which holds the batch's lock and queues the resume when nothing is left
    open. Must be called inside the transaction of the change.
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
        if Interrupt.objects.filter(pk=interrupt.pk, status=Interrupt.Status.PENDING).update(
            status=Interrupt.Status.EXPIRED, closed_at=now, closed_reason=reason[:300], version=F("version") + 1,
        ):
            closed += 1
            chain.record_expiry(interrupt)
            told.append((interrupt, reason[:300]))
    enqueue.expired(run, told)
    raised_late = all(_raised_expired(i) for i in late)
    event = note(run, relay.Note.INTERRUPTS_EXPIRED, {
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
    """End ``run`` as failed with a RUN_ERROR of Countersign's own, recorded in its log.

    Used for every fault of a stream (HTTP error, refused connection, timeout,
    malformed or misplaced events): the run never stays "streaming", and the
    log says why. Interrupts the run may have raised are closed, since the
    stream that raised them cannot be trusted.
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
    with transaction.atomic():
        ended = Run.objects.filter(pk=run.pk, status__in=[Run.Status.QUEUED, Run.Status.STREAMING]).update(
            status=Run.Status.FAILED, error_code=error_code[:100], error_message=error_message, fault=fault,
            finished_at=now, lease_until=None,
        )
        if not ended:
            # Already settled elsewhere: its log must not gain a second ending.
            return None
        event = _log(run, error, from_agent=False)
        if run.resume_key is not None:
            enqueue.refused(run, error_code, error_message)
        closed = Interrupt.objects.filter(run=run, status=Interrupt.Status.PENDING).update(
            status=Interrupt.Status.CANCELLED,
            closed_at=now,
            closed_reason=f"The run failed after raising it ({code}).",
            version=F("version") + 1,
        )
        if closed:
            thread_pk, seq = run.thread_id, event.seq
            relay.inbox_changed(thread_pk, seq, relay.Reason.CLOSED)
    run.status, run.error_code, run.error_message, run.fault = Run.Status.FAILED, error_code, error_message, fault
    if run.resume_key is not None:
        # A resume the agent did not take: its batch waits for people again (``refused``).
        relay.inbox_changed(run.thread_id, event.seq, relay.Reason.REFUSED)
    return event


def note(run: Run, name: str, value: dict) -> Event:
    """Record a Countersign event (a CUSTOM event, not the agent's) in the thread's log.

    Must be called inside the transaction of the change it reports.
    """
    return _log(run, dump(CustomEvent(name=name, value=value)), from_agent=False)
