"""Call an agent, read its SSE stream as it arrives, record every event.

One coroutine, ``stream_run``, per run: it POSTs the run's RunAgentInput,
feeds the response through the incremental SSE reader, parses each frame into
the official models, checks the run's lifecycle (RUN_STARTED first, nothing
after the terminal event) and appends each event as it arrives. Every fault
ends the run as failed with a hub-generated RUN_ERROR carrying a code: a run
is never left "streaming". Every run ends: one streaming longer than
COUNTERSIGN_MAX_RUN_SECONDS fails with RUN_TOO_LONG, however chatty its agent.

A run can also be ended by someone else (an operator's CANCELLED_BY_OPERATOR,
another process settling a lost claim). The streamer then stops reading and
writes nothing more, told three ways, fastest first: ``stop`` (an operator
in this process), ``append_many`` refusing a batch, a failed heartbeat.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence

import httpx
from ag_ui.core import Interrupt as WireInterrupt
from django.db import InterfaceError, OperationalError, connection

from ..conf import MAX_ERROR_BODY, MAX_INTERRUPTS, MAX_PENDING_TOOL_CALL_CHARS, MAX_PENDING_TOOL_CALLS, settings
from ..live import relay
from ..models import Event, Interrupt, Run, Thread
from ..protocol import capabilities, dialects, signing, storable, versioning
from ..protocol.contract import duplicate_ids
from ..protocol.errors import MalformedMessage, MalformedStream, ProtocolError
from ..protocol.lifecycle import RunLifecycle, StreamFault
from ..protocol.sse import SSEReader
from ..protocol.wire import known_input, parse_event, parse_frame, strip_unknown_outcome
from . import automatic, crashpoints, dbthreads, egress, events, outbox, outcomes

logger = logging.getLogger(__name__)

# Streaming's database work runs on threads of its own (``dbthreads`` says why):
# a few on PostgreSQL, one on SQLite. ``database(function)`` is a coroutine function.
database = dbthreads.Pool("streaming-db", {"postgresql": 4})


# A write that fails because the database connection is gone (a restart,
# pg_terminate_backend, a pool handing out a connection either killed) is tried
# again on a fresh connection: this many times at most, waiting from
# WRITE_RETRY_FIRST seconds, doubling up to WRITE_RETRY_MAX_DELAY, and never
# past WRITE_RETRY_SECONDS in all. Then the run is left to lapse (``WritesFailed``).
WRITE_RETRIES = 12
WRITE_RETRY_FIRST = 0.05
WRITE_RETRY_MAX_DELAY = 2.0
WRITE_RETRY_SECONDS = 20.0


def connection_lost(problem: BaseException) -> bool:
    """Whether a database error may pass on a fresh connection: the one predicate streaming retries on.

    Django raises OperationalError and InterfaceError for a connection that
    broke or could not be had (and for a lock or disk that may free up), never
    for a write the database refused as wrong (IntegrityError, DataError).
    """
    return isinstance(problem, (OperationalError, InterfaceError))


def _discard_dead_connections() -> None:
    # The broken connection was closed on its way out (``dbthreads``); the pool's
    # idle ones died with it if the server restarted: check them all now, so the
    # retry is not handed the next dead one.
    pool = getattr(connection, "pool", None)
    if pool is not None:
        try:
            pool.check()
        except Exception:  # the database may still be down: the retry itself will tell
            logger.debug("could not check the connection pool", exc_info=True)


class WritesFailed(Exception):
    """The run's record could not be written, on fresh connections either: it is left for recovery."""


# Events (and their bytes) read but not yet written, at most: past either the
# reader waits for the writer, so a database slower than the agent cannot make
# the hub hold a run's whole stream in memory. Large: each batch costs the
# writer a few waits for the GIL whatever its size (see events._next_seq).
MAX_PENDING = 16384
MAX_PENDING_BYTES = 16 * 1024 * 1024


class Stopped(Exception):
    """The run was ended by someone else (an operator, another process): stop, write nothing more."""


class Fault(Exception):
    """A stream fault found by the hub, with the code of the RUN_ERROR it records."""

    def __init__(self, code: str, message: str, raw: object = None, *, unreached: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.raw = code, message, raw
        # True when the agent provably did not take the run (nothing was
        # accepted): trying again later cannot make it act twice.
        self.unreached = unreached


# Answers that mean "not now" rather than "no": the request was not processed.
RETRY_STATUSES = {429, 502, 503}


def _error_body_message(body: bytes, content_type: str) -> str:
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace").strip()
    if "json" in content_type:
        try:
            data = json.loads(body)
        except ValueError:
            return text
        if isinstance(data, dict):
            for key in ("message", "detail", "error"):
                if data.get(key):
                    value = data[key]
                    return value if isinstance(value, str) else json.dumps(value)[:MAX_ERROR_BODY]
    return text


async def _chunks(response: httpx.Response, lifecycle: RunLifecycle) -> AsyncIterator[bytes]:
    """The body's bytes; after the terminal event, only what arrives within the grace period."""
    iterator = response.aiter_bytes()
    while True:
        try:
            if lifecycle.finished:
                chunk = await asyncio.wait_for(anext(iterator), settings.COUNTERSIGN_AFTER_TERMINAL_GRACE)
            else:
                chunk = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError:
            return  # finished and quiet: the agent just kept the connection open
        except httpx.HTTPError:
            if lifecycle.finished:
                return  # answered to the end, then the connection broke: the answer stands
            raise
        yield chunk


# The streamed-token events, and the attribute (and wire key) naming what each extends. Not STATE_DELTA:
# its model holds each patch operation as a model of its own, which the fold cannot apply.
_DELTA_IDS = {"TEXT_MESSAGE_CONTENT": ("message_id", "messageId"),
              "REASONING_MESSAGE_CONTENT": ("message_id", "messageId"),
              "TOOL_CALL_ARGS": ("tool_call_id", "toolCallId")}


def _delta_payload(kind: str, event, text: str) -> dict | None:
    """The wire fields of a parsed token event that fold reads (``protocol.conversation``); None unless the
    text spells them as the wire does (the model also reads snake_case, which a fold of the text, as a
    client or ``events.conversation_of`` does, would not)."""
    attribute, key = _DELTA_IDS[kind]
    # The model takes a field by its name or its wire alias only: with neither snake_case name anywhere in
    # the text, the wire's were used (found elsewhere, in a delta or rawEvent, it costs one decode).
    if f'"{attribute}"' in text or '"subagent_run_id"' in text:
        return None
    payload = {"type": kind, key: getattr(event, attribute), "delta": event.delta}
    if event.metadata is not None:
        payload["metadata"] = event.metadata
    if event.subagent_run_id is not None:
        payload["subagentRunId"] = event.subagent_run_id
    return payload


def proposals(lifecycle: RunLifecycle, thread: Thread):
    """What the agent proposed for a toolCallId: this run's TOOL_CALL_* events, else the thread's messages.

    The lookup gives (tool name, args, doubts): the lifecycle's problems with
    the proposal, which the interrupt carries as warnings for its reviewer.
    """

    def lookup(tool_call_id: str):
        found = lifecycle.proposed_args(tool_call_id)
        if found.name is not None:
            return found.name, found.args, found.problems
        for message in thread.messages or []:
            for call in message.get("toolCalls") or []:
                if call.get("id") == tool_call_id:
                    function = call.get("function") or {}
                    try:
                        return function.get("name"), json.loads(function.get("arguments") or "null"), []
                    except ValueError:
                        return function.get("name"), function.get("arguments"), []
        return None, None, []

    return lookup



def _left_out_notice(paths: list[str]) -> str:
    """The run's notice about what its input held that AG-UI does not define (C17: warn); names cut, a few shown."""
    if not paths:
        return ""
    shown = ", ".join(path[:40] for path in paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return f"Left out of the input sent to the agent, as AG-UI does not define it: {shown}."


def _unknown_outcome_notice(kind: str | None) -> str:
    """The run's warning about the outcome removed from its RUN_FINISHED (C3: warn with the removed path)."""
    if kind is None:
        return ""
    return (f"The agent ended the run with an outcome AG-UI 1.0 does not define ({kind[:40]!r}); it was removed "
            "(outcome) and the run read as succeeded.")


def asked_before(run: Run) -> set[str]:
    """The tool calls the thread's interrupts asked reviewers about: their answer is a resume, not a client's."""
    return set(Interrupt.objects.filter(run__thread_id=run.thread_id).exclude(tool_call_id="")
               .values_list("tool_call_id", flat=True))


def left_to_client(lifecycle: RunLifecycle, run_input: dict, terminal: dict,
                   asked: set[str] = frozenset()) -> list[dict] | None:
    """The tool calls a run left for its client to answer, as ``Run.pending_tool_calls`` keeps them (C21, C22).

    Derived from the stream (``RunLifecycle.pending_tool_calls``), not read
    from ``pendingToolCallIds`` alone: calls its input already held are an
    earlier run's; the interrupts' own calls (this run's, and ``asked``, the
    thread's earlier ones, which a resumed run's snapshot repeats) are the
    reviewers' to answer. None for a run that failed, was cancelled or left none.
    """
    outcome = terminal.get("outcome") if terminal.get("type") == "RUN_FINISHED" else None
    outcome = outcome if isinstance(outcome, dict) else {}
    if terminal.get("type") != "RUN_FINISHED" or outcome.get("type") == "cancelled":
        return None
    earlier = {call.get("id") for message in run_input.get("messages") or [] if isinstance(message, dict)
               for call in message.get("toolCalls") or [] if isinstance(call, dict)}
    asked = set(asked) | {item.get("toolCallId") for item in outcome.get("interrupts") or [] if isinstance(item, dict)}
    pending = lifecycle.pending_tool_calls(earlier=earlier, asked=asked)[:MAX_PENDING_TOOL_CALLS]
    return [{"id": i[:MAX_PENDING_TOOL_CALL_CHARS], "name": (name or "")[:MAX_PENDING_TOOL_CALL_CHARS]}
            for i, name in pending] or None


def unrecordable(interrupts: Sequence[WireInterrupt]) -> tuple[str, str] | None:
    """Why an interrupt outcome cannot be recorded, as (code, message), or None.

    ``TOO_MANY_INTERRUPTS``: more than ``MAX_INTERRUPTS``.
    ``DUPLICATE_INTERRUPT_ID``: an id used twice. ``ID_TOO_LONG``: an
    interrupt id or toolCallId longer than its column; a resume must echo the
    id exactly, so it can be neither cut nor stored.
    """
    # Ids only: this runs on the event loop, and checking the interrupts'
    # schemas (outcomes.finish does that, on a worker thread) is work the
    # agent can make long.
    interrupts = list(interrupts)
    if len(interrupts) > MAX_INTERRUPTS:
        return "TOO_MANY_INTERRUPTS", (f"The run ended with {len(interrupts)} interrupts; Countersign takes at most "
                                       f"{MAX_INTERRUPTS} at once, for a team to answer together.")
    if twice := duplicate_ids(interrupts):
        return "DUPLICATE_INTERRUPT_ID", " ".join(problem.message for problem in twice)
    for interrupt in interrupts:
        for field, value in (("interrupt_id", interrupt.id), ("tool_call_id", interrupt.tool_call_id or "")):
            limit = Interrupt._meta.get_field(field).max_length
            if len(value) > limit:
                name = "id" if field == "interrupt_id" else "toolCallId"
                return "ID_TOO_LONG", (f"An interrupt's {name} is {len(value)} characters long; Countersign keeps "
                                       f"ids of at most {limit}, and a resume must echo it exactly.")
    return None


def recover(run: Run, worker: str) -> None:
    """Settle a run whose streaming process died (its claim lapsed, ``worker`` took it over).

    The outbox's contract (README, "The outbox's contract"):
    - its terminal event is recorded: the run ends as that event says, with its
      proposals rebuilt from the recorded events;
    - it was never sent (no ``sent_at``): queued again, same runId and input;
    - it was sent and its answer was lost: queued again if its agent declares it
      dedupes by runId (``capabilities.dedupes_run_id``), else it fails with
      WORKER_LOST, for a person: the agent may have acted on it.
    A gateway run is never queued again (its client was on the lost
    connection, and decides itself), nor a run that has taken its process
    down COUNTERSIGN_RETRY_ATTEMPTS times.
    """
    lifecycle = RunLifecycle(run.thread.thread_id, run.run_id)
    dialect = dialects.for_agent(run.agent.dialect, run.agent.paused_as)
    terminal = None
    customs = []
    broken = answered = False
    for from_agent, payload in run.events.order_by("seq").values_list("from_agent", "payload"):
        if not from_agent:
            if isinstance(payload, dict) and payload.get("name") == relay.Note.SENT_AGAIN:
                # Sent again after a crash: only what the agent answered since counts.
                lifecycle, terminal, customs = RunLifecycle(run.thread.thread_id, run.run_id), None, []
                broken = answered = False
            continue
        answered = True
        if broken or lifecycle.finished:
            continue
        try:
            lifecycle.accept(parse_event(payload))
        except ProtocolError:
            broken = True
            continue
        if dialect.keeps(payload):
            customs.append(payload)
        if lifecycle.finished:
            terminal = payload
    terminal, unknown = strip_unknown_outcome(terminal)
    if terminal is not None:
        ending = Ending.of(dialect, lifecycle, terminal, customs, run.run_id)
        if ending.refused is not None:
            outcomes.fail(run, *ending.refused)
        else:
            outcomes.finish(run, ending.terminal, proposals(lifecycle, Thread.objects.get(pk=run.thread_id)),
                       notice=" ".join(filter(None, [ending.notice, _unknown_outcome_notice(unknown)])),
                       pending=left_to_client(lifecycle, run.input, ending.terminal, asked_before(run)),
                       version=lifecycle.declared_version, standing=automatic.standing)
        return
    who = run.claimed_by or "unknown"
    kind = "resume" if run.resume_key else "run"
    # An answer recorded proves it left, whatever the mark says (a run claimed before the mark existed).
    sent = run.sent_at is not None or answered
    may_resend = run.origin == Run.Origin.HUB and run.losses + 1 < settings.COUNTERSIGN_RETRY_ATTEMPTS
    if may_resend and not sent:
        outbox.requeue_lost(run, worker, f"The process that was to send this {kind} stopped before the request "
                                         "left; it is sent again automatically, with the same run id.")
    elif may_resend and capabilities.dedupes_run_id(run.agent.capabilities):
        outbox.requeue_lost(run, worker, f"The process sending this {kind} stopped before the agent's answer was "
                                         "recorded; it is sent again with the same run id, which the agent "
                                         "declares it acts on only once.")
    elif sent:
        outcomes.fail(run, "WORKER_LOST",
                 f"The process streaming this {kind} ({who}) stopped after the request went to the agent, before "
                 "its answer was recorded. It was not sent again: the agent may have acted on it.")
    elif run.origin == Run.Origin.GATEWAY:
        outcomes.fail(run, "WORKER_LOST",
                 f"The process streaming this {kind} ({who}) stopped before the request left; the client that "
                 "sent it may send it again.")
    else:
        outcomes.fail(run, "WORKER_LOST",
                 f"The process that was to send this {kind} stopped {run.losses + 1} times holding it, before the "
                 "request left; it is not sent again automatically.")


class Ending:
    """How a run whose stream ended cleanly is recorded: its terminal event as its dialect reads it.

    ``refused`` is (code, message) when that ending cannot be recorded
    (``unrecordable``), ``notice`` what the dialect noticed about the run.
    """

    __slots__ = ("terminal", "refused", "notice")

    def __init__(self, terminal: dict, refused: tuple[str, str] | None, notice: str) -> None:
        self.terminal, self.refused, self.notice = terminal, refused, notice

    @classmethod
    def of(cls, dialect: dialects.Dialect, lifecycle: RunLifecycle, terminal: dict, customs: list[dict],
           run_id: str) -> Ending:
        read = dialect.terminal(terminal, customs, run_id)
        if read is terminal:
            interrupts = lifecycle.interrupts  # parsed already
        else:
            outcome = read.get("outcome") if read.get("type") == "RUN_FINISHED" else None
            raw = outcome.get("interrupts") if isinstance(outcome, dict) and outcome.get("type") == "interrupt" else []
            interrupts = [WireInterrupt.model_validate(item) for item in raw or []]
        return cls(read, unrecordable(interrupts), dialect.notice(terminal, customs))


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen = set()
        for key, _value in pairs:
            if key in seen:
                raise _DuplicateKey(key[:100])
            seen.add(key)
    return found


def _append(run: Run, batch: list[events.Received], worker: str, after_seq: int,
            retrying: bool = False) -> list[int] | None:
    """``events.append_many``; after a lost connection, first whether the batch committed before it broke."""
    if retrying:
        seqs = list(Event.objects.filter(run_id=run.pk, from_agent=True, seq__gt=after_seq)
                    .order_by("seq").values_list("seq", flat=True))
        if len(seqs) == len(batch):
            # It did. The thread's conversation is read again for the next batch: the
            # one carried (``events._Carry``) predates this batch, whose fold may not be written.
            run.__dict__.pop("_conversation_carry", None)
            run._fold_lags = True
            return seqs
        if seqs:
            raise RuntimeError(f"run {run.run_id}: {len(seqs)} of a batch of {len(batch)} events recorded")
    return events.append_many(run, batch, worker)


class RunStreamer:
    """Streams one claimed run; ``listener`` (an asyncio.Queue) gets each recorded event."""

    def __init__(self, run: Run, worker: str, listener: asyncio.Queue | None = None,
                 stop: asyncio.Event | None = None) -> None:
        self.run = run
        self.worker = worker
        self.listener = listener
        # Set by this process's supervisor when an operator stops the run here.
        self.stop = stop if stop is not None else asyncio.Event()
        # True once the run is known to be ended by someone else: a cancellation
        # then means "stop reading", not "the process is shutting down".
        self.settled_elsewhere = False
        # The last sequence number the listener was given.
        self.told = 0
        self.lifecycle = RunLifecycle(run.thread.thread_id, run.run_id)
        self.terminal: dict | None = None
        # The agent's framework, and the CUSTOM events it says matter for how the run ends.
        self.dialect = dialects.for_agent(run.agent.dialect, run.agent.paused_as)
        self.customs: list[dict] = []
        # Events checked but not yet handed to the writer. The reader keeps
        # reading while the writer records what came before, and the writer
        # takes everything pending at once: a fast agent's events share
        # transactions, and a slow one's are not delayed.
        self.pending: list[events.Received] = []
        self.pending_bytes = 0
        self.more = asyncio.Event()  # set when events are pending, or reading is over
        self.room = asyncio.Event()  # cleared while MAX_PENDING events wait
        self.room.set()
        self.reading_done = False
        self.reading: asyncio.Task | None = None
        self.writer: asyncio.Task | None = None
        # What the writer failed with while the reader still read: the reader is cancelled and raises it.
        self.write_failed: BaseException | None = None
        # The batch being written on a database thread now: a cancelled writer
        # cannot stop that thread, so whatever follows waits for it.
        self.in_flight: asyncio.Future | None = None
        self.in_flight_batch: list[events.Received] = []
        # What the input as stored held that AG-UI does not define, left out when sent (C17).
        self.left_out: list[str] = []
        self.unknown_outcome: str | None = None
        # What this run's stream has brought so far, against COUNTERSIGN_MAX_RUN_EVENTS / _BYTES.
        self.events_read = 0
        self.bytes_read = 0
        # Read once per run, not once per event: a setting's lookup cost a relayed token about 7%
        # of its time. A stream keeps the limits it started with.
        self.max_events = settings.COUNTERSIGN_MAX_RUN_EVENTS
        self.max_bytes = settings.COUNTERSIGN_MAX_RUN_BYTES
        self.max_event_bytes = settings.COUNTERSIGN_MAX_EVENT_BYTES
        # The last sequence number of the thread before this stream's latest recorded batch:
        # after a lost connection, the agent's events of this run past it are the batch, if it committed.
        self.recorded_up_to = run.thread.last_seq
        self.events_recorded = 0

    async def _persist(self, function: Callable, *args, again: Callable | None = None, **kwargs):
        """``function(*args, **kwargs)`` on a database thread, tried again on a fresh connection if it was lost.

        Bounded (WRITE_RETRIES, WRITE_RETRY_SECONDS); past the bound ``WritesFailed``.
        ``again``, when given, is called instead on the retries: a commit whose
        answer was lost with the connection may have gone through.
        """
        loop = asyncio.get_running_loop()
        started, delay = loop.time(), WRITE_RETRY_FIRST
        for attempt in range(1, WRITE_RETRIES + 1):
            try:
                return await database(function)(*args, **kwargs)
            except Exception as problem:
                if not connection_lost(problem):
                    raise
                if attempt == WRITE_RETRIES or loop.time() - started + delay > WRITE_RETRY_SECONDS:
                    raise WritesFailed(f"{type(problem).__name__}: {problem}") from problem
                logger.warning("run %s: database write failed (%s), trying again on a fresh connection",
                               self.run.run_id, problem)
            await database(_discard_dead_connections)()
            await asyncio.sleep(delay)
            delay = min(delay * 2, WRITE_RETRY_MAX_DELAY)
            function = again or function
        raise AssertionError("unreachable")

    async def _write(self) -> None:
        """The writer: record pending events in order, a transaction per batch, until reading is over."""
        while True:
            if not self.pending:
                if self.reading_done:
                    return
                self.more.clear()
                await self.more.wait()
                continue
            batch, self.pending, self.pending_bytes = self.pending, [], 0
            self.room.set()
            self.in_flight_batch = batch
            self.in_flight = asyncio.ensure_future(
                self._persist(_append, self.run, batch, self.worker, self.recorded_up_to,
                              again=functools.partial(_append, retrying=True)))
            seqs = await asyncio.shield(self.in_flight)
            if seqs is None:
                self.settled_elsewhere = True
                raise Stopped()
            if seqs:
                self.recorded_up_to = seqs[-1]
            self.events_recorded += len(seqs)
            if batch[-1].type not in ("RUN_FINISHED", "RUN_ERROR"):  # the terminal event is the last one
                crashpoints.reached("events", self.run, self.events_recorded)
            self._tell_batch(seqs, batch)

    def _tell_batch(self, seqs: list[int], batch: list[events.Received]) -> None:
        if seqs and seqs[-1] <= self.told:
            return  # told already
        for seq, event in zip(seqs, batch, strict=False):
            self._tell(seq, event.payload)

    def _writer_ended(self, writer: asyncio.Task) -> None:
        if writer.cancelled() or writer.exception() is None:
            return
        if not self.reading_done:  # else the reader waits for the writer (and gets its error there), or has left
            self.write_failed = writer.exception()
            self.reading.cancel()

    async def _drain(self) -> None:
        """Wait until everything read is recorded (the writer's error, if it had one, is raised here)."""
        self.reading_done = True
        self.more.set()
        await self.writer

    async def _writes_settled(self) -> None:
        """Wait for a write a cancelled writer left on its thread, and tell what it recorded."""
        if self.in_flight is None:
            return
        try:
            seqs = await asyncio.shield(self.in_flight)
        except Exception:  # the writer's failure is reported where the writer ran
            return
        if seqs:
            self._tell_batch(seqs, self.in_flight_batch)

    def _tell(self, seq: int, payload: dict) -> None:
        self.told = max(self.told, seq)
        if self.listener is not None:
            self.listener.put_nowait((seq, payload))

    async def _tell_settled(self) -> None:
        """Give the listener how the run was ended elsewhere (the operator's RUN_ERROR), before its end."""
        await self._writes_settled()
        if self.listener is None:
            return
        rows = await database(list)(
            Event.objects.filter(run_id=self.run.pk, seq__gt=self.told).order_by("seq").values_list("seq", "payload"))
        for seq, payload in rows:
            self._tell(seq, payload)

    async def _fail(self, code: str, message: str, raw=None) -> None:
        await self._writes_settled()
        event = await self._persist(outcomes.fail, self.run, code, message, raw)
        if event is not None:
            self._tell(event.seq, event.payload)
        else:  # ended elsewhere first (an operator, another process): theirs is the ending
            self.settled_elsewhere = True

    def _take(self, frame) -> None:
        """Check one frame and queue its event for the writer; a Fault if it is wrong."""
        self.events_read += 1
        if self.events_read > self.max_events:
            raise Fault("TOO_MANY_EVENTS", f"The agent sent more than {self.max_events} events in "
                                           "one run (COUNTERSIGN_MAX_RUN_EVENTS); the rest were not read.")
        try:
            event = parse_frame(frame, max_bytes=self.max_event_bytes)
        except MalformedMessage as problem:
            raise Fault("MALFORMED_EVENT", f"The agent sent an invalid event: {problem.message}", frame.data) from None
        kind = event.type.value
        payload = None
        # Valid AG-UI Countersign cannot hold (a NUL, a lone surrogate) is refused like any invalid
        # event; JSON text can only spell either as an escape, so most events skip the walk.
        if storable.needs_check(frame.data):
            # A key given twice hides its first value from the decoded view, and
            # the text itself is what is stored: here that value could be what
            # the check refuses, so duplicates are refused outright.
            try:
                payload = json.loads(frame.data, object_pairs_hook=_unique_keys)
            except _DuplicateKey as twice:
                raise Fault("MALFORMED_EVENT", f"The agent sent an invalid event: the key {twice.key!r} appears "
                                               "twice in one object.", frame.data) from None
            if (refused := storable.problem(payload, "The event")) is not None:
                raise Fault("MALFORMED_EVENT", f"The agent sent an invalid event: {refused.message}", frame.data)
        try:
            self.lifecycle.accept(event)
        except StreamFault as fault:
            # A RUN_ERROR opening the stream is the agent's own ending, taken by the
            # lifecycle (C1, C8); one refused here is out of place, so the fault is ours.
            raise Fault(fault.code, fault.message, frame.data) from None
        # The text is what is stored; it is decoded again only where someone reads it.
        if payload is None and self.listener is None and kind in _DELTA_IDS:
            # A streamed token, the most frequent event: what the conversation needs of it is
            # read off the event already parsed, rather than decoding its text a second time.
            payload = _delta_payload(kind, event, frame.data)
        if payload is None and (self.listener is not None or kind in events.FOLDED or self.lifecycle.finished
                                or kind == "CUSTOM"):
            payload = json.loads(frame.data)
        if kind == "CUSTOM" and self.dialect.keeps(payload):
            self.customs.append(payload)
        self.pending.append(events.Received(kind, frame.data, payload))
        self.pending_bytes += len(frame.data)
        if self.lifecycle.finished:
            # As received (interrupts keep every field the agent sent), less an outcome 1.0 does not define (C3).
            self.terminal, self.unknown_outcome = strip_unknown_outcome(payload)

    async def _read(self) -> None:
        agent = self.run.agent
        headers = {"Accept": "text/event-stream"}
        if agent.auth_header and agent.auth_value:
            headers[agent.auth_header] = agent.auth_value
        timeout = httpx.Timeout(
            connect=settings.COUNTERSIGN_CONNECT_TIMEOUT,
            read=settings.COUNTERSIGN_IDLE_TIMEOUT,
            write=settings.COUNTERSIGN_CONNECT_TIMEOUT,
            pool=settings.COUNTERSIGN_CONNECT_TIMEOUT,
        )
        crashpoints.reached("claimed", self.run)
        # Serialized once: the signature covers these exact bytes, and an agent
        # verifies against the raw body it reads, before parsing it.
        # Only what AG-UI defines (C17), with Countersign's protocolVersion (C64, ``versioning``).
        sent, self.left_out = known_input(self.dialect.outgoing(self.run.input))
        body = json.dumps(versioning.declare(sent), separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode()
        headers["Content-Type"] = "application/json"
        headers[signing.SIGNATURE_HEADER] = signing.sign(agent.signing_secret, body, int(time.time()))
        # The delivery record, committed before anything leaves: after a crash from
        # here on, the agent may have the request (``recover``).
        if not await self._persist(outbox.mark_sent, self.run, self.worker, body, headers[signing.SIGNATURE_HEADER],
                                   again=outbox.mark_sent_again):
            self.settled_elsewhere = True
            raise Stopped()
        crashpoints.reached("sent", self.run)
        # Connects only to addresses COUNTERSIGN_AGENT_NETWORKS allows, checked at connect time,
        # and follows no redirect: the agent cannot send Countersign anywhere else.
        async with egress.agent_client(timeout) as client:
            async with client.stream("POST", agent.endpoint, content=body, headers=headers) as response:
                crashpoints.reached("answered", self.run)
                content_type = response.headers.get("content-type", "")
                if response.status_code >= 400:
                    body = b""
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_ERROR_BODY:
                            break
                    detail = _error_body_message(body, content_type) or response.reason_phrase
                    raise Fault("HTTP_ERROR", f"The agent answered HTTP {response.status_code}: {detail}", body,
                                unreached=response.status_code in RETRY_STATUSES)
                if not content_type.startswith("text/event-stream"):
                    raise Fault(
                        "BAD_CONTENT_TYPE",
                        f"The agent answered {content_type or 'no content type'} (HTTP {response.status_code}), "
                        "not text/event-stream.",
                    )
                await self._receive(response)
        crashpoints.reached("recorded", self.run)
        try:
            self.lifecycle.end_of_stream()
        except StreamFault as fault:
            raise Fault(fault.code, fault.message) from None
        ending = Ending.of(self.dialect, self.lifecycle, self.terminal, self.customs, self.run.run_id)
        if ending.refused is not None:
            raise Fault(*ending.refused)
        # Only now, with nothing after the terminal event, does the run end as it said.
        # A query only for a run that left some call unanswered: most leave none.
        asked = await database(asked_before)(self.run) if self.lifecycle.pending_tool_calls() else set()
        notice = " ".join(filter(None, [ending.notice, _left_out_notice(self.left_out),
                                        _unknown_outcome_notice(self.unknown_outcome)]))
        await self._persist(outcomes.finish, self.run, ending.terminal, proposals(self.lifecycle, self.run.thread),
                            notice=notice,
                            pending=left_to_client(self.lifecycle, self.run.input, ending.terminal, asked),
                            version=self.lifecycle.declared_version, standing=automatic.standing)

    async def _receive(self, response: httpx.Response) -> None:
        """Read, check and hand over every event while the writer records them; return once all are recorded."""
        reader = SSEReader(max_frame_bytes=self.max_event_bytes)
        self.reading = asyncio.current_task()
        self.writer = asyncio.ensure_future(self._write())
        self.writer.add_done_callback(self._writer_ended)
        try:
            try:
                async for chunk in _chunks(response, self.lifecycle):
                    self.bytes_read += len(chunk)
                    if self.bytes_read > self.max_bytes:
                        raise Fault("STREAM_TOO_LARGE",
                                    f"The agent's stream for this run passed {self.max_bytes} "
                                    "bytes (COUNTERSIGN_MAX_RUN_BYTES); the rest was not read.")
                    for frame in reader.feed(chunk):
                        self._take(frame)
                    if self.pending:
                        self.more.set()
                        if len(self.pending) >= MAX_PENDING or self.pending_bytes >= MAX_PENDING_BYTES:
                            self.room.clear()
                            await self.room.wait()
                        else:
                            # A read that finds bytes buffered does not yield to the
                            # loop: without this, an agent faster than the hub kept
                            # the writer (and the sockets it pokes) waiting until
                            # MAX_PENDING events had piled up.
                            await asyncio.sleep(0)
                for frame in reader.close():
                    self._take(frame)
            except asyncio.CancelledError:
                # Cancelled by the writer's failure: that failure is this reader's.
                # Any other cancellation (a shutdown, an operator, the run's clock) goes on.
                if self.write_failed is None or asyncio.current_task().uncancel() > 0:
                    raise
                raise self.write_failed from None
            except Exception:
                # What came before a fault is recorded before the fault is
                # (not on cancellation: then the run is no longer ours).
                await self._drain()
                raise
            await self._drain()
        finally:
            # Left, however: a writer that failed just now (its done callback still to
            # run) must not cancel what this task does next, such as _tell_settled.
            self.reading_done = True
            if not self.writer.done():
                self.writer.cancel()

    async def _heartbeat(self, stream: asyncio.Task) -> None:
        interval = max(settings.COUNTERSIGN_LEASE_SECONDS / 3, 0.1)
        while True:
            try:
                await asyncio.wait_for(self.stop.wait(), interval)
            except TimeoutError:
                pass
            else:
                # An operator in this process ended the run: it is recorded already.
                logger.warning("run %s: stopped by an operator, closing its stream", self.run.run_id)
                self.settled_elsewhere = True
                stream.cancel()
                return
            try:
                kept = await database(outbox.renew)(self.run.pk, self.worker)
            except Exception:  # a missed beat is retried; the lease has room for two more
                logger.exception("could not renew the claim on run %s", self.run.run_id)
                continue
            if not kept:
                # Another process settled this run: stop recording into it.
                logger.warning("run %s: claim lost, stopping its stream", self.run.run_id)
                self.settled_elsewhere = True
                stream.cancel()
                return

    async def _unreached(self, fault: Fault) -> None:
        """The agent did not take the run: queue it again with backoff, or fail once tries run out.

        Runs a client streams through the gateway fail at once instead: that
        client is waiting on this very connection and decides itself.
        """
        if self.run.origin == Run.Origin.HUB:
            tries = self.run.attempts + 1
            if tries >= settings.COUNTERSIGN_RETRY_ATTEMPTS:
                await self._fail("AGENT_UNREACHABLE", f"Gave up after {tries} attempts; the last one: {fault.message}",
                                 fault.raw)
                return
            attempt = await database(outbox.defer)(self.run, self.worker, fault.code, fault.message)
            if attempt is not None:
                logger.warning("run %s: agent unreachable (attempt %d): %s", self.run.run_id, attempt, fault.message)
            return  # None: another process settled the run meanwhile
        await self._fail(fault.code, fault.message, fault.raw)

    async def _hub_error(self, problem: Exception) -> None:
        logger.error("streaming run %s failed", self.run.run_id, exc_info=problem)
        await self._fail("HUB_ERROR", f"Countersign failed while streaming: {type(problem).__name__}: {problem}")

    async def stream(self) -> None:
        """Stream the run to its end; every outcome, fault included, ends up recorded.

        Ends with RUN_TOO_LONG after COUNTERSIGN_MAX_RUN_SECONDS. A run ended
        by someone else meanwhile stops at once, and the listener gets that
        ending (recorded by them) before the end of its stream.
        """
        heartbeat = asyncio.ensure_future(self._heartbeat(asyncio.current_task()))
        try:
            try:
                try:
                    async with asyncio.timeout(settings.COUNTERSIGN_MAX_RUN_SECONDS) as clock:
                        await self._read()
                except Stopped:
                    logger.warning("run %s: ended elsewhere, its stream stopped", self.run.run_id)
                except WritesFailed:
                    raise  # not the run's fault: recovery settles it (below)
                except TimeoutError as problem:
                    if clock.expired():
                        await self._fail("RUN_TOO_LONG", f"The run went on for more than "
                                                         f"{settings.COUNTERSIGN_MAX_RUN_SECONDS:g} s "
                                                         "(COUNTERSIGN_MAX_RUN_SECONDS); it was ended.")
                    else:  # not our deadline: some other timer inside, a bug of ours
                        await self._hub_error(problem)
                except Fault as fault:
                    if fault.unreached:
                        await self._unreached(fault)
                    else:
                        await self._fail(fault.code, fault.message, fault.raw)
                except MalformedStream as problem:
                    if problem.code == "FRAME_TOO_LARGE":
                        await self._fail("EVENT_TOO_LARGE",
                                         f"The agent sent an event too large to take: {problem.message}")
                    else:
                        await self._fail("MALFORMED_STREAM",
                                         f"The agent's stream is not valid SSE: {problem.message}")
                except httpx.ConnectTimeout:
                    await self._unreached(Fault(
                        "TIMEOUT", f"The agent at {self.run.agent.endpoint} did not accept a connection within "
                                   f"{settings.COUNTERSIGN_CONNECT_TIMEOUT:g} s."))
                except httpx.ReadTimeout:
                    await self._fail("TIMEOUT", f"The agent sent nothing for "
                                                f"{settings.COUNTERSIGN_IDLE_TIMEOUT:g} s; the run was abandoned.")
                except httpx.ConnectError as problem:
                    await self._unreached(Fault("CONNECT_ERROR", f"Could not connect to the agent at "
                                                                 f"{self.run.agent.endpoint}: {problem}"))
                except egress.AgentAddressRefused as refused:
                    # A policy refusal, not an outage: trying again would be refused again.
                    await self._fail(refused.code, refused.message)
                except httpx.HTTPError as problem:
                    await self._fail("TRANSPORT_ERROR",
                                     f"The connection to the agent broke: {type(problem).__name__}: {problem}")
                except Exception as problem:  # a bug of ours must not leave the run streaming
                    await self._hub_error(problem)
            except asyncio.CancelledError:
                if not self.settled_elsewhere:
                    # The process is shutting down: leave the claim to lapse, so the
                    # run is reported as lost rather than silently abandoned.
                    raise
                # Cancelled by our own heartbeat because the run was ended elsewhere:
                # not a shutdown, so this task goes on to tell its listener.
                asyncio.current_task().uncancel()
            except WritesFailed as problem:
                # The database stayed out of reach: the heartbeat stops with this task, so
                # the claim lapses and recovery settles the run from what was recorded.
                logger.error("run %s: could not record its stream (%s); left for recovery", self.run.run_id, problem)
            finally:
                heartbeat.cancel()
            if self.settled_elsewhere:
                await self._tell_settled()
        finally:
            if self.listener is not None:
                self.listener.put_nowait(None)


async def stream_run(run: Run | int, worker: str, listener: asyncio.Queue | None = None,
                     stop: asyncio.Event | None = None) -> None:
    """Stream ``run``, which ``worker`` has claimed, to its end (or until ``stop`` is set).

    ``run``: its pk, or the run read since the claim with its thread and agent.
    """
    try:
        if isinstance(run, int):
            run = await database(Run.objects.select_related("thread", "agent").get)(pk=run)
    except BaseException:
        if listener is not None:
            listener.put_nowait(None)  # a waiting client is told the stream is over
        raise
    await RunStreamer(run, worker, listener, stop).stream()
