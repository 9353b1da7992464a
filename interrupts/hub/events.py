"""The event log: the only writer of Event rows, each numbered within its thread (``Thread.last_seq``).

``append_many`` records what an agent said, in the batches it arrives in, and
folds it into the thread's conversation; ``append_own`` and ``note`` add
Countersign's own events. Watchers are poked after commit through ``relay``.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import closing

from ag_ui.core import CustomEvent
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from ..conf import FOLD_WRITE_BYTES, FOLD_WRITE_EVENTS, FOLD_WRITE_SECONDS, settings
from ..live import relay
from ..models import Event, Run, Thread
from ..protocol import conversation
from ..protocol.wire import dump

logger = logging.getLogger(__name__)


# What a write says of the thread's stored fold (``Thread.folded_seq``) once its events are in: it holds them
# all (the fold is written with them), or it does if it held every event before (they change nothing).
WHOLE, IF_WHOLE = "whole", "if whole"


def _next_seq(thread_pk: int, count: int = 1, *, folded: str | None = IF_WHOLE, **also) -> tuple[int, int]:
    """Reserve ``count`` sequence numbers of the thread, setting ``also`` (its fields) with them.

    ``folded``: ``WHOLE``, ``IF_WHOLE`` or None (the events are not in the stored fold: it lags).
    Returns the last number and the thread's ``folded_seq`` after it.
    """
    # The UPDATE takes the thread row's write lock (PostgreSQL) or the
    # database's (SQLite, IMMEDIATE): two writers can never get one number.
    # One statement (RETURNING) rather than an UPDATE and a SELECT, and the
    # thread's new state and messages in it too: each statement gives up the
    # GIL, and a database thread waits up to 5 ms to get it back from a busy event loop.
    quote = connection.ops.quote_name
    meta = Thread._meta
    last_seq, updated_at = (quote(meta.get_field(name).column) for name in ("last_seq", "updated_at"))
    sets = [f"{last_seq} = {last_seq} + %s", f"{updated_at} = %s"]
    values = [count, connection.ops.adapt_datetimefield_value(timezone.now())]
    # Right-hand sides read the row as it was, on both back ends.
    folded_seq = quote(meta.get_field("folded_seq").column)
    if folded == WHOLE:
        sets.append(f"{folded_seq} = {last_seq} + %s")
        values.append(count)
    elif folded == IF_WHOLE:
        sets.append(f"{folded_seq} = CASE WHEN {folded_seq} = {last_seq} THEN {last_seq} + %s ELSE {folded_seq} END")
        values.append(count)
    for name, value in also.items():
        field = meta.get_field(name)
        sets.append(f"{quote(field.column)} = %s")
        values.append(field.get_db_prep_save(value, connection))
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} "
                       f"WHERE {quote(meta.pk.column)} = %s RETURNING {last_seq}, {folded_seq}",
                       [*values, thread_pk])
        return cursor.fetchone()




def append_own(run: Run, payload: dict) -> Event:
    """Record an event of Countersign's own (not the agent's): a RUN_ERROR, a note."""
    seq, _folded_to = _next_seq(run.thread_id)
    event = Event.objects.create(
        thread_id=run.thread_id, run=run, seq=seq, type=payload["type"], payload=payload, from_agent=False
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
# The changes a fold may leave unwritten for a while: a streamed token, which extends one message or call
# and costs its fold no more than its own length. Any other change (a message or call opened or closed, a
# result, a snapshot, a patch: work the agent chooses, some of it walking the whole conversation) is
# written with its batch, and so is a run's end: ``conversation_of`` and ``settle`` (under the lock that
# ends a run) only ever fold tokens, fewer than FOLD_WRITE_EVENTS.
_DEFERRED_CHANGES = frozenset({"TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT", "TOOL_CALL_ARGS"})
_WRITTEN_AT_ONCE = (_MESSAGE_TYPES - _DEFERRED_CHANGES) | _STATE_TYPES | {"RUN_FINISHED", "RUN_ERROR"}


# What of a thread its fold is read with: the conversation, and how far it reaches.
_STORED = ("messages", "state", "folded_seq", "last_seq")


class _Carry:
    """What the streamer's run carries from one batch to the next: the conversation folded so far.

    Only the run streaming now writes its thread's messages and state (a thread
    streams one run at a time), so the thread is read once per run, not once
    per batch; ``openers`` reopen a chunk stream a batch left open. What was
    folded is written with a batch only now and then (``_folded``): ``unwritten``
    names what changed since, ``deferred`` counts the events and their bytes
    since, and ``written_at`` says when (``time.monotonic``).
    """

    __slots__ = ("messages", "state", "openers", "index", "unwritten", "deferred", "written_at")

    def __init__(self, messages: list, state: object, openers: list, index: tuple | None = None,
                 unwritten: frozenset = frozenset(), deferred: tuple[int, int] = (0, 0),
                 written_at: float | None = None) -> None:
        self.messages, self.state, self.openers, self.index = messages, state, openers, index
        self.unwritten, self.deferred = unwritten, deferred
        self.written_at = time.monotonic() if written_at is None else written_at

    def later(self, events: list[Received], **changed) -> _Carry:
        """This carry after ``events``, with what they ``changed`` (the fold's fields) and nothing written."""
        fields = {name: getattr(self, name) for name in ("messages", "state", "openers", "index")} | changed
        count, size = self.deferred
        return _Carry(**fields, unwritten=self.unwritten, deferred=(count + len(events),
                                                                     size + sum(len(e.text) for e in events)),
                      written_at=self.written_at)


def conversation_of(thread: Thread) -> tuple[list, object]:
    """The thread's messages and state with every event it recorded folded in.

    As stored, unless a streaming run has not yet written its latest fold
    (``Thread.folded_seq``): then the tokens after it are folded on top, as
    the run would have. They are few and cheap to fold (``_DEFERRED_CHANGES``,
    fewer than FOLD_WRITE_EVENTS and under FOLD_WRITE_BYTES), so this may run
    under a lock. The state never lags: what changes it is written at once.
    """
    if thread.folded_seq >= thread.last_seq:
        return thread.messages or [], thread.state
    # Only tokens: the rest of a tail changes nothing, and no chunk stream is open in one (``_folded``).
    payloads = [payload if isinstance(payload, dict) else json.loads(payload) for payload in Event.objects.filter(
        thread_id=thread.pk, seq__gt=thread.folded_seq, seq__lte=thread.last_seq, from_agent=True,
        type__in=_DEFERRED_CHANGES).order_by("seq").values_list("payload", flat=True)]
    return _fold(payloads, thread.messages or [], thread.state).messages, thread.state  # a state is never deferred


def _fold(payloads: list[dict], messages: list, state: object, index: tuple | None = None) -> conversation.Conversation:
    return conversation.fold(payloads, messages, state, max_state_bytes=settings.COUNTERSIGN_MAX_EVENT_BYTES,
                             index=index)


def settle(thread_pk: int) -> None:
    """Write the thread's whole fold if a run left some of it unwritten: inside the transaction that ends it.

    A run's end (``outcomes.finish``, ``outcomes.fail``) calls it: a run that fails may have stopped
    between writes, and one whose stream lost its carry (sent again after a crash, its batch retried)
    may end without having read its fold. So whenever no run streams, the stored fold is whole.
    """
    # Nearly always whole: then one small row read, and the conversation is not decoded.
    thread = Thread.objects.filter(pk=thread_pk, folded_seq__lt=F("last_seq")).only(*_STORED).first()
    if thread is None:
        return
    messages, _state = conversation_of(thread)
    Thread.objects.filter(pk=thread_pk).update(messages=messages, folded_seq=thread.last_seq)


def _folded(run: Run, events: list[Received]) -> tuple[dict, str | None, _Carry | None]:
    """What ``events`` make of the thread: the fields to write with them, what that says of the stored
    fold (``_next_seq``'s ``folded``), and the carry.

    Every event that builds the conversation is folded (``protocol.conversation``),
    as an AG-UI client folds it. Worked out before ``append_many``'s
    transaction: a STATE_DELTA is the agent's JSON Patch, and applying it is
    work the agent chooses (see ``protocol.state``), never to be done holding
    the database's write lock. Written with a run's last batch, with any change but a streamed
    token (``_WRITTEN_AT_ONCE``), and otherwise every FOLD_WRITE_SECONDS, FOLD_WRITE_EVENTS or
    FOLD_WRITE_BYTES (each write is the whole conversation); until then the events are in the
    log, and ``conversation_of`` folds them for a reader.
    """
    kinds = {event.type for event in events}
    messages_change, state_changes = bool(kinds & _MESSAGE_TYPES), bool(kinds & _STATE_TYPES)
    carry = getattr(run, "_conversation_carry", None)
    # Nothing to fold and no fold read: the stored one stays as whole as it was, unless it is known to
    # lag (``append_many`` learns it from each write), when it is read, folded on and written when due.
    # A run object that has not written yet does not know: its first batch (RUN_STARTED) reads it anyway.
    if not messages_change and not state_changes and carry is None and not getattr(run, "_fold_lags", True):
        return {}, IF_WHOLE, None
    if carry is None:
        thread = Thread.objects.only(*_STORED).get(pk=run.thread_id)
        messages, state = conversation_of(thread)
        # Folded on from a fold that lagged (a run cut short before it wrote its own): its messages are written.
        carry = _Carry(messages, state, [], unwritten=frozenset() if thread.folded_seq >= thread.last_seq
                       else frozenset({"messages"}))
    if not messages_change and not state_changes:
        after = carry.later(events)
        deferrable = not carry.openers
    else:
        payloads = [event.payload if event.payload is not None else json.loads(event.text)
                    for event in events if event.type in FOLDED]
        folded = _fold(carry.openers + payloads, carry.messages, carry.state, carry.index)
        for warning in folded.warnings:
            # The event stays in the log; the thread keeps what could be built (C59).
            logger.warning("run %s: %s", run.run_id, warning)
        openers = conversation.chunk_openers(payloads, carry.openers) if carry.openers or kinds & _CHUNKS else []
        # Only what the fold really changed is written: a RUN_STARTED, say, leaves every message as it was (the
        # same objects, so comparing costs a pointer each), and a long conversation is not rewritten for it.
        messages_change = messages_change and folded.messages != carry.messages
        # A state no event touched keeps its stored spelling (None stays None rather than fold's {}).
        state = folded.state if state_changes else carry.state
        after = carry.later(events, messages=folded.messages, state=state, openers=openers, index=folded.index)
        after.unwritten = carry.unwritten | {name for name, changed in (("messages", messages_change),
                                                                        ("state", state_changes)) if changed}
        # A chunk stream open where the fold was last written could not be folded on from there.
        deferrable = not carry.openers and not openers
    if not after.unwritten:
        return {}, IF_WHOLE, after
    count, size = after.deferred
    if deferrable and not kinds & _WRITTEN_AT_ONCE and count < FOLD_WRITE_EVENTS and size < FOLD_WRITE_BYTES \
            and time.monotonic() - after.written_at < FOLD_WRITE_SECONDS:
        return {}, None, after
    return ({name: getattr(after, name) for name in after.unwritten}, WHOLE,
            _Carry(after.messages, after.state, after.openers, after.index))


_CHUNKS = frozenset({"TEXT_MESSAGE_CHUNK", "TOOL_CALL_CHUNK", "REASONING_MESSAGE_CHUNK"})


def append_many(run: Run, events: list[Received | dict], worker: str | None = None) -> list[int] | None:
    """Record events of ``run`` (as received, or wire JSON dicts) in order and fold them into the thread, atomically.

    Their sequence numbers, or None (nothing written) when the run has ended or
    ``worker`` no longer holds it. A terminal event ends the run only through
    ``outcomes.finish`` (docs/internals/outcomes.md).
    """
    if not events:
        return []
    events = [event if isinstance(event, Received) else Received.of(event) for event in events]
    fields, folded, carry = _folded(run, events)
    with transaction.atomic(durable=True):
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
        last, folded_to = _next_seq(run.thread_id, len(events), folded=folded, **fields)
        seqs = list(range(last - len(events) + 1, last + 1))
        _insert_events(run, seqs, events)
        thread_pk, event_type = run.thread_id, events[-1].type
        relay.event_appended(thread_pk, last, event_type)
    if carry is not None:
        run._conversation_carry = carry
    run._fold_lags = folded_to < last
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
            for seq, event in zip(seqs, events, strict=False)]
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


def note(run: Run, name: str, value: dict) -> Event:
    """Record a Countersign event (a CUSTOM event, not the agent's) in the thread's log.

    Must be called inside the transaction of the change it reports.
    """
    return append_own(run, dump(CustomEvent(name=name, value=value)))
