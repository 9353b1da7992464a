"""Fold a thread's event log into what a person reads: bubbles, tool calls, runs.

Pure data in, plain dicts out (no Django, no HTML): the thread page renders
them with templates, first for the whole log, then for each slice that
arrives live. A slice may continue something an earlier slice began (a text
message's next delta, a tool call's next args); such items say so
(``continues``) and the page's script appends them to the element they
continue instead of adding a new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..protocol import storable


@dataclass
class Item:
    kind: str  # run-start, run-end, text, tool-call, tool-result, state, messages, note, event
    seq: int
    run_id: str = ""
    key: str = ""  # message id or tool call id: what a later delta continues
    continues: bool = False
    data: dict[str, Any] = field(default_factory=dict)


def _args_text(text: str) -> str:
    """Tool-call args as indented JSON when they parse (and can be shown), as sent otherwise."""
    decoded, value = storable.embedded(text)
    return json.dumps(value, indent=2, ensure_ascii=False) if decoded else text


def _subagent(interrupt: dict) -> str | None:
    # As selectors.subagent_run_id reads an interrupt row: a non-empty string, or nothing.
    value = interrupt.get("subagentRunId")
    return value if isinstance(value, str) and value else None


def fold(events, said: dict[str, str] | None = None, raised: dict[str, dict] | None = None) -> list[Item]:
    """Items for events given as (seq, type, payload, run_id, from_agent), in order.

    ``said`` maps a run id to the user message its input carried, shown at
    the run's start (it is part of the input, not of the agent's stream).
    ``raised`` maps a run that paused to its outcome as Countersign read it:
    a run of another dialect (LangGraph's on_interrupt) ends with a
    RUN_FINISHED that says nothing of its interrupts, and must not read as success.
    """
    said, raised = said or {}, raised or {}
    items: list[Item] = []
    open_text: dict[str, Item] = {}
    open_calls: dict[str, Item] = {}

    for seq, kind, payload, run_id, from_agent in events:
        if kind == "RUN_STARTED":
            items.append(Item("run-start", seq, run_id, data={"parent": payload.get("parentRunId"),
                                                                "user": said.get(run_id)}))
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            if kind == "RUN_FINISHED" and from_agent and not payload.get("outcome") and run_id in raised:
                payload = {**payload, "outcome": raised[run_id]}  # the dialect's reading
            outcome = (payload.get("outcome") or {}).get("type", "success") if kind == "RUN_FINISHED" else "error"
            items.append(Item("run-end", seq, run_id, data={
                "outcome": outcome,
                # Each raised interrupt's id, and the subagent run that raised it when the agent says so.
                "interrupts": [{"id": i.get("id"), "subagent_run_id": _subagent(i)}
                               for i in (payload.get("outcome") or {}).get("interrupts", [])],
                "code": payload.get("code"),
                "message": payload.get("message"),
                "from_agent": from_agent,
            }))
        elif kind == "TEXT_MESSAGE_START":
            item = Item("text", seq, run_id, key=payload.get("messageId", ""), data={
                "role": payload.get("role", "assistant"), "text": ""})
            open_text[item.key] = item
            items.append(item)
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK"):
            key = payload.get("messageId", "")
            delta = payload.get("delta") or ""
            if key in open_text:
                open_text[key].data["text"] += delta
            else:
                items.append(Item("text", seq, run_id, key=key, continues=True,
                                  data={"role": payload.get("role", "assistant"), "text": delta}))
        elif kind == "TOOL_CALL_START":
            item = Item("tool-call", seq, run_id, key=payload.get("toolCallId", ""),
                        data={"name": payload.get("toolCallName", ""), "args": ""})
            open_calls[item.key] = item
            items.append(item)
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_CHUNK"):
            key = payload.get("toolCallId", "")
            delta = payload.get("delta") or ""
            if key in open_calls:
                open_calls[key].data["args"] += delta
            else:
                items.append(Item("tool-call", seq, run_id, key=key, continues=True, data={"name": "", "args": delta}))
        elif kind == "TOOL_CALL_END":
            key = payload.get("toolCallId", "")
            if key in open_calls:
                open_calls[key].data["args"] = _args_text(open_calls[key].data["args"])
        elif kind == "TOOL_CALL_RESULT":
            items.append(Item("tool-result", seq, run_id, key=payload.get("toolCallId", ""),
                              data={"content": _args_text(payload.get("content") or "")}))
        elif kind == "STATE_SNAPSHOT":
            items.append(Item("state", seq, run_id, data={"snapshot": payload.get("snapshot")}))
        elif kind == "STATE_DELTA":
            items.append(Item("state", seq, run_id, data={"delta": payload.get("delta")}))
        elif kind == "MESSAGES_SNAPSHOT":
            items.append(Item("messages", seq, run_id, data={"count": len(payload.get("messages") or []),
                                                               "messages": payload.get("messages")}))
        elif kind == "CUSTOM":
            items.append(Item("note", seq, run_id, data={"name": payload.get("name"), "value": payload.get("value"),
                                                           "from_agent": from_agent}))
        elif kind == "TEXT_MESSAGE_END":
            continue
        else:
            items.append(Item("event", seq, run_id, data={"type": kind, "payload": payload}))
    return items
