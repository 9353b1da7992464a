"""One run's event stream as a state machine: is it well-formed, and what did it propose?

Why it is shaped so: docs/internals/protocol.md (protocol/lifecycle.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from ag_ui.core import BaseEvent, EventType, Interrupt

from .errors import StreamFault

# Re-exported: callers know the proposal's types and the budget as the lifecycle's.
from .toolcalls import DEFAULT_MAX_TOOL_CALL_BYTES, ProposedArgs, ProposedCall, ToolCalls

__all__ = [
    "DEFAULT_MAX_TOOL_CALL_BYTES",
    "OutcomeType",
    "ProposedArgs",
    "ProposedCall",
    "RunLifecycle",
    "StreamFault",
]

OutcomeType = Literal["success", "interrupt", "cancelled", "error"]

_TERMINAL = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})
# Streamed items whose later events must carry their opener's owner, or none (C37):
# the opening event type, and the continuations with the attribute naming the item.
_OPENERS = {EventType.TEXT_MESSAGE_START: "message_id", EventType.REASONING_MESSAGE_START: "message_id",
            EventType.TOOL_CALL_START: "tool_call_id"}
_CONTINUATIONS = {EventType.TEXT_MESSAGE_CONTENT: ("message_id", False),
                  EventType.TEXT_MESSAGE_END: ("message_id", True),
                  EventType.REASONING_MESSAGE_CONTENT: ("message_id", False),
                  EventType.REASONING_MESSAGE_END: ("message_id", True),
                  EventType.TOOL_CALL_ARGS: ("tool_call_id", False),
                  EventType.TOOL_CALL_END: ("tool_call_id", True)}


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
        self._tool_calls = ToolCalls(max_tool_call_bytes)
        self._started = False
        self._terminal: BaseEvent | None = None
        self._count = 0
        self._last_type: str | None = None
        self._declared_version: str | None = None
        # Open streamed items' owners (subagentRunId, None for the parent), kept until their end (C37).
        self._owners: dict[tuple[str, str], str | None] = {}
        self._late_error = False

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
    def declared_version(self) -> str | None:
        """The ``protocolVersion`` the agent's RUN_STARTED declared; None for a peer from before versioning (C65)."""
        return self._declared_version

    def pending_tool_calls(self, earlier: Iterable[str] = (), asked: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(id, tool name) of the calls this run left for its client to answer, in the order made (C21, C22).

        Derived from the stream whatever ``pendingToolCallIds`` says: every
        call started (streamed, or only in a MESSAGES_SNAPSHOT) and answered
        by no TOOL_CALL_RESULT and no tool message. ``earlier``: ids of calls
        the run's input already held, which this run did not start. ``asked``:
        the interrupts' toolCallIds, whose answer is the resume, not the client's.
        On a success the ids the outcome lists come first, as declared (P29).
        """
        skip = set(earlier) | set(asked)
        derived = [(i, name) for i, name in self._tool_calls.unanswered() if i not in skip]
        outcome = getattr(self._terminal, "outcome", None)
        declared = getattr(outcome, "pending_tool_call_ids", None) or []
        if not declared:
            return derived
        names = dict(derived) | {i: c.name for i, c in self._tool_calls.calls.items()}
        listed = [(i, names.get(i, "")) for i in dict.fromkeys(declared)]
        return listed + [(i, name) for i, name in derived if i not in set(declared)]

    @property
    def event_count(self) -> int:
        """How many events have been accepted."""
        return self._count

    @property
    def max_tool_call_bytes(self) -> int:
        """The cap on the UTF-8 bytes this run's tool calls may hold."""
        return self._tool_calls.max_bytes

    @property
    def tool_calls(self) -> dict[str, ProposedCall]:
        """Every tool call this stream described, by id, in the order first seen.

        A fresh dict of frozen views: changing it changes nothing here.
        """
        return self._tool_calls.calls

    def proposed_args(self, tool_call_id: str) -> ProposedArgs:
        """The tool name and parsed arguments of one call, with every problem found.

        Never raises for what the agent sent: unparseable or non-object
        arguments, a missing TOOL_CALL_END and a snapshot that disagrees with
        the stream are all reported in ``problems``, because the hub must
        still show the reviewer what was proposed.
        """
        return self._tool_calls.proposed_args(tool_call_id)

    # --- feeding --------------------------------------------------------------------

    def accept(self, event: BaseEvent) -> None:
        """Take the next event of the stream, or raise ``StreamFault`` if it is out of place.

        Faults: ``NOT_STARTED`` (anything but RUN_ERROR before RUN_STARTED), ``AFTER_END``
        (anything after RUN_FINISHED/RUN_ERROR but one RUN_ERROR after RUN_FINISHED),
        ``OWNER_MISMATCH`` (a continuation tagged with another subagentRunId than its opener), ``DUPLICATE_START``,
        ``RUN_MISMATCH`` (RUN_STARTED/RUN_FINISHED naming another thread or
        run), ``TOOL_CALL_ORDER`` (tool-call events out of start/args/end
        order) and ``TOO_LARGE`` (tool calls over ``max_tool_call_bytes``).
        """
        kind = event.type
        name = _type_name(event)
        # Order of the checks: a stream that never started or already ended is
        # wrong whatever the event is, so those come before per-type rules.
        if not self._started and self._terminal is None and kind == EventType.RUN_ERROR:
            # 1.0 lets a stream open with RUN_ERROR (a run refused before it started, P1, P19):
            # the agent's own failure, not a violation to report as Countersign's (C1, C8).
            self._terminal = event
            self._count += 1
            self._last_type = name
            return
        if not self._started and self._terminal is None and kind != EventType.RUN_STARTED:
            raise self._not_started(event, name)
        if (self._terminal is not None and kind == EventType.RUN_ERROR
                and self._terminal.type == EventType.RUN_FINISHED and not self._late_error):
            # 1.0 admits one late RUN_ERROR after RUN_FINISHED: the run failed after all (C4, C10).
            self._late_error = True
            self._terminal = event
            self._count += 1
            self._last_type = name
            return
        if self._terminal is not None:
            ended_by = _type_name(self._terminal)
            raise StreamFault(
                "AFTER_END",
                f"The agent sent {name} after {ended_by}; nothing may follow the event that ends a run.",
                event_type=name,
                terminal_type=ended_by,
            )
        owned = self._owned(event, kind, name) if kind in _OPENERS or kind in _CONTINUATIONS else None
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
            self._declared_version = getattr(event, "protocol_version", None)
        elif kind in _TERMINAL:
            if kind == EventType.RUN_FINISHED:
                self._check_ids(event, name)
                self._check_all_closed(name)
            self._terminal = event
            # The spec closes chunked calls automatically when the stream completes.
            self._tool_calls.close_chunked()
        elif kind == EventType.TOOL_CALL_START:
            self._tool_calls.start(event.tool_call_id, event.tool_call_name, name)
        elif kind == EventType.TOOL_CALL_ARGS:
            self._tool_calls.append(event.tool_call_id, event.delta, name)
        elif kind == EventType.TOOL_CALL_END:
            self._tool_calls.end(event.tool_call_id, name)
        elif kind == EventType.TOOL_CALL_CHUNK:
            self._tool_calls.chunk(event.tool_call_id, event.tool_call_name, event.delta, name,
                                   getattr(event, "subagent_run_id", None))
        elif kind in (EventType.SUBAGENT_FINISHED, EventType.SUBAGENT_ERROR):
            # Its own chunk streams end with it, and no one else's (C38).
            self._tool_calls.close_chunked(event.subagent_run_id)
        elif kind == EventType.MESSAGES_SNAPSHOT:
            self._tool_calls.learn_from_snapshot(event.messages, name)
        elif kind == EventType.TOOL_CALL_RESULT:
            self._tool_calls.answer(event.tool_call_id, name)
        # Every other event (text, state, steps, TOOL_CALL_RESULT...) is legal
        # anywhere inside the run; the lifecycle has nothing to check there.
        if owned is not None:
            key, owner = owned
            if kind in _OPENERS:
                self._owners[key] = owner
            elif _CONTINUATIONS[kind][1]:
                self._owners.pop(key, None)
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
        return StreamFault(
            "NOT_STARTED",
            f"The agent sent {name} before RUN_STARTED; a run's stream must open with RUN_STARTED or RUN_ERROR.",
            event_type=name,
        )

    def _check_all_closed(self, name: str) -> None:
        """C45: a run finishes with every message and streamed tool call closed (chunked calls close with it)."""
        still = [item for (family, item) in self._owners if family == "message"]
        still += self._tool_calls.open_streamed()
        if still:
            shown = ", ".join(repr(i[:40]) for i in still[:5]) + (" and more" if len(still) > 5 else "")
            raise StreamFault(
                "OPEN_AT_END",
                f"The agent sent {name} with {shown} still open; every message and tool call closes before "
                "the run finishes.",
                event_type=name,
                open_ids=still[:5],
            )

    def _owned(self, event: Any, kind: EventType, name: str) -> tuple[tuple[str, str], str | None]:
        """(item, owner) of an opener or continuation; refuses a continuation tagged with another owner (C37).

        An untagged continuation is its opener's; one whose opener this stream
        never carried has nothing to disagree with.
        """
        owner = getattr(event, "subagent_run_id", None)
        attribute = _OPENERS[kind] if kind in _OPENERS else _CONTINUATIONS[kind][0]
        item = getattr(event, attribute)
        key = ("tool" if attribute == "tool_call_id" else "message", item)
        if key[0] == "message" and (kind in _OPENERS) == (key in self._owners):
            # C45: a start for a message already open, or content/end for one not open, is fatal.
            state = "already open" if kind in _OPENERS else "not open"
            raise StreamFault(
                "MESSAGE_ORDER",
                f"The agent sent {name} for message {item!r}, which is {state}; a message opens with its "
                "start, takes content, and closes with its end.",
                event_type=name,
                message_id=item,
            )
        if kind in _OPENERS or key not in self._owners:
            return key, owner
        opened_by = self._owners[key]
        if owner is not None and owner != opened_by:
            raise StreamFault(
                "OWNER_MISMATCH",
                f"{name} for {item!r} is attributed to subagent run {owner!r}, but its opening event was "
                f"attributed to {'subagent run ' + repr(opened_by) if opened_by else 'the parent agent'}; "
                "a continuation carries its opener's subagentRunId or none.",
                event_type=name,
                subagent_run_id=owner,
                opened_by=opened_by,
            )
        return key, owner

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


def _type_name(event: BaseEvent) -> str:
    kind = event.type
    return kind.value if isinstance(kind, EventType) else str(kind)
