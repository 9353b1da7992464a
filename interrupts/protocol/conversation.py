"""A thread's messages and state, built from events as AG-UI 1.0 and ``@ag-ui/client`` 1.0.0 build them.

Why it is shaped so: docs/internals/protocol.md (protocol/conversation.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .state import DeltaRefused, apply_delta

__all__ = ["FOLDED_TYPES", "MAX_MESSAGES", "MAX_STATE_BYTES", "Conversation", "chunk_openers", "fold", "outgoing"]

# A thread holds at most this many messages; an event that would add more is skipped with a warning.
MAX_MESSAGES = 20_000
# What a state or an activity's content may grow to through patches (COUNTERSIGN_MAX_EVENT_BYTES' default).
MAX_STATE_BYTES = 8 * 1024 * 1024
# Warnings kept per call: a hostile stream could otherwise make one per event.
MAX_WARNINGS = 50

# The events that change messages or state: the hub decodes only these.
FOLDED_TYPES = frozenset({
    "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TEXT_MESSAGE_CHUNK",
    "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_CHUNK", "TOOL_CALL_RESULT",
    "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_MESSAGE_CHUNK",
    "REASONING_ENCRYPTED_VALUE", "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA",
    "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "STATE_DELTA", "RUN_STARTED",
    # They close open chunk streams (the client's chunk transform), so they matter to chunks.
    "RUN_FINISHED", "RUN_ERROR", "STEP_STARTED", "STEP_FINISHED", "REASONING_START", "REASONING_END",
    "CUSTOM", "SUBAGENT_FINISHED", "SUBAGENT_ERROR",
})

_TEXT_ROLES = frozenset({"developer", "system", "assistant", "user"})
# Events after which the client's chunk transform closes the open chunk stream of the event's lane.
_CLOSE_LANE = frozenset({
    "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS",
    "TOOL_CALL_END", "TOOL_CALL_RESULT", "STATE_SNAPSHOT", "STATE_DELTA", "CUSTOM", "STEP_STARTED",
    "STEP_FINISHED", "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
    "REASONING_MESSAGE_END", "REASONING_END",
})
_CLOSE_ALL = frozenset({"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT"})


@dataclass
class Conversation:
    messages: list[dict]  # wire form (camelCase dicts), as @ag-ui/client holds agent.messages
    state: object  # any JSON value
    warnings: list[str] = field(default_factory=list)  # what was skipped and why, in plain words
    # Where each message id and tool call id is in ``messages``: a fold continuing from these messages
    # takes it (``fold``'s ``index``) rather than walking them all again.
    index: tuple[dict, dict] | None = field(default=None, repr=False, compare=False)


def outgoing(messages: Sequence[dict]) -> list[dict]:
    """The next RunAgentInput.messages: the conversation without activity messages (C53), nulls left out (C56)."""
    sent = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") == "activity":
            continue
        message = copy.deepcopy(message)
        for key in ("subagentRunId", "encryptedValue"):
            if key in message and message[key] is None:
                del message[key]
        sent.append(message)
    return sent


def fold(events: Iterable[dict], messages: Sequence[dict] = (), state: object = None, *,
         max_state_bytes: int = MAX_STATE_BYTES, index: tuple[dict, dict] | None = None) -> Conversation:
    """``messages`` and ``state`` after ``events`` (wire-form dicts, as received), as @ag-ui/client applies them.

    ``state`` None means ``{}`` (C58). Neither argument is changed. A chunk
    stream open at the end of ``events`` is continued by the next call only
    if that call's events start with ``chunk_openers`` of these. ``index``:
    the ``index`` of the Conversation whose ``messages`` these are (a long
    conversation folded a few events at a time is not walked for each call).
    """
    folder = _Folder(messages, {} if state is None else state, max_state_bytes, index)
    for event in _expanded(events, folder):
        try:
            folder.apply(event)
        except _Skip as skip:
            folder.warn(str(skip))
        except Exception as problem:  # noqa: BLE001  (the agent's input; no event may end the fold)
            # Never reached with schema-valid events; a malformed one is skipped, never fatal.
            folder.warn(f"A {event.get('type')} event could not be applied ({problem}); it was skipped.")
    return folder.result()


def chunk_openers(events: Iterable[dict], carried: Sequence[dict] = ()) -> list[dict]:
    """Chunk events that reopen, with no other effect, the chunk streams still open after ``carried`` + ``events``.

    A caller folding one stream in several calls puts them first in the next
    call, so an id-less continuation chunk continues its stream as the
    client's (stateful) chunk transform would.
    """
    lanes: dict = {}
    for event in [*carried, *events]:
        if isinstance(event, dict):
            try:
                _track_lane(lanes, event)
            except _Skip:
                pass  # fold skipped it too
    return [dict(opener) for opener in lanes.values()]


class _Skip(Exception):
    """An event that cannot apply: skipped, its reason a warning."""


def _text(value: object) -> bool:
    return isinstance(value, str)


def _owner(event: dict) -> str | None:
    owner = event.get("subagentRunId")
    return owner if isinstance(owner, str) else None


def _track_lane(lanes: dict, event: dict) -> None:
    """The chunk transform's lanes, reduced to what reopens them: owner -> an opener chunk."""
    kind = event.get("type")
    if kind in _CLOSE_ALL:
        lanes.clear()
    elif kind in _CLOSE_LANE or kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
        if kind in _CLOSE_LANE or _owner(event) is not None:
            lanes.pop(_owner(event), None)
    elif kind in _CHUNK_KINDS:
        lane_kind, id_key = _CHUNK_KINDS[kind]
        lane = _lane_of(lanes, lane_kind, id_key, event)
        open_ = lanes.get(lane)
        if open_ is not None and open_["type"] == kind and event.get(id_key) in (None, open_[id_key]):
            return
        if not _text(event.get(id_key)):
            return
        opener = {"type": kind, id_key: event[id_key]}
        if kind == "TOOL_CALL_CHUNK":
            if not _text(event.get("toolCallName")):
                return
            opener["toolCallName"] = event["toolCallName"]
            if _text(event.get("parentMessageId")):
                opener["parentMessageId"] = event["parentMessageId"]
        if kind == "TEXT_MESSAGE_CHUNK":
            opener["role"] = event.get("role") or "assistant"
            if _text(event.get("name")):
                opener["name"] = event["name"]
        if _owner(event) is not None:
            opener["subagentRunId"] = _owner(event)
        lanes[lane] = opener


_CHUNK_KINDS = {
    "TEXT_MESSAGE_CHUNK": ("text", "messageId"),
    "TOOL_CALL_CHUNK": ("tool", "toolCallId"),
    "REASONING_MESSAGE_CHUNK": ("reasoning", "messageId"),
}


def _lane_of(lanes: dict, lane_kind: str, id_key: str, event: dict):
    """Which lane (owner) a chunk belongs to, as the client's resolveLane decides."""
    chunk_type = event.get("type")
    entity = event.get(id_key)
    tag = _owner(event)
    if entity is not None:
        for owner, opener in lanes.items():
            if opener["type"] == chunk_type and opener.get(id_key) == entity:
                if tag is not None and tag != owner:
                    raise _Skip(f"A {chunk_type} names another subagent than the stream it continues; it was "
                                "skipped.")
                return owner
        return tag
    if tag is not None:
        return tag
    if lanes.get(None, {}).get("type") == chunk_type:
        return None
    candidates = [owner for owner, opener in lanes.items() if opener["type"] == chunk_type]
    if len(candidates) > 1:
        raise _Skip(f"A {chunk_type} without an id could continue several subagents' streams; it was skipped.")
    return candidates[0] if candidates else None


def _expanded(events: Iterable[dict], folder: _Folder):
    """The events with chunks expanded into start/content/end (C44), as the client's transformChunks does."""
    lanes: dict = {}

    def close(owner) -> list[dict]:
        opener = lanes.pop(owner, None)
        if opener is None:
            return []
        end = {"TEXT_MESSAGE_CHUNK": "TEXT_MESSAGE_END", "TOOL_CALL_CHUNK": "TOOL_CALL_END",
               "REASONING_MESSAGE_CHUNK": "REASONING_MESSAGE_END"}[opener["type"]]
        id_key = "toolCallId" if opener["type"] == "TOOL_CALL_CHUNK" else "messageId"
        return [{"type": end, id_key: opener[id_key]}]

    for event in events:
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            folder.warn("Something that is not an event was skipped.")
            continue
        kind = event["type"]
        if kind in _CLOSE_ALL:
            for owner in list(lanes):
                yield from close(owner)
            yield event
        elif kind in _CLOSE_LANE:
            yield from close(_owner(event))
            yield event
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            if _owner(event) is not None:
                yield from close(_owner(event))
            yield event
        elif kind in _CHUNK_KINDS:
            try:
                expanded = _expand_chunk(event, lanes, close)
            except _Skip as skip:
                folder.warn(str(skip))
            except Exception:  # noqa: BLE001  (the agent's input; no chunk may end the fold)
                folder.warn(f"A malformed {kind} was skipped.")
            else:
                yield from expanded
        else:
            yield event


def _expand_chunk(event: dict, lanes: dict, close):
    kind = event["type"]
    lane_kind, id_key = _CHUNK_KINDS[kind]
    lane = _lane_of(lanes, lane_kind, id_key, event)
    open_ = lanes.get(lane)
    start, content = {
        "TEXT_MESSAGE_CHUNK": ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"),
        "TOOL_CALL_CHUNK": ("TOOL_CALL_START", "TOOL_CALL_ARGS"),
        "REASONING_MESSAGE_CHUNK": ("REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT"),
    }[kind]
    metadata = {"metadata": event["metadata"]} if event.get("metadata") is not None else {}
    out: list[dict] = []
    if open_ is not None and open_["type"] == kind and event.get(id_key) in (None, open_[id_key]):
        # A continuation may repeat its opener's fields, but only with the same values.
        for key in ("role", "name") if kind == "TEXT_MESSAGE_CHUNK" else (
                ("toolCallName", "parentMessageId") if kind == "TOOL_CALL_CHUNK" else ()):
            if event.get(key) is not None and event.get(key) != open_.get(key):
                raise _Skip(f"A {kind} continuing {open_[id_key]!r} changes its {key}; it was skipped.")
        entity = open_[id_key]
        owner = _owner(event) or open_.get("subagentRunId")
    else:
        out += close(lane)
        entity = event.get(id_key)
        if not _text(entity):
            raise _Skip(f"A first {kind} has no {id_key}; it was skipped (ids are never invented).")
        if kind == "TOOL_CALL_CHUNK" and not _text(event.get("toolCallName")):
            raise _Skip(f"A first {kind} has no toolCallName; it was skipped.")
        opener = {"type": kind, id_key: entity}
        started = {"type": start, id_key: entity}
        if kind == "TEXT_MESSAGE_CHUNK":
            opener["role"] = started["role"] = event.get("role") or "assistant"
            if event.get("name") is not None:
                opener["name"] = started["name"] = event["name"]
        if kind == "TOOL_CALL_CHUNK":
            opener["toolCallName"] = started["toolCallName"] = event["toolCallName"]
            if event.get("parentMessageId") is not None:
                opener["parentMessageId"] = started["parentMessageId"] = event["parentMessageId"]
        owner = _owner(event)
        if owner is not None:
            opener["subagentRunId"] = started["subagentRunId"] = owner
        lanes[lane] = opener
        out.append(started | metadata)
    if "delta" in event and event["delta"] is not None or event.get("rawEvent") is not None or metadata:
        delta = event.get("delta")
        out.append({"type": content, id_key: entity, "delta": "" if delta is None else delta, **metadata,
                    **({"subagentRunId": owner} if owner is not None else {})})
    return out


class _Folder:
    """The reducer's working copy: messages (copied before they change), state, warnings."""

    def __init__(self, messages: Sequence[dict], state: object, max_state_bytes: int,
                 index: tuple[dict, dict] | None = None) -> None:
        self.messages: list[dict] = [m for m in messages if isinstance(m, dict)]
        self.state = state
        self.max_state_bytes = max_state_bytes
        self.warnings: list[str] = []
        self.dropped_warnings = 0
        self.owned: set[int] = set()  # id() of the dicts this call made, free to change
        self.parts: dict[int, tuple[dict, str, list[str]]] = {}  # text appended, joined at the end
        if index is not None and len(self.messages) == len(messages):
            self.by_id, self.by_call = dict(index[0]), dict(index[1])
        else:
            self._reindex()

    # --- bookkeeping -------------------------------------------------------------------

    def warn(self, text: str) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(text)
        else:
            self.dropped_warnings += 1

    def result(self) -> Conversation:
        self._flush()
        warnings = list(self.warnings)
        if self.dropped_warnings:
            warnings.append(f"…and {self.dropped_warnings} more problems like these.")
        return Conversation(self.messages, self.state, warnings, (self.by_id, self.by_call))

    def _reindex(self) -> None:
        # First occurrence wins, as the client's messages.find does.
        self.by_id: dict[object, int] = {}
        self.by_call: dict[object, int] = {}
        for position, message in enumerate(self.messages):
            if isinstance(message.get("id"), str):
                self.by_id.setdefault(message["id"], position)
            for call in _calls(message):
                if isinstance(call.get("id"), str):
                    self.by_call.setdefault(call["id"], position)

    def _flush(self) -> None:
        for target, key, parts in self.parts.values():
            target[key] = "".join(parts)
        self.parts.clear()

    def _own(self, position: int) -> dict:
        """The message at ``position``, copied first if the caller (or an event) still holds it."""
        message = self.messages[position]
        if id(message) not in self.owned:
            message = copy.copy(message)
            if isinstance(message.get("toolCalls"), list):
                message["toolCalls"] = [_own_call(call) for call in message["toolCalls"]]
            if isinstance(message.get("metadata"), dict):
                message["metadata"] = dict(message["metadata"])
            self.messages[position] = message
            self.owned.add(id(message))
        return message

    def _add(self, message: dict) -> bool:
        if len(self.messages) >= MAX_MESSAGES:
            self.warn(f"The conversation holds {MAX_MESSAGES} messages already; message {message.get('id')!r} "
                      "was not added.")
            return False
        self.owned.add(id(message))
        self.messages.append(message)
        if isinstance(message.get("id"), str):
            self.by_id.setdefault(message["id"], len(self.messages) - 1)
        for call in _calls(message):
            if isinstance(call.get("id"), str):
                self.by_call.setdefault(call["id"], len(self.messages) - 1)
        return True

    def _append_text(self, target: dict, key: str, delta: str) -> None:
        entry = self.parts.get(id(target))
        if entry is None or entry[0] is not target:
            existing = target.get(key)
            entry = (target, key, [existing if isinstance(existing, str) else ""])
            self.parts[id(target)] = entry
        entry[2].append(delta)

    def _call(self, tool_call_id: str) -> tuple[int, int] | None:
        """(message position, call position) of the first tool call with this id, in any message."""
        position = self.by_call.get(tool_call_id)
        if position is None:
            return None
        for index, call in enumerate(_calls_list(self.messages[position])):
            if isinstance(call, dict) and call.get("id") == tool_call_id:
                return position, index
        return None

    def _owned_call(self, tool_call_id: str) -> dict | None:
        found = self._call(tool_call_id)
        if found is None:
            return None
        message = self._own(found[0])
        return message["toolCalls"][found[1]]

    # --- events ------------------------------------------------------------------------

    def apply(self, event: dict) -> None:
        handler = _HANDLERS.get(event["type"])
        if handler is not None:
            handler(self, event)

    def text_start(self, event: dict, role_default: str = "assistant", reasoning: bool = False) -> None:
        message_id = _required_id(event, "messageId")
        role = event.get("role")
        if not reasoning and role is not None and role not in _TEXT_ROLES:
            raise _Skip(f"A {event['type']} has the role {str(role)[:40]!r}, which a text message cannot have; "
                        "it was skipped.")
        position = self.by_id.get(message_id)
        if position is not None and self.messages[position].get("role") == "activity":
            raise _Skip(f"{event['type']}: {message_id!r} is an activity message; the text was not added to it.")
        if position is None:
            message = {"id": message_id, "role": "reasoning" if reasoning else (role or role_default), "content": ""}
            if not reasoning and event.get("name") is not None:
                message["name"] = event["name"]
            if _owner(event) is not None:
                message["subagentRunId"] = _owner(event)
            _merge_metadata(message, event)
            self._add(message)
        elif _has_metadata(event):
            _merge_metadata(self._own(position), event)

    def text_content(self, event: dict) -> None:
        message_id = _required_id(event, "messageId")
        delta = event.get("delta")
        if not isinstance(delta, str):
            raise _Skip(f"A {event['type']} for {message_id!r} has no text delta; it was skipped.")
        position = self.by_id.get(message_id)
        if position is None:
            raise _Skip(f"A {event['type']} names the message {message_id!r}, which was never started; "
                        "it was skipped.")
        if self.messages[position].get("role") == "activity":
            raise _Skip(f"{event['type']}: {message_id!r} is an activity message; the text was not added to it.")
        message = self._own(position)
        self._append_text(message, "content", delta)
        _merge_metadata(message, event)

    def text_end(self, event: dict) -> None:
        message_id = _required_id(event, "messageId")
        position = self.by_id.get(message_id)
        if position is None:
            raise _Skip(f"A {event['type']} names the message {message_id!r}, which was never started; "
                        "it was skipped.")
        if self.messages[position].get("role") == "activity":
            raise _Skip(f"{event['type']}: {message_id!r} is an activity message; it was skipped.")
        if _has_metadata(event):
            _merge_metadata(self._own(position), event)

    def tool_call_start(self, event: dict) -> None:
        call_id = _required_id(event, "toolCallId")
        name = event.get("toolCallName")
        if not isinstance(name, str):
            raise _Skip(f"A TOOL_CALL_START for {call_id!r} names no tool; it was skipped.")
        existing = self._owned_call(call_id) if self._call(call_id) is not None else None
        if existing is not None:
            # Idempotent, as the client: a replayed start updates the call it already holds.
            function = existing.setdefault("function", {})
            if function.get("name") != name:
                self.warn(f"Tool call {call_id!r} was started again under another name ({name[:80]!r}); "
                          "the new name stands.")
                function["name"] = name
            _merge_metadata(existing, event)
            return
        parent_id = event.get("parentMessageId")
        target = None
        if parent_id:  # an empty string is no parent, as in the client
            position = self.by_id.get(parent_id)
            if position is not None and self.messages[position].get("role") == "assistant":
                target = self._own(position)
                if not isinstance(target.get("toolCalls"), list) and target.get("toolCalls") is not None:
                    raise _Skip(f"Tool call {call_id!r} names a parent whose tool calls are not a list; skipped.")
            else:
                if position is not None:
                    self.warn(f"Tool call {call_id!r} names the {self.messages[position].get('role')} message "
                              f"{parent_id!r} as its parent; it was put on an assistant message of its own.")
                target = {"id": call_id if position is not None else parent_id, "role": "assistant",
                          "toolCalls": []}
                if not self._add(target):
                    return
                if _owner(event) is not None:
                    target["subagentRunId"] = _owner(event)
                position = len(self.messages) - 1
        else:
            target = {"id": call_id, "role": "assistant", "toolCalls": []}
            if not self._add(target):
                return
            if _owner(event) is not None:
                target["subagentRunId"] = _owner(event)
            position = len(self.messages) - 1
        if target.get("toolCalls") is None:
            target["toolCalls"] = []
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        _merge_metadata(call, event)
        target["toolCalls"].append(call)
        self.by_call.setdefault(call_id, position)

    def tool_call_args(self, event: dict) -> None:
        call_id = _required_id(event, "toolCallId")
        delta = event.get("delta")
        if not isinstance(delta, str):
            raise _Skip(f"A TOOL_CALL_ARGS for {call_id!r} has no text delta; it was skipped.")
        call = self._owned_call(call_id)
        if call is None:
            raise _Skip(f"A TOOL_CALL_ARGS names the tool call {call_id!r}, which was never started; it was skipped.")
        function = call.get("function")
        if not isinstance(function, dict):
            raise _Skip(f"Tool call {call_id!r} has no function to add arguments to; the arguments were skipped.")
        self._append_text(function, "arguments", delta)
        _merge_metadata(call, event)

    def tool_call_end(self, event: dict) -> None:
        call_id = _required_id(event, "toolCallId")
        if self._call(call_id) is None:
            raise _Skip(f"A TOOL_CALL_END names the tool call {call_id!r}, which was never started; it was skipped.")
        if _has_metadata(event):
            _merge_metadata(self._owned_call(call_id), event)

    def tool_call_result(self, event: dict) -> None:
        message_id = _required_id(event, "messageId")
        call_id = _required_id(event, "toolCallId")
        if "content" not in event:
            raise _Skip(f"The TOOL_CALL_RESULT {message_id!r} has no content; it was skipped.")
        message = {"id": message_id, "toolCallId": call_id, "role": event.get("role") or "tool",
                   "content": copy.deepcopy(event["content"])}
        if _owner(event) is not None:
            message["subagentRunId"] = _owner(event)
        _merge_metadata(message, event)
        if len(self.messages) >= MAX_MESSAGES:
            self.warn(f"The conversation holds {MAX_MESSAGES} messages already; the result {message_id!r} "
                      "was not added.")
            return
        # Right after the assistant message that made the call, after the results already there (the client's choice).
        owner = self.by_call.get(call_id)
        if owner is not None and self.messages[owner].get("role") != "assistant":
            owner = next((i for i, m in enumerate(self.messages) if m.get("role") == "assistant"
                          and any(isinstance(c, dict) and c.get("id") == call_id for c in _calls_list(m))), None)
        if owner is None:
            self._add(message)
            return
        at = owner + 1
        while at < len(self.messages) and self.messages[at].get("role") == "tool":
            at += 1
        self.owned.add(id(message))
        self.messages.insert(at, message)
        self._reindex()

    def reasoning_start(self, event: dict) -> None:
        self.text_start(event, reasoning=True)

    def encrypted_value(self, event: dict) -> None:
        entity = _required_id(event, "entityId")
        value = event.get("encryptedValue")
        if not isinstance(value, str):
            raise _Skip(f"A REASONING_ENCRYPTED_VALUE for {entity!r} carries no value; it was skipped.")
        if event.get("subtype") == "tool-call":
            for position, message in enumerate(self.messages):
                if message.get("role") == "assistant" and any(
                        isinstance(c, dict) and c.get("id") == entity for c in _calls_list(message)):
                    self._owned_call_at(position, entity)["encryptedValue"] = value
                    return
            self.warn(f"A REASONING_ENCRYPTED_VALUE names the tool call {entity!r}, which the conversation does "
                      "not hold; it was dropped.")
        else:
            position = self.by_id.get(entity)
            if position is None or self.messages[position].get("role") == "activity":
                self.warn(f"A REASONING_ENCRYPTED_VALUE names the message {entity!r}, which the conversation does "
                          "not hold (or is an activity); it was dropped.")
                return
            self._own(position)["encryptedValue"] = value

    def _owned_call_at(self, position: int, call_id: str) -> dict:
        message = self._own(position)
        return next(c for c in message["toolCalls"] if isinstance(c, dict) and c.get("id") == call_id)

    def messages_snapshot(self, event: dict) -> None:
        incoming = event.get("messages")
        if not isinstance(incoming, list):
            raise _Skip("A MESSAGES_SNAPSHOT without a list of messages was skipped.")
        if len(incoming) > MAX_MESSAGES:
            raise _Skip(f"A MESSAGES_SNAPSHOT of {len(incoming)} messages (more than {MAX_MESSAGES}) was skipped.")
        fresh = []
        for message in incoming:
            if not isinstance(message, dict) or not isinstance(message.get("id"), str):
                raise _Skip("A MESSAGES_SNAPSHOT holding something that is not a message with an id was skipped.")
            message = copy.deepcopy(message)
            if "subagentRunId" in message and message["subagentRunId"] is None:
                del message["subagentRunId"]
            fresh.append(message)
        self._flush()
        snapshot = {}
        for message in fresh:
            snapshot[message.get("id")] = message  # the last copy of an id wins, as a JS Map
        owned_types = _authoritative_activity_types(event)
        has_activity = any(m.get("role") == "activity" for m in fresh)
        has_reasoning = any(m.get("role") == "reasoning" for m in fresh)

        def kept_client_only(message: dict) -> bool:
            # C50: activity and reasoning survive unless the snapshot speaks for their role.
            if message.get("role") == "activity":
                if owned_types is not None and owned_types is not _ABSENT:
                    return message.get("activityType") not in owned_types
                return owned_types is _ABSENT and not has_activity
            return message.get("role") == "reasoning" and not has_reasoning

        merged = [snapshot.get(_id_of(m), m) for m in self.messages
                  if _id_of(m) in snapshot or kept_client_only(m)]
        present = {_id_of(m) for m in merged}
        for message in fresh:
            # ``present`` is not updated here, as in the client: an id the snapshot repeats is appended twice.
            if message.get("id") not in present:
                merged.append(message)
        self.messages = merged
        self.owned = {id(m) for m in fresh} | (self.owned & {id(m) for m in merged})
        self._reindex()

    def state_snapshot(self, event: dict) -> None:
        if "snapshot" not in event:
            raise _Skip("A STATE_SNAPSHOT without a snapshot was skipped.")
        self.state = copy.deepcopy(event["snapshot"])

    def state_delta(self, event: dict) -> None:
        try:
            self.state = apply_delta(self.state, event.get("delta"), max_bytes=self.max_state_bytes)
        except DeltaRefused as refused:
            # C59: all or nothing, the prior state kept, and said.
            self.warn(f"A state change was not applied, the state stays as it was: {refused.message}")

    def activity_snapshot(self, event: dict) -> None:
        message_id = _required_id(event, "messageId")
        activity_type = event.get("activityType")
        if not isinstance(activity_type, str) or "content" not in event:
            raise _Skip(f"The ACTIVITY_SNAPSHOT {message_id!r} lacks its type or content; it was skipped.")
        replace = event.get("replace")
        replace = True if replace is None else replace
        activity = {"id": message_id, "role": "activity", "activityType": activity_type,
                    "content": copy.deepcopy(event["content"])}
        if _owner(event) is not None:
            activity["subagentRunId"] = _owner(event)
        position = self.by_id.get(message_id)
        if position is None:
            _merge_metadata(activity, event)
            self._add(activity)
            return
        if self.messages[position].get("role") == "activity":
            message = self._own(position)
            if replace:
                # Content replaced, metadata kept; the owner is the new snapshot's.
                message["activityType"], message["content"] = activity_type, activity["content"]
                message.pop("subagentRunId", None)
                if _owner(event) is not None:
                    message["subagentRunId"] = _owner(event)
            _merge_metadata(message, event)
        elif replace:
            _merge_metadata(activity, event)
            self.messages[position] = activity
            self.owned.add(id(activity))
            self._reindex()

    def activity_delta(self, event: dict) -> None:
        message_id = _required_id(event, "messageId")
        position = self.by_id.get(message_id)
        if position is None:
            # The client skips it silently; 1.0 says a consumer SHOULD warn.
            raise _Skip(f"An ACTIVITY_DELTA names the message {message_id!r}, which the conversation does not "
                        "hold; it was skipped.")
        if self.messages[position].get("role") != "activity":
            raise _Skip(f"An ACTIVITY_DELTA names {message_id!r}, which is not an activity; it was skipped.")
        message = self._own(position)
        _merge_metadata(message, event)
        content = message.get("content")
        patch = event.get("patch")
        try:
            patched = apply_delta({} if content is None else content, [] if patch is None else patch,
                                  max_bytes=self.max_state_bytes)
        except DeltaRefused as refused:
            self.warn(f"A change to the activity {message_id!r} was not applied: {refused.message}")
            return
        message["content"] = patched
        if isinstance(event.get("activityType"), str):
            message["activityType"] = event["activityType"]
        else:
            message.pop("activityType", None)

    def run_started(self, event: dict) -> None:
        given = event.get("input")
        if not isinstance(given, dict) or not isinstance(given.get("messages"), list):
            return
        for message in given["messages"]:
            if not isinstance(message, dict) or not isinstance(message.get("id"), str):
                continue
            if message.get("id") in self.by_id:
                continue
            message = copy.deepcopy(message)
            if "subagentRunId" in message and message["subagentRunId"] is None:
                del message["subagentRunId"]
            self._add(message)


_ABSENT = object()


def _authoritative_activity_types(event: dict):
    """The client's ``@ag-ui/client`` snapshot metadata: which activity types the snapshot speaks for.

    ``_ABSENT``: undeclared (the snapshot speaks for activity if it holds any);
    None: every type; a list: those types.
    """
    metadata = event.get("metadata")
    if not isinstance(metadata, dict) or "@ag-ui/client" not in metadata:
        return _ABSENT
    value = metadata["@ag-ui/client"]
    if not isinstance(value, dict):
        return []
    if "authoritativeActivityTypes" not in value:
        return _ABSENT
    types = value["authoritativeActivityTypes"]
    if types is None:
        return None
    return types if isinstance(types, list) and all(isinstance(t, str) for t in types) else []


def _id_of(message: dict) -> str | None:
    value = message.get("id")
    return value if isinstance(value, str) else None


def _required_id(event: dict, key: str) -> str:
    value = event.get(key)
    if not isinstance(value, str):
        raise _Skip(f"A {event.get('type')} event without its {key} was skipped.")
    return value


def _has_metadata(event: dict) -> bool:
    return isinstance(event.get("metadata"), dict)


def _merge_metadata(target: dict, event: dict) -> None:
    """C46: key by key, last write wins, no recursion; the event's own values copied."""
    incoming = event.get("metadata")
    if not isinstance(incoming, dict):
        return
    existing = target.get("metadata")
    target["metadata"] = {**(existing if isinstance(existing, dict) else {}), **copy.deepcopy(incoming)}


def _calls_list(message: dict) -> list:
    calls = message.get("toolCalls")
    return calls if isinstance(calls, list) else []


def _calls(message: dict):
    return (call for call in _calls_list(message) if isinstance(call, dict))


def _own_call(call: object) -> object:
    if not isinstance(call, dict):
        return call
    call = dict(call)
    if isinstance(call.get("function"), dict):
        call["function"] = dict(call["function"])
    if isinstance(call.get("metadata"), dict):
        call["metadata"] = dict(call["metadata"])
    return call


_HANDLERS = {
    "TEXT_MESSAGE_START": _Folder.text_start,
    "TEXT_MESSAGE_CONTENT": _Folder.text_content,
    "TEXT_MESSAGE_END": _Folder.text_end,
    "TOOL_CALL_START": _Folder.tool_call_start,
    "TOOL_CALL_ARGS": _Folder.tool_call_args,
    "TOOL_CALL_END": _Folder.tool_call_end,
    "TOOL_CALL_RESULT": _Folder.tool_call_result,
    "REASONING_MESSAGE_START": _Folder.reasoning_start,
    "REASONING_MESSAGE_CONTENT": _Folder.text_content,
    "REASONING_MESSAGE_END": _Folder.text_end,
    "REASONING_ENCRYPTED_VALUE": _Folder.encrypted_value,
    "MESSAGES_SNAPSHOT": _Folder.messages_snapshot,
    "STATE_SNAPSHOT": _Folder.state_snapshot,
    "STATE_DELTA": _Folder.state_delta,
    "ACTIVITY_SNAPSHOT": _Folder.activity_snapshot,
    "ACTIVITY_DELTA": _Folder.activity_delta,
    "RUN_STARTED": _Folder.run_started,
}
