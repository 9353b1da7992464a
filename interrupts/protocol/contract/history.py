"""A gateway client's history against the thread's record: what a resume sends, or why it is refused.

Why it is shaped so: docs/internals/protocol.md (protocol/contract/history.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import ContractViolation, ProtocolError
from ..wire import DEFAULT_MAX_BYTES, _decode

#: Most messages a client's history may hold. A conversation this long is
#: already near the request's byte bound; the count bounds the work per message.
MAX_HISTORY_MESSAGES = 10_000

CONFLICT = "HISTORY_CONFLICT"
ANSWERS_INTERRUPT = "HISTORY_ANSWERS_INTERRUPT"


class History(NamedTuple):
    """A resume's messages: ``sent`` to the agent, and ``recorded`` as the thread's from now on.

    Both are the record then the client's additions; ``sent`` leaves the
    record's activity messages out (C53), ``recorded`` keeps them.
    """

    sent: list[Any]
    recorded: list[Any]


class Proposal(NamedTuple):
    """A tool call an interrupt concerns, as the reviewers were shown it.

    ``args`` is the parsed JSON the agent proposed, or its text when it was
    not JSON; ``name`` None when the call was never seen (nothing was shown).
    """

    interrupt_id: str
    name: str | None
    args: Any


def resume_messages(record: Sequence[Any], client: Sequence[Mapping[str, Any]],
                    concerned: Mapping[str, Proposal], *,
                    max_messages: int = MAX_HISTORY_MESSAGES) -> History:
    """The messages a resume sends: the record's, then the client's the record lacks; or a refusal.

    ``record`` is the thread's conversation (wire form), ``client`` the
    client's ``messages`` (wire form, as ``RunAgentInput`` parsed them),
    ``concerned`` the tool calls this batch's interrupts concern, by id.
    Raises ``ContractViolation`` (see the module docstring).
    """
    check_length(client, max_messages)
    held, calls, answers = _index(record)
    additions: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    added_calls: set[str] = set()
    added_answers: set[str] = set()
    for message in client:
        message_id = message.get("id")
        if message_id in seen:
            raise ContractViolation(CONFLICT, f"Message {message_id} appears twice in the history; a message id "
                                              "is unique within a thread.", message_id=message_id)
        seen.add(message_id)
        if message.get("role") == "activity":
            continue  # a client strips them (C53); one that did not has them dropped here
        if message_id in held:
            difference = _difference(held[message_id], message)
            if difference:
                raise ContractViolation(
                    CONFLICT, f"Message {message_id} of the history differs from the thread's record: {difference}. "
                              "Send the conversation as the agent's events built it.", message_id=message_id)
            continue
        for call in message.get("toolCalls") or ():
            _check_added_call(message_id, call, calls, added_calls, concerned)
        if message.get("role") == "tool":
            _check_added_answer(message, answers, added_answers, concerned)
        additions.append(message)
    kept = [m for m in record if not (isinstance(m, Mapping) and m.get("role") == "activity")]
    return History(kept + additions, list(record) + additions)


def check_length(client: Sequence[Any], max_messages: int = MAX_HISTORY_MESSAGES) -> None:
    """Refuse a history of more than ``max_messages`` messages (``TOO_LARGE``)."""
    if len(client) > max_messages:
        raise ContractViolation("TOO_LARGE", f"The history holds {len(client):,} messages; Countersign takes at "
                                             f"most {max_messages:,}.", limit=max_messages)


def _index(record: Sequence[Any]) -> tuple[dict[str, Mapping], dict[str, str], dict[str, str]]:
    """The record's messages by id, its tool calls' message ids by call id, its answers' message ids by call id."""
    held: dict[str, Mapping] = {}
    calls: dict[str, str] = {}
    answers: dict[str, str] = {}
    for message in record:
        if not isinstance(message, Mapping) or not isinstance(message.get("id"), str):
            continue  # sent as recorded, compared with nothing
        held.setdefault(message["id"], message)
        for call in message.get("toolCalls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                calls.setdefault(call["id"], message["id"])
        if message.get("role") == "tool" and isinstance(message.get("toolCallId"), str):
            answers.setdefault(message["toolCallId"], message["id"])
    return held, calls, answers


def _check_added_call(message_id: str, call: Mapping, calls: dict[str, str], added: set[str],
                      concerned: Mapping[str, Proposal]) -> None:
    call_id = call.get("id")
    if call_id in calls:
        raise ContractViolation(
            CONFLICT, f"Message {message_id} of the history carries tool call {call_id}, which the thread's record "
                      f"holds in message {calls[call_id]}.", message_id=message_id, tool_call_id=call_id)
    if call_id in added:
        raise ContractViolation(CONFLICT, f"Tool call {call_id} appears twice in the history.",
                                message_id=message_id, tool_call_id=call_id)
    added.add(call_id)
    proposal = concerned.get(call_id)
    if proposal is None:
        return
    function = call.get("function") or {}
    # The record lacks the call the reviewers decided (the agent streamed it
    # without a snapshot): the client's copy may stand in only as they saw it.
    if proposal.name is None or function.get("name") != proposal.name:
        raise ContractViolation(
            CONFLICT, f"Message {message_id} of the history names tool call {call_id}, which interrupt "
                      f"{proposal.interrupt_id} asks the reviewers about, as another tool than they were shown.",
            message_id=message_id, tool_call_id=call_id, interrupt_id=proposal.interrupt_id)
    if _args_key(function.get("arguments")) != _value_key(proposal.args):
        raise ContractViolation(
            CONFLICT, f"Message {message_id} of the history gives tool call {call_id}, which interrupt "
                      f"{proposal.interrupt_id} asks the reviewers about, other arguments than they were shown.",
            message_id=message_id, tool_call_id=call_id, interrupt_id=proposal.interrupt_id)


def _check_added_answer(message: Mapping, answers: dict[str, str], added: set[str],
                        concerned: Mapping[str, Proposal]) -> None:
    message_id, call_id = message.get("id"), message.get("toolCallId")
    if call_id in concerned:
        interrupt_id = concerned[call_id].interrupt_id
        raise ContractViolation(
            ANSWERS_INTERRUPT, f"Message {message_id} of the history answers tool call {call_id}, which interrupt "
                               f"{interrupt_id} asks the reviewers about: their decision answers it, not the "
                               "history. Leave that message out.",
            message_id=message_id, tool_call_id=call_id, interrupt_id=interrupt_id)
    if call_id in answers:
        raise ContractViolation(
            CONFLICT, f"Message {message_id} of the history answers tool call {call_id}, which message "
                      f"{answers[call_id]} of the thread's record already answers.",
            message_id=message_id, tool_call_id=call_id)
    if call_id in added:
        raise ContractViolation(CONFLICT, f"Tool call {call_id} is answered twice in the history.",
                                message_id=message_id, tool_call_id=call_id)
    added.add(call_id)


def _difference(recorded: Mapping, sent: Mapping) -> str:
    """What the client's copy of a recorded message says otherwise, in a few words; "" when nothing."""
    if sent.get("role") != recorded.get("role"):
        return f"its role is {_short(sent.get('role'))}, not {_short(recorded.get('role'))}"
    if _content_key(sent.get("content")) != _content_key(recorded.get("content")):
        return "its content is different"
    if sent.get("toolCallId") != recorded.get("toolCallId"):
        return f"it answers tool call {_short(sent.get('toolCallId'))}, not {_short(recorded.get('toolCallId'))}"
    if sent.get("error") != recorded.get("error"):
        return "its error is different"
    theirs, ours = _calls(sent), _calls(recorded)
    if theirs.keys() != ours.keys():
        return "it carries other tool calls"
    for call_id, (name, args) in ours.items():
        if theirs[call_id][0] != name:
            return f"its tool call {call_id} names another tool"
        if _args_key(theirs[call_id][1]) != _args_key(args):
            return f"its tool call {call_id} has other arguments"
    return ""


def _calls(message: Mapping) -> dict[Any, tuple[Any, Any]]:
    calls = {}
    for call in message.get("toolCalls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        calls[call.get("id") if isinstance(call, Mapping) else None] = (function.get("name"), function.get("arguments"))
    return calls


def _content_key(content: Any) -> str:
    # No content and empty text say the same (a client's TOOL_CALL_START opens
    # an assistant message without content, a snapshot may say "").
    return "" if content is None or content == "" else _canonical(content)


def _args_key(text: Any) -> tuple[str, str]:
    """Argument text as compared: its JSON value, canonical, or the text itself when it is not JSON."""
    if not isinstance(text, str):
        return ("other", _canonical(text))
    try:
        return ("json", _canonical(_decode(text, DEFAULT_MAX_BYTES, "The arguments")))
    except (ProtocolError, ValueError, RecursionError):
        return ("text", text)


def _value_key(value: Any) -> tuple[str, str]:
    # A proposal is stored parsed, or as its text when it did not parse.
    return _args_key(value) if isinstance(value, str) else ("json", _canonical(value))


def _canonical(value: Any) -> str:
    # Sorted keys, compact: true and 1, 1 and 1.0 stay apart (the strict side).
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _short(value: Any) -> str:
    return repr(value)[:80]
