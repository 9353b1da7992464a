"""Reassembling what a run's tool calls proposed: each call's name and argument text.

Why it is shaped so: docs/internals/protocol.md (protocol/toolcalls.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ag_ui.core import AssistantMessage, ToolMessage

from .errors import MalformedMessage, StreamFault

# wire's private helpers, so "valid JSON" and the names of JSON kinds mean the
# same in a tool call's arguments as in every event of the package.
from .wire import DEFAULT_MAX_BYTES, _decode, _kind

__all__ = ["DEFAULT_MAX_TOOL_CALL_BYTES", "ProposedArgs", "ProposedCall", "ToolCalls"]

#: Default cap on the text a run's tool calls may make the lifecycle hold:
#: the same 8 MiB wire.py allows a single event, so a proposal that fits in
#: one TOOL_CALL_ARGS still fits when split into many.
DEFAULT_MAX_TOOL_CALL_BYTES = DEFAULT_MAX_BYTES


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


class ToolCalls:
    """The tool calls of ONE run, reassembled from its events.

    Each feeding method takes ``event_type``, the name of the event being
    fed, because every refusal names the event that caused it.
    ``max_bytes`` caps the UTF-8 size of everything held; ``held`` is what
    has been charged against it so far.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_TOOL_CALL_BYTES) -> None:
        self.max_bytes = max_bytes
        self._calls: dict[str, _Call] = {}
        # Per owner (subagentRunId, None for the parent): the call its TOOL_CALL_CHUNK without id continues.
        self._chunk_calls: dict[str | None, str] = {}
        self._held = 0
        # Ids a TOOL_CALL_RESULT or a snapshot's tool message answered (C21).
        self._answered: set[str] = set()

    @property
    def held(self) -> int:
        """UTF-8 bytes charged against ``max_bytes`` so far."""
        return self._held

    # --- what was proposed ----------------------------------------------------------

    @property
    def calls(self) -> dict[str, ProposedCall]:
        """Every tool call described so far, by id, in the order first seen.

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
            known = (f"the stream mentions {', '.join(self._calls)}" if self._calls
                     else "the stream mentions no tool call")
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
                value = _decode(text, self.max_bytes, f"The {origin} of {tool_call_id}")
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

    def unanswered(self) -> list[tuple[str, str]]:
        """(id, tool name) of every call described and never answered, in the order first seen (C21, P29)."""
        return [(tool_call_id, call.name) for tool_call_id, call in self._calls.items()
                if tool_call_id not in self._answered]

    # --- feeding --------------------------------------------------------------------

    def answer(self, tool_call_id: str, event_type: str) -> None:
        """TOOL_CALL_RESULT: the call is answered, whichever run started it."""
        if tool_call_id not in self._answered:
            self._charge(_size(tool_call_id), tool_call_id, event_type)
            self._answered.add(tool_call_id)

    def start(self, tool_call_id: str, tool_name: str, event_type: str) -> None:
        """TOOL_CALL_START: open a streamed call (a call the stream already started is refused)."""
        self._refuse_restart(tool_call_id, event_type)
        self._charge(self._start_cost(tool_call_id, tool_name), tool_call_id, event_type)
        self._open(tool_call_id, tool_name, chunked=False)

    def append(self, tool_call_id: str, delta: str | None, event_type: str) -> None:
        """TOOL_CALL_ARGS: add a delta to an open streamed call."""
        self._append(self._open_call(tool_call_id, event_type), tool_call_id, delta, event_type)

    def end(self, tool_call_id: str, event_type: str) -> None:
        """TOOL_CALL_END: the arguments of an open streamed call are whole."""
        self._open_call(tool_call_id, event_type).open = False
        self._chunk_calls = {o: i for o, i in self._chunk_calls.items() if i != tool_call_id}

    def chunk(self, tool_call_id: str | None, tool_name: str | None, delta: str | None, event_type: str,
              owner: str | None = None) -> None:
        """TOOL_CALL_CHUNK: continue the call it names (or, without id, its owner's current one), or open one.

        ``owner``: its subagentRunId. Owners' chunk streams may interleave (C38);
        an untagged chunk without id that several subagents' open streams could
        continue is refused as ambiguous (C39).
        """
        lane = owner
        if tool_call_id is None:
            if owner is None and None not in self._chunk_calls and len(self._chunk_calls) > 1:
                raise StreamFault(
                    "AMBIGUOUS_CHUNK",
                    f"The agent sent {event_type} without toolCallId or subagentRunId while "
                    f"{len(self._chunk_calls)} subagents' chunked tool calls are open; it could continue any.",
                    event_type=event_type,
                )
            if owner is None and None not in self._chunk_calls and self._chunk_calls:
                lane = next(iter(self._chunk_calls))
            tool_call_id = self._chunk_calls.get(lane)
            if tool_call_id is None:
                raise StreamFault(
                    "TOOL_CALL_ORDER",
                    f"The agent sent {event_type} without toolCallId, but no chunked tool call is open "
                    "to continue; the first chunk of a call names its id and tool.",
                    event_type=event_type,
                )
        call = self._calls.get(tool_call_id)
        if call is not None and call.source == "stream":
            if not call.open:
                raise StreamFault(
                    "TOOL_CALL_ORDER",
                    f"The agent sent {event_type} for {tool_call_id} after that call was closed.",
                    event_type=event_type,
                    tool_call_id=tool_call_id,
                )
            self._append(call, tool_call_id, delta, event_type)
            return
        if tool_name is None:
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent the first {event_type} of {tool_call_id} without toolCallName; "
                "the first chunk of a call names its id and tool.",
                event_type=event_type,
                tool_call_id=tool_call_id,
            )
        # Opening and first delta are charged together, so a refusal leaves
        # the previous chunked call open and current, as it was.
        delta = delta or ""
        self._charge(self._start_cost(tool_call_id, tool_name) + _size(delta), tool_call_id, event_type)
        # Switching to a new id closes the owner's previous chunked call (spec, ToolCallChunk).
        self.close_chunked(lane)
        call = self._open(tool_call_id, tool_name, chunked=True)
        if delta:
            call.parts.append(delta)
        self._chunk_calls[lane] = tool_call_id

    def open_streamed(self) -> list[str]:
        """Ids of the calls TOOL_CALL_START opened and no TOOL_CALL_END closed (chunked ones close with the run)."""
        return [i for i, call in self._calls.items() if call.open and not call.chunked]

    def close_chunked(self, *owners: str | None) -> None:
        """Close the chunked calls of ``owners`` (all, when none is named), as the spec does at the stream's end."""
        for owner in owners or list(self._chunk_calls):
            if (tool_call_id := self._chunk_calls.pop(owner, None)) is not None:
                self._calls[tool_call_id].open = False

    def learn_from_snapshot(self, messages: list[Any], event_type: str) -> None:
        """MESSAGES_SNAPSHOT: learn the calls its assistant messages carry (the stream's own stay the proposal)."""
        learnt: dict[str, tuple[str, str]] = {}
        answered: set[str] = set()
        for message in messages:
            if isinstance(message, AssistantMessage):
                for tool_call in message.tool_calls or ():
                    learnt[tool_call.id] = (tool_call.function.name, tool_call.function.arguments)
            elif isinstance(message, ToolMessage):
                answered.add(message.tool_call_id)
        answered -= self._answered
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
        cost += sum(_size(tool_call_id) for tool_call_id in answered)
        if learnt or answered:
            self._charge(cost, next(iter(learnt or answered)), event_type)
        self._answered |= answered
        for tool_call_id, (tool_name, text) in learnt.items():
            previous = self._calls.get(tool_call_id)
            if previous is not None and previous.source == "stream":
                previous.snapshot = (tool_name, text)
                continue
            # A later snapshot replaces an earlier one's view: it is newer.
            call = _Call(tool_name, "snapshot")
            call.parts.append(text)
            self._calls[tool_call_id] = call

    # --- the rules behind them ------------------------------------------------------

    def _refuse_restart(self, tool_call_id: str, event_type: str) -> None:
        previous = self._calls.get(tool_call_id)
        if previous is not None and previous.source == "stream":
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent {event_type} for {tool_call_id}, which this run already started; "
                "tool call ids are unique.",
                event_type=event_type,
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

    def _open_call(self, tool_call_id: str, event_type: str) -> _Call:
        call = self._calls.get(tool_call_id)
        if call is None or call.source != "stream":
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent {event_type} for {tool_call_id}, which was never started in this run "
                "(no TOOL_CALL_START).",
                event_type=event_type,
                tool_call_id=tool_call_id,
            )
        if not call.open:
            raise StreamFault(
                "TOOL_CALL_ORDER",
                f"The agent sent {event_type} for {tool_call_id} after its TOOL_CALL_END.",
                event_type=event_type,
                tool_call_id=tool_call_id,
            )
        return call

    def _append(self, call: _Call, tool_call_id: str, delta: str | None, event_type: str) -> None:
        if not delta:
            return
        self._charge(_size(delta), tool_call_id, event_type)
        call.parts.append(delta)

    def _charge(self, size: int, tool_call_id: str, event_type: str) -> None:
        total = self._held + size
        if total > self.max_bytes:
            raise StreamFault(
                "TOO_LARGE",
                f"{event_type} for {tool_call_id} would make this run's tool calls hold {total} bytes, over "
                f"the {self.max_bytes}-byte limit.",
                event_type=event_type,
                tool_call_id=tool_call_id,
                size=total,
                limit=self.max_bytes,
            )
        self._held = total


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
