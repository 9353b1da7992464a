"""One run's event stream as a state machine: is it well-formed, and what did it propose?

The hub feeds ``RunLifecycle.accept`` every parsed event of one run, in
order, and calls ``end_of_stream`` when the connection closes. A stream that
breaks the run lifecycle of the AG-UI "Events" page (RUN_STARTED first, one
RUN_FINISHED or RUN_ERROR last, nothing after it, tool-call events in
start/args/end order) is refused with a ``StreamFault`` whose ``code`` is
stable and whose ``message`` names what arrived and what was expected.

Alongside, the lifecycle reassembles what the audit trail needs: each tool
call's name and argument text (the spec's "ToolCallArgs from the interrupted
run" is the agent's proposal), and how the run ended.

Readings of the spec that matter in practice:

* TOOL_CALL_RESULT is never refused, whatever its ``toolCallId``: a resumed
  run reports the result of a call its *earlier* run proposed and, by the
  spec, does not start that call again.
* MESSAGES_SNAPSHOT assistant messages teach tool calls too, because some
  integrations (LangGraph among them) may report a call only there. When the
  stream also carried the call, the streamed deltas win; a snapshot that
  disagrees with them is reported as a problem, not a fault, because the
  stream is still well-formed and the disagreement belongs in the audit.
* A call opened by TOOL_CALL_START that never got its TOOL_CALL_END is not a
  fault either (the run did end properly); ``proposed_args`` says the
  arguments may be incomplete instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ag_ui.core import AssistantMessage, BaseEvent, EventType, Interrupt

from .errors import MalformedMessage, ProtocolError

# wire's private helpers, so "valid JSON" and the names of JSON kinds mean the
# same in a tool call's arguments as in every event of the package.
from .wire import DEFAULT_MAX_BYTES, _decode, _kind

__all__ = [
    "DEFAULT_MAX_TOOL_CALL_BYTES",
    "OutcomeType",
    "ProposedArgs",
    "ProposedCall",
    "RunLifecycle",
    "StreamFault",
]

#: Default cap on the text a run's tool calls may make the lifecycle hold:
#: the same 8 MiB wire.py allows a single event, so a proposal that fits in
#: one TOOL_CALL_ARGS still fits when split into many.
DEFAULT_MAX_TOOL_CALL_BYTES = DEFAULT_MAX_BYTES

OutcomeType = Literal["success", "interrupt", "cancelled", "error"]

_TERMINAL = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})


class StreamFault(ProtocolError):
    """An event arrived where the run lifecycle does not allow it, or the stream ended early.

    Codes: ``NOT_STARTED``, ``RUN_MISMATCH``, ``DUPLICATE_START``,
    ``AFTER_END``, ``TOOL_CALL_ORDER``, ``TOO_LARGE``, ``INCOMPLETE_STREAM``.
    ``details`` always carries ``event_type`` when an event was refused.
    """


@dataclass(frozen=True)
class ProposedCall:
    """A tool call as this run's stream described it.

    ``args_text`` is the argument text exactly as sent (every delta
    concatenated, or the snapshot's ``function.arguments``), unparsed, because
    a model can emit arguments that are not JSON and the audit must keep them.
    ``source`` is ``"stream"`` for TOOL_CALL_START/ARGS or TOOL_CALL_CHUNK, and
    ``"snapshot"`` for a call only a MESSAGES_SNAPSHOT mentioned (which, on a
    resumed run, may be a call of an earlier run). ``ended`` says the
    arguments are known to be whole: TOOL_CALL_END arrived, a chunked call was
    closed by the next call or by the run's end, or the call came whole in a
    snapshot.
    """

    name: str
    args_text: str
    source: Literal["stream", "snapshot"] = "stream"
    ended: bool = True


class ProposedArgs(NamedTuple):
    """What ``RunLifecycle.proposed_args`` found for one tool call id.

    ``args`` is the parsed JSON object (or array) when the text parses to
    one; otherwise it is the raw argument text (``str``) so nothing the agent
    sent is lost, or ``None`` when the call is unknown. ``problems`` lists, in
    words a person can act on, everything that makes the proposal doubtful;
    empty means the proposal is clean. A named tuple, so callers may unpack
    ``name, args, problems = lifecycle.proposed_args(tc)``.
    """

    name: str | None
    args: dict[str, Any] | list[Any] | str | None
    problems: list[str]


class _Call:
    """Mutable reassembly state of one tool call (``ProposedCall`` is its frozen view)."""

    __slots__ = ("name", "parts", "source", "open", "chunked", "snapshot")

    def __init__(self, name: str, source: Literal["stream", "snapshot"], *, chunked: bool = False) -> None:
        self.name = name
        # Deltas are kept as a list and joined when read, so a proposal split
        # into thousands of deltas costs linear, not quadratic, time.
        self.parts: list[str] = []
        self.source = source
        self.open = source == "stream"
        self.chunked = chunked
        # What a MESSAGES_SNAPSHOT said about a call the stream also carried:
        # kept only to compare, since the streamed version is the proposal.
        self.snapshot: tuple[str, str] | None = None

    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]  # join once, not on every read
        return self.parts[0] if self.parts else ""


class RunLifecycle:
    """The lifecycle of ONE run's event stream, fed event by event.

    ``thread_id`` and ``run_id`` are the ids the hub sent in its
    ``RunAgentInput``; the agent's RUN_STARTED and RUN_FINISHED must echo
    them. ``max_tool_call_bytes`` caps the UTF-8 size of everything kept
    about tool calls (ids, names, argument text, snapshot copies), so a
    stream cannot grow the hub's memory without bound.

    A refused event leaves the lifecycle exactly as it was, so the caller can
    record the fault with the state that led to it and abandon the stream.
    """

    def __init__(
        self, thread_id: str, run_id: str, *, max_tool_call_bytes: int = DEFAULT_MAX_TOOL_CALL_BYTES
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.max_tool_call_bytes = max_tool_call_bytes
        self._started = False
        self._terminal: BaseEvent | None = None
        self._count = 0
        self._last_type: str | None = None
        self._calls: dict[str, _Call] = {}
        self._chunk_call: str | None = None  # the call a TOOL_CALL_CHUNK without id continues
        self._held = 0  # bytes charged against max_tool_call_bytes

    # --- what the run looks like so far ---------------------------------------------

    @property
    def started(self) -> bool:
        """Whether RUN_STARTED has been accepted."""
        return self._started

    @property
    def terminal(self) -> BaseEvent | None:
        """The RUN_FINISHED or RUN_ERROR event that ended the run, or ``None`` while it runs."""
        return self._terminal

    @property
    def finished(self) -> bool:
        """Whether the run has ended (RUN_FINISHED or RUN_ERROR accepted)."""
        return self._terminal is not None

    @property
    def outcome_type(self) -> OutcomeType | None:
        """How the run ended: ``"success"``, ``"interrupt"``, ``"cancelled"``, ``"error"``, or ``None`` yet.

        A RUN_FINISHED without ``outcome`` is a legacy producer's normal
        completion, so it reads as ``"success"`` (spec, "Run outcomes").
        RUN_ERROR reads as ``"error"``, although the spec's outcome union has
        no such value: the audit needs one field for every way a run ends.
        """
        terminal = self._terminal
        if terminal is None:
            return None
        if terminal.type == EventType.RUN_ERROR:
            return "error"
        outcome = getattr(terminal, "outcome", None)
        return "success" if outcome is None else outcome.type

    @property
    def interrupts(self) -> tuple[Interrupt, ...]:
        """The interrupts of an interrupt outcome; empty for any other end, or before it."""
        if self.outcome_type != "interrupt":
            return ()
        return tuple(self._terminal.outcome.interrupts)  # type: ignore[union-attr]

    @property
    def event_count(self) -> int:
        """How many events have been accepted."""
        return self._count

    @property
    def tool_calls(self) -> dict[str, ProposedCall]:
        """Every tool call this stream described, by id, in the order first seen.

        A fresh dict of frozen views: changing it changes nothing here.
        """
        return {
            tool_call_id: ProposedCall(
                name=call.name,
                args_text=call.text(),
                source=call.source,
                ended=not call.open,
            )
            for tool_call_id, call in self._calls.items()
        }

    def proposed_args(self, tool_call_id: str) -> ProposedArgs:
        """The tool name and parsed arguments of one call, with every problem found.

        Never raises for what the agent sent: unparseable or non-object
        arguments, a missing TOOL_CALL_END and a snapshot that disagrees with
        the stream are all reported in ``problems``, because the hub must
        still show the reviewer what was proposed.
        """
        call = self._calls.get(tool_call_id)
        if call is None:
            # Naming the calls the stream did mention turns a typo'd or
            # stale id into an obvious one.
            known = f"the stream mentions {', '.join(self._calls)}" if self._calls else "the stream mentions no tool call"
            return ProposedArgs(None, None, [f"tool call {tool_call_id} was not proposed in this run ({known})."])
        problems: list[str] = []
        text = call.text()
        if call.source == "snapshot":
            origin = "MESSAGES_SNAPSHOT argument text"
        else:
            origin = "TOOL_CALL_CHUNK text" if call.chunked else "TOOL_CALL_ARGS text"
        args: dict[str, Any] | list[Any] | str = text
        if text == "":
            problems.append(f"The {origin} of {tool_call_id} is empty; tool arguments are a JSON object.")
        else:
            try:
                # wire's decoder refuses what json.loads would let through but
                # no store or browser can hold: NaN, Infinity, absurd nesting.
                # The text already fits the cap (it was charged), so the size
                # check in it never fires.
                value = _decode(text, self.max_tool_call_bytes, f"The {origin} of {tool_call_id}")
            except MalformedMessage as exc:
                problems.append(exc.message)
            else:
                if isinstance(value, dict):
                    args = value
                elif isinstance(value, list):
                    args = value
                    problems.append(
                        f"The {origin} of {tool_call_id} is a JSON array, not an object; "
                        "tool arguments are a JSON object."
                    )
                else:
                    # A scalar is returned as the raw text: ``str`` always means
                    # "not a parsed container", never a parsed JSON string.
                    problems.append(
                        f"The {origin} of {tool_call_id} is {_kind(value, article=True)}, not an object; "
                        "tool arguments are a JSON object."
                    )
        if call.open and not call.chunked:
            problems.append(
                f"No TOOL_CALL_END has arrived for {tool_call_id}; its arguments may be incomplete."
            )
        if call.snapshot is not None:
            snap_name, snap_text = call.snapshot
            if snap_name != call.name:
                problems.append(
                    f"MESSAGES_SNAPSHOT names the tool of {tool_call_id} {snap_name!r}, but the stream "
                    f"named it {call.name!r}; the streamed name is the proposal."
                )
            if not _same_json(snap_text, text):
                problems.append(
                    f"MESSAGES_SNAPSHOT shows different arguments for {tool_call_id} than the stream "
                    "sent; the streamed arguments are the proposal."
                )
        return ProposedArgs(call.name, args, problems)

    # --- feeding --------------------------------------------------------------------

    def accept(self, event: BaseEvent) -> None:
        """Take the next event of the stream, or raise ``StreamFault`` if it is out of place.

        Faults: ``NOT_STARTED`` (anything before RUN_STARTED), ``AFTER_END``
        (anything after RUN_FINISHED/RUN_ERROR), ``DUPLICATE_START``,
        ``RUN_MISMATCH`` (RUN_STARTED/RUN_FINISHED naming another thread or
        run), ``TOOL_CALL_ORDER`` (tool-call events out of start/args/end
        order) and ``TOO_LARGE`` (tool calls over ``max_tool_call_bytes``).
        """
        kind = event.type
        name = _type_name(event)
        # Order of the checks: a stream that never started or already ended is
        # wrong whatever the event is, so those come before per-type rules.
        if not self._started and kind != EventType.RUN_STARTED:
            raise self._not_started(event, name)
        if self._terminal is not None:
            ended_by = _type_name(self._terminal)
            raise StreamFault(
                "AFTER_END",
                f"The agent sent {name} after {ended_by}; nothing may follow the event that ends a run.",
                event_type=name,
                terminal_type=ended_by,
            )
        if kind == EventType.RUN_STARTED:
            if self._started:
                raise StreamFault(
                    "DUPLICATE_START",
                    f"The agent sent a second RUN_STARTED (thread {event.thread_id}, run {event.run_id}); "
                    "a run starts once.",
                    event_type=name,
                    thread_id=event.thread_id,
                    run_id=event.run_id,
                )
            self._check_ids(event, name)
            self._started = True
        elif kind in _TERMINAL:
            if kind == EventType.RUN_FINISHED:
                self._check_ids(event, name)
            self._terminal = event
            # The spec closes chunked calls automatically when the stream completes.
            self._close_chunked()
        elif kind == EventType.TOOL_CALL_START:
            self._start_call(event.tool_call_id, event.tool_call_name, name)
        elif kind == EventType.TOOL_CALL_ARGS:
            self._append(self._open_call(event.tool_call_id, name), event.tool_call_id, event.delta, name)
        elif kind == EventType.TOOL_CALL_END:
            self._open_call(event.tool_call_id, name).open = False
            if self._chunk_call == event.tool_call_id:
                self._chunk_call = None
        elif kind == EventType.TOOL_CALL_CHUNK:
            self._chunk(event, name)
        elif kind == EventType.MESSAGES_SNAPSHOT:
            self._learn_from_snapshot(event.messages, name)
        # Every other event (text, state, steps, TOOL_CALL_RESULT...) is legal
        # anywhere inside the run; the lifecycle has nothing to check there.
        self._count += 1
        self._last_type = name

    def end_of_stream(self) -> None:
        """Say the stream closed; raise ``StreamFault`` unless the run had ended properly.

        ``NOT_STARTED`` when nothing at all arrived, ``INCOMPLETE_STREAM``
        when the run started but neither RUN_FINISHED nor RUN_ERROR came (the
        agent crashed or the connection dropped mid-run).
        """
        if self._terminal is not None:
            return
        if not self._started:
            raise StreamFault(
                "NOT_STARTED",
                "The agent answered with an empty stream: no RUN_STARTED and no other event.",
                event_count=0,
            )
        count = self._count
        raise StreamFault(
            "INCOMPLETE_STREAM",
            f"The stream ended after {count} event{'s' if count != 1 else ''} without RUN_FINISHED or "
            f"RUN_ERROR; the last event was {self._last_type}.",
            event_count=count,
            last_event_type=self._last_type,
        )

    # --- lifecycle rules ------------------------------------------------------------

    def _not_started(self, event: BaseEvent, name: str) -> StreamFault:
        if event.type == EventType.RUN_ERROR:
            # The agent's own explanation is the most useful thing in this
            # stream; it goes into the fault so it is recorded, not dropped.
            said = f"[{event.code}] {event.message}" if event.code else event.message
            return StreamFault(
                "NOT_STARTED",
                f"The agent sent RUN_ERROR before RUN_STARTED: {said}",
                event_type=name,
                agent_code=event.code,
                agent_message=event.message,
            )
        return StreamFault(
            "NOT_STARTED",
            f"The agent sent {name} before RUN_STARTED; a run's stream must open with RUN_STARTED.",
            event_type=name,
        )

    def _check_ids(self, event: Any, name: str) -> None:
        wrong = []
        if event.thread_id != self.thread_id:
            wrong.append(f"threadId {event.thread_id!r} instead of {self.thread_id!r}")
        if event.run_id != self.run_id:
            wrong.append(f"runId {event.run_id!r} instead of {self.run_id!r}")
        if wrong:
            raise StreamFault(
                "RUN_MISMATCH",
                f"{name} carries {' and '.join(wrong)}; the agent must echo the ids of the run it was asked for.",
                event_type=name,
                thread_id=event.thread_id,
                run_id=event.run_id,
                expected_thread_id=self.thread_id,
                expected_run_id=self.run_id,
            )

    # --- tool calls -----------------------------------------------------------------

    def _start_call(self, tool_call_id: str, tool_name: str, name: str) -> None:
        self._refuse_restart(tool_call_id, name)
        self._charge(self._start_cost(tool_call_id, tool_name), tool_call_id, name)
        self._open(tool_call_id, tool_name, chunked=False)

    def _refuse_restart(self, tool_call_id: str, name: str) -> None:
        previous = self._calls.get(tool_call_id)
        if previous is not None and previous.source == "stream":
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent {name} for {tool_call_id}, which this run already started; "
                "tool call ids are unique.",
                event_type=name,
                tool_call_id=tool_call_id,
            )

    def _start_cost(self, tool_call_id: str, tool_name: str) -> int:
        # A call a snapshot taught first already paid for its id, and its
        # name and text stay held as the snapshot copy; only the name is new.
        known = tool_call_id in self._calls
        return _size(tool_name) + (0 if known else _size(tool_call_id))

    def _open(self, tool_call_id: str, tool_name: str, *, chunked: bool) -> _Call:
        # Call only once the cost is charged: from here on nothing can refuse.
        previous = self._calls.pop(tool_call_id, None)
        call = _Call(tool_name, "stream", chunked=chunked)
        if previous is not None:
            # The stream wins over the snapshot that mentioned the call first;
            # the snapshot's version is kept only to compare. Re-inserting puts
            # the call where the stream proposed it.
            call.snapshot = (previous.name, previous.text())
        self._calls[tool_call_id] = call
        return call

    def _open_call(self, tool_call_id: str, name: str) -> _Call:
        call = self._calls.get(tool_call_id)
        if call is None or call.source != "stream":
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent {name} for {tool_call_id}, which was never started in this run "
                "(no TOOL_CALL_START).",
                event_type=name,
                tool_call_id=tool_call_id,
            )
        if not call.open:
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent {name} for {tool_call_id} after its TOOL_CALL_END.",
                event_type=name,
                tool_call_id=tool_call_id,
            )
        return call

    def _append(self, call: _Call, tool_call_id: str, delta: str | None, name: str) -> None:
        if not delta:
            return
        self._charge(_size(delta), tool_call_id, name)
        call.parts.append(delta)

    def _chunk(self, event: Any, name: str) -> None:
        tool_call_id = event.tool_call_id
        if tool_call_id is None:
            tool_call_id = self._chunk_call
            if tool_call_id is None:
                raise StreamFault(
                    "TOOL_CALL_ORDER",
                    f"The agent sent {name} without toolCallId, but no chunked tool call is open "
                    "to continue; the first chunk of a call names its id and tool.",
                    event_type=name,
                )
        call = self._calls.get(tool_call_id)
        if call is not None and call.source == "stream":
            if not call.open:
                raise StreamFault(
                    "TOOL_CALL_ORDER",
                    f"The agent sent {name} for {tool_call_id} after that call was closed.",
                    event_type=name,
                    tool_call_id=tool_call_id,
                )
            self._append(call, tool_call_id, event.delta, name)
            return
        if event.tool_call_name is None:
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent the first {name} of {tool_call_id} without toolCallName; "
                "the first chunk of a call names its id and tool.",
                event_type=name,
                tool_call_id=tool_call_id,
            )
        # Opening and first delta are charged together, so a refusal leaves
        # the previous chunked call open and current, as it was.
        delta = event.delta or ""
        self._charge(self._start_cost(tool_call_id, event.tool_call_name) + _size(delta), tool_call_id, name)
        # Switching to a new id closes the previous chunked call (spec, ToolCallChunk).
        self._close_chunked()
        call = self._open(tool_call_id, event.tool_call_name, chunked=True)
        if delta:
            call.parts.append(delta)
        self._chunk_call = tool_call_id

    def _close_chunked(self) -> None:
        if self._chunk_call is not None:
            self._calls[self._chunk_call].open = False
            self._chunk_call = None

    def _learn_from_snapshot(self, messages: list[Any], name: str) -> None:
        learnt: dict[str, tuple[str, str]] = {}
        for message in messages:
            if isinstance(message, AssistantMessage):
                for tool_call in message.tool_calls or ():
                    learnt[tool_call.id] = (tool_call.function.name, tool_call.function.arguments)
        # Charge the whole snapshot first, so a refused one changes nothing.
        cost = 0
        for tool_call_id, (tool_name, text) in learnt.items():
            cost += _size(tool_name) + _size(text)
            previous = self._calls.get(tool_call_id)
            if previous is None:
                cost += _size(tool_call_id)
            elif previous.source == "snapshot":
                cost -= _size(previous.name) + _size(previous.text())
            elif previous.snapshot is not None:
                cost -= _size(previous.snapshot[0]) + _size(previous.snapshot[1])
        if learnt:
            self._charge(cost, next(iter(learnt)), name)
        for tool_call_id, (tool_name, text) in learnt.items():
            previous = self._calls.get(tool_call_id)
            if previous is not None and previous.source == "stream":
                previous.snapshot = (tool_name, text)
                continue
            # A later snapshot replaces an earlier one's view: it is newer.
            call = _Call(tool_name, "snapshot")
            call.parts.append(text)
            self._calls[tool_call_id] = call

    def _charge(self, size: int, tool_call_id: str, name: str) -> None:
        total = self._held + size
        if total > self.max_tool_call_bytes:
            raise StreamFault(
                "TOO_LARGE",
                f"{name} for {tool_call_id} would make this run's tool calls hold {total} bytes, over "
                f"the {self.max_tool_call_bytes}-byte limit.",
                event_type=name,
                tool_call_id=tool_call_id,
                size=total,
                limit=self.max_tool_call_bytes,
            )
        self._held = total


def _type_name(event: BaseEvent) -> str:
    kind = event.type
    return kind.value if isinstance(kind, EventType) else str(kind)


def _size(text: str) -> int:
    # UTF-8 bytes, the unit of every other limit in the package; ASCII (the
    # usual JSON) skips the encode.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _same_json(first: str, second: str) -> bool:
    # A snapshot may re-serialise the arguments (other spacing or key order);
    # only a different value is a disagreement worth reporting.
    if first == second:
        return True
    try:
        return json.loads(first) == json.loads(second)
    except (ValueError, RecursionError):
        return False
